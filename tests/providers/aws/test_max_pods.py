"""max-pods: the pods a node of an instance type can run, against the AWS VPC CNI's published table
(tests/providers/aws/data/vpc-cni-eni-max-pods.txt, aws/amazon-vpc-cni-k8s misc/eni-max-pods.txt at
b52188387f2e, 2026-08-20, Apache-2.0), and where eni-ipam's pool sizes it otherwise."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eni_ipam.cli import main
from eni_ipam.core.watermarks import max_pods
from providers.ec2.limits import instance_limits, load_limits

TABLE = Path(__file__).parent / "data" / "vpc-cni-eni-max-pods.txt"


def vpc_cni_table() -> dict[str, int]:
    rows = {}
    for line in TABLE.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, value = line.split()
            rows[name] = int(value)
    return rows


def test_a_plain_pool_on_card_0_is_the_vpc_cnis_table_for_every_type_both_know() -> None:
    table, ours = vpc_cni_table(), load_limits()
    common = sorted(set(table) & set(ours))
    assert len(common) > 1300, "the shipped table and the VPC CNI's share too few types"
    wrong = {n: (table[n], max_pods(ours[n])) for n in common if max_pods(ours[n]) != table[n]}
    assert not wrong, wrong


@pytest.mark.parametrize(
    ("instance_type", "fields", "pods"),
    [
        ("m5.large", {}, 3 * 9 + 2),
        ("m5.large", {"prefix_delegated": True}, 3 * 9 * 16 + 2),  # the VPC CNI's calculator caps at 110
        ("m5.large", {"first_interface_index": 1}, 2 * 9 + 2),  # custom networking: (ENIs - 1) × …
        ("m5.large", {"max_allocate": 10}, 12),
        ("m5.large", {"host_network_pods": 5}, 3 * 9 + 5),
        ("p5.48xlarge", {}, 2 * 49 + 2),  # card 0, as the table has it
        ("p5.48xlarge", {"network_cards": (0, 1, 2, 3)}, 8 * 49 + 2),
        ("p5.48xlarge", {"network_cards": (0, 1), "first_interface_index": 1}, 3 * 49 + 2),
        (
            "p5.48xlarge",
            {"network_cards": tuple(range(32)), "prefix_delegated": True},
            32_768 + 2,
        ),  # a status's bound
        ("m5.large", {"network_cards": (0, 1)}, 3 * 9 + 2),  # a card the type lacks adds nothing
    ],
)
def test_prefixes_custom_networking_cards_and_the_pools_bounds(
    instance_type: str, fields: dict[str, object], pods: int
) -> None:
    limits = instance_limits(instance_type)
    assert limits is not None
    assert max_pods(limits, **fields) == pods  # type: ignore[arg-type]


def test_the_command_prints_each_type_and_says_why_it_differs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["max-pods", "m5.large", "p5.48xlarge", "--network-cards", "0,1", "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["instance_type"], r["max_pods"], r["vpc_cni_table"]) for r in lines] == [
        ("m5.large", 29, 29),
        ("p5.48xlarge", 198, 100),
    ]
    assert lines[0]["differs"] == [] and "card 0 only" in lines[1]["differs"][0]
    assert main(["max-pods", "m4.large", "--prefix-delegation"]) == 0  # Xen: no prefixes
    assert "no prefixes on this type" not in capsys.readouterr().out  # same figure: nothing to explain


@pytest.mark.parametrize(
    ("argv", "names"),
    [
        (["max-pods", "x9.nothing"], "INSTANCE_TYPE: x9.nothing"),
        (["max-pods", "m5.large", "--network-cards", "0,0"], "--network-cards"),
        (["max-pods", "m5.large", "--max-allocate", "-1"], "--max-allocate"),
    ],
)
def test_bad_input_names_the_option_and_exits_2(
    argv: list[str], names: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2 and names in capsys.readouterr().err
