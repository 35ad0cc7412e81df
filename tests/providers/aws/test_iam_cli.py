"""``eni-ipam aws-iam-policy`` prints the renderer's policy, and exits 2 naming the option it refuses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from eni_ipam.cli import main
from providers.aws.iam_policy import EXAMPLE, render_policy

ARGS = [
    "aws-iam-policy",
    "--account-id",
    "111122223333",
    "--region",
    "eu-west-1",
    "--vpc-id",
    "vpc-0123456789abcdef0",
    "--cluster-name",
    "prod-eu",
    "--subnet-id",
    "subnet-0123456789abcdef0",
    "--subnet-id",
    "subnet-0fedcba9876543210",
    "--security-group-id",
    "sg-0123456789abcdef0",
]


def test_it_prints_the_example_policy(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(ARGS) == 0
    out = capsys.readouterr().out
    assert json.loads(out) == render_policy(**EXAMPLE)
    assert out == (Path(__file__).parents[3] / "deploy" / "aws" / "iam-policy.json").read_text()


def test_partition_and_instance_tag(capsys: pytest.CaptureFixture[str]) -> None:
    args = [*ARGS, "--partition", "aws-cn", "--region", "cn-north-1", "--instance-tag", "pool=a=b"]
    assert main(args) == 0
    policy = json.loads(capsys.readouterr().out)
    inputs: dict[str, Any] = {**EXAMPLE, "partition": "aws-cn", "region": "cn-north-1"}
    assert policy == render_policy(**inputs, instance_tag=("pool", "a=b"))
    assert all(
        r == "*" or r.startswith("arn:aws-cn:ec2:cn-north-1:111122223333:")
        for s in policy["Statement"]
        for r in ([s["Resource"]] if isinstance(s["Resource"], str) else s["Resource"])
    )


def test_interface_tag_keys_join_the_allowed_keys(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*ARGS, "--interface-tag-key", "team", "--interface-tag-key", "cost-center"]) == 0
    policy = json.loads(capsys.readouterr().out)
    assert policy == render_policy(**EXAMPLE, interface_tag_keys=["team", "cost-center"])


def test_a_reserved_or_repeated_interface_tag_key_is_refused_naming_the_option(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for keys in (["aws:cloudformation:stack-name"], ["team", "team"], [""]):
        args = [a for k in keys for a in ("--interface-tag-key", k)]
        with pytest.raises(SystemExit) as exit:
            main([*ARGS, *args])
        assert exit.value.code == 2
        assert "--interface-tag-key" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--account-id", "11112222333"),
        ("--account-id", "11112222333a"),
        ("--region", "eu_west_1"),
        ("--region", "Ireland"),
        ("--vpc-id", "vpc-123"),
        ("--subnet-id", "subnet-0123456789ABCDEF0"),
        ("--subnet-id", "sg-0123456789abcdef0"),
        ("--security-group-id", "sg-01"),
        ("--partition", "gcp"),
        ("--instance-tag", "owned"),
        ("--instance-tag", "=owned"),
        ("--cluster-name", ""),
    ],
)
def test_a_bad_value_exits_2_naming_the_option(
    option: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main([*ARGS, option, value])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert option in err and "Traceback" not in err, err


def test_a_subnet_listed_twice_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main([*ARGS, "--subnet-id", "subnet-0123456789abcdef0"])
    assert info.value.code == 2 and "--subnet-id" in capsys.readouterr().err


def test_every_required_option_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    for option in (
        "--account-id",
        "--region",
        "--vpc-id",
        "--cluster-name",
        "--subnet-id",
        "--security-group-id",
    ):
        args = [a for i, a in enumerate(ARGS) if a != option and (i == 0 or ARGS[i - 1] != option)]
        with pytest.raises(SystemExit) as info:
            main(args)
        assert info.value.code == 2 and option in capsys.readouterr().err, option
