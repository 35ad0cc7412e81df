"""Tests for scripts/gen_instance_types.py and the shipped instance-type table."""

from __future__ import annotations

import copy
import importlib.util
import json
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPT = REPO_ROOT / "scripts" / "gen_instance_types.py"
SHIPPED = REPO_ROOT / "providers" / "ec2" / "instance_types.json"
SNAPSHOT = REPO_ROOT / "scripts" / "data" / "describe-instance-types.json"


def _load_script():
    spec = importlib.util.spec_from_file_location("gen_instance_types", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gen = _load_script()


# A saved DescribeInstanceTypes response with three types: a plain Nitro type,
# a type with several network cards whose default card is not listed first,
# and a bare-metal type (which EC2 reports without a Hypervisor).
FIXTURE = {
    "InstanceTypes": [
        {
            "InstanceType": "m5.large",
            "Hypervisor": "nitro",
            "BareMetal": False,
            "NetworkInfo": {
                "MaximumNetworkInterfaces": 3,
                "Ipv4AddressesPerInterface": 10,
                "Ipv6AddressesPerInterface": 10,
                "Ipv6Supported": True,
                "DefaultNetworkCardIndex": 0,
                "NetworkCards": [{"NetworkCardIndex": 0, "MaximumNetworkInterfaces": 3}],
            },
        },
        {
            "InstanceType": "p4d.24xlarge",
            "Hypervisor": "nitro",
            "BareMetal": False,
            "NetworkInfo": {
                "MaximumNetworkInterfaces": 60,
                "Ipv4AddressesPerInterface": 50,
                "Ipv6AddressesPerInterface": 50,
                "Ipv6Supported": True,
                "DefaultNetworkCardIndex": 2,
                "NetworkCards": [
                    {"NetworkCardIndex": 1, "MaximumNetworkInterfaces": 16},
                    {"NetworkCardIndex": 0, "MaximumNetworkInterfaces": 15},
                    {"NetworkCardIndex": 3, "MaximumNetworkInterfaces": 15},
                    {"NetworkCardIndex": 2, "MaximumNetworkInterfaces": 14},
                ],
            },
        },
        {
            "InstanceType": "c5.metal",
            "BareMetal": True,
            "NetworkInfo": {
                "MaximumNetworkInterfaces": 15,
                "Ipv4AddressesPerInterface": 50,
                "Ipv6AddressesPerInterface": 50,
                "Ipv6Supported": True,
            },
        },
    ]
}

EXPECTED_TYPES = {
    "c5.metal": {"adapters": 15, "ipv4": 50, "ipv6": 50, "hypervisor": "", "bare_metal": True},
    "m5.large": {"adapters": 3, "ipv4": 10, "ipv6": 10, "hypervisor": "nitro", "bare_metal": False},
    "p4d.24xlarge": {"adapters": 14, "ipv4": 50, "ipv6": 50, "hypervisor": "nitro", "bare_metal": False},
}


def _write(path: Path, doc) -> Path:
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


# --------------------------------------------------------------------------
# Conversion of a saved DescribeInstanceTypes response
# --------------------------------------------------------------------------


def test_converts_fixture(tmp_path):
    types, source = gen.load_files([_write(tmp_path / "page.json", FIXTURE)])
    assert types == EXPECTED_TYPES
    assert source == "EC2 DescribeInstanceTypes (saved output)"


def test_adapters_come_from_the_default_card_not_the_total():
    _, row = gen.convert_record(FIXTURE["InstanceTypes"][1], "InstanceTypes[1]")
    assert row["adapters"] == 14  # card index 2, not 60 (total) nor 16 (first listed)


def test_missing_default_card_index_means_card_zero():
    record = copy.deepcopy(FIXTURE["InstanceTypes"][1])
    del record["NetworkInfo"]["DefaultNetworkCardIndex"]
    _, row = gen.convert_record(record, "InstanceTypes[0]")
    assert row["adapters"] == 15


def test_without_network_cards_adapters_is_maximum_network_interfaces():
    _, row = gen.convert_record(FIXTURE["InstanceTypes"][2], "InstanceTypes[2]")
    assert row["adapters"] == 15
    assert row["hypervisor"] == ""
    assert row["bare_metal"] is True


def test_xen_type_without_ipv6():
    record = {
        "InstanceType": "m3.large",
        "Hypervisor": "xen",
        "BareMetal": False,
        "NetworkInfo": {
            "MaximumNetworkInterfaces": 3,
            "Ipv4AddressesPerInterface": 10,
            "Ipv6Supported": False,
        },
    }
    name, row = gen.convert_record(record, "InstanceTypes[0]")
    assert name == "m3.large"
    assert row == {"adapters": 3, "ipv4": 10, "ipv6": 0, "hypervisor": "xen", "bare_metal": False}


def test_render_is_sorted_stable_and_valid_json():
    text = gen.render(EXPECTED_TYPES, "unit test")
    assert text.endswith("}\n") and not text.endswith("\n\n")
    doc = json.loads(text)
    assert doc == {"source": "unit test", "types": EXPECTED_TYPES}
    assert list(doc["types"]) == ["c5.metal", "m5.large", "p4d.24xlarge"]
    shuffled = dict(reversed(list(EXPECTED_TYPES.items())))
    assert gen.render(shuffled, "unit test") == text
    assert (
        '"m5.large": {"adapters": 3, "ipv4": 10, "ipv6": 10, "hypervisor": "nitro", '
        '"bare_metal": false}' in text
    )


def test_merges_several_files_and_pages(tmp_path):
    first = {"InstanceTypes": FIXTURE["InstanceTypes"][:2], "NextToken": "abc"}
    # A second region repeats m5.large identically; pages may also be a list.
    second = [
        {"InstanceTypes": [FIXTURE["InstanceTypes"][0]]},
        {"InstanceTypes": [FIXTURE["InstanceTypes"][2]], "_source": "two pages"},
    ]
    types, source = gen.load_files([_write(tmp_path / "a.json", first), _write(tmp_path / "b.json", second)])
    assert types == EXPECTED_TYPES
    assert source == "two pages"


def test_conflicting_duplicates_are_rejected(tmp_path):
    other = copy.deepcopy(FIXTURE["InstanceTypes"][0])
    other["NetworkInfo"]["Ipv4AddressesPerInterface"] = 12
    a = _write(tmp_path / "a.json", FIXTURE)
    b = _write(tmp_path / "b.json", {"InstanceTypes": [other]})
    with pytest.raises(gen.InputError, match=r"b\.json: InstanceTypes\[0\]: conflicting data for m5\.large"):
        gen.load_files([a, b])


# --------------------------------------------------------------------------
# Validation errors name the bad field
# --------------------------------------------------------------------------


def _bad_fixture(mutate):
    doc = copy.deepcopy(FIXTURE)
    mutate(doc["InstanceTypes"])
    return doc


@pytest.mark.parametrize(
    "mutate, message",
    [
        (
            lambda r: r[1]["NetworkInfo"].pop("Ipv4AddressesPerInterface"),
            "InstanceTypes[1].NetworkInfo.Ipv4AddressesPerInterface: missing",
        ),
        (
            lambda r: r[0]["NetworkInfo"].__setitem__("MaximumNetworkInterfaces", "3"),
            'InstanceTypes[0].NetworkInfo.MaximumNetworkInterfaces: expected an integer, got "3"',
        ),
        (lambda r: r[2].pop("NetworkInfo"), "InstanceTypes[2].NetworkInfo: missing"),
        (lambda r: r[0].pop("InstanceType"), "InstanceTypes[0].InstanceType: missing"),
        (
            lambda r: r[0].__setitem__("Hypervisor", "kvm"),
            'InstanceTypes[0].Hypervisor: expected one of nitro, xen, got "kvm"',
        ),
        (
            lambda r: r[1]["NetworkInfo"].__setitem__("DefaultNetworkCardIndex", 7),
            "InstanceTypes[1].NetworkInfo.DefaultNetworkCardIndex: no NetworkCards entry with index 7",
        ),
        (
            lambda r: r[1]["NetworkInfo"]["NetworkCards"][2].pop("MaximumNetworkInterfaces"),
            "InstanceTypes[1].NetworkInfo.NetworkCards[2].MaximumNetworkInterfaces: missing",
        ),
        (
            lambda r: r[2].__setitem__("BareMetal", "yes"),
            'InstanceTypes[2].BareMetal: expected true or false, got "yes"',
        ),
    ],
)
def test_bad_record_error_names_the_field(tmp_path, mutate, message):
    path = _write(tmp_path / "bad.json", _bad_fixture(mutate))
    with pytest.raises(gen.InputError) as excinfo:
        gen.load_files([path])
    assert str(excinfo.value) == f"{path}: {message}"


def test_cli_reports_bad_record_and_fails(tmp_path, capsys):
    doc = _bad_fixture(lambda r: r[1]["NetworkInfo"].pop("Ipv4AddressesPerInterface"))
    src = _write(tmp_path / "bad.json", doc)
    out = tmp_path / "table.json"
    rc = gen.main(["--from-file", str(src), "--output", str(out)])
    assert rc == 2
    assert "InstanceTypes[1].NetworkInfo.Ipv4AddressesPerInterface: missing" in capsys.readouterr().err
    assert not out.exists()


def test_missing_instance_types_key(tmp_path):
    path = _write(tmp_path / "empty.json", {"Reservations": []})
    with pytest.raises(gen.InputError, match=r"empty\.json: InstanceTypes: missing"):
        gen.load_files([path])


# --------------------------------------------------------------------------
# CLI: write and --check
# --------------------------------------------------------------------------


def test_cli_writes_then_check_passes_and_detects_drift(tmp_path, capsys):
    src = _write(tmp_path / "page.json", FIXTURE)
    out = tmp_path / "table.json"
    assert gen.main(["--from-file", str(src), "--output", str(out), "--source", "fixture"]) == 0
    assert json.loads(out.read_text()) == {"source": "fixture", "types": EXPECTED_TYPES}

    args = ["--from-file", str(src), "--output", str(out), "--source", "fixture", "--check"]
    assert gen.main(args) == 0

    out.write_text(out.read_text().replace('"ipv4": 10', '"ipv4": 11'))
    before = out.read_text()
    assert gen.main(args) == 1
    assert out.read_text() == before  # --check never writes
    assert "out of date" in capsys.readouterr().err

    out.unlink()
    assert gen.main(args) == 1


class _FakePaginator:
    def __init__(self, pages):
        self._pages = pages

    def paginate(self):
        return iter(self._pages)


class _FakeClient:
    def __init__(self, pages, calls):
        self._pages = pages
        self._calls = calls

    def get_paginator(self, operation):
        self._calls.append(operation)
        return _FakePaginator(self._pages)


def test_from_api_paginates_every_region_and_merges(tmp_path, monkeypatch):
    import types as pytypes

    records = FIXTURE["InstanceTypes"]
    by_region = {
        "us-east-1": [{"InstanceTypes": records[:1], "NextToken": "t"}, {"InstanceTypes": records[1:2]}],
        "eu-west-1": [{"InstanceTypes": records[1:]}],
    }
    calls = []

    class Session:
        def __init__(self, region_name):
            self.region = region_name

        def client(self, service):
            assert service == "ec2"
            return _FakeClient(by_region[self.region], calls)

    fake = pytypes.ModuleType("boto3")
    fake.session = pytypes.SimpleNamespace(Session=Session)
    monkeypatch.setitem(sys.modules, "boto3", fake)

    out = tmp_path / "table.json"
    assert gen.main(["--from-api", "--regions", "us-east-1,eu-west-1", "--output", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["types"] == EXPECTED_TYPES
    assert doc["source"] == "EC2 DescribeInstanceTypes API, regions: eu-west-1, us-east-1"
    assert calls == ["describe_instance_types", "describe_instance_types"]


def test_from_api_requires_regions():
    with pytest.raises(SystemExit):
        gen.main(["--from-api"])


# --------------------------------------------------------------------------
# The shipped table
# --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def shipped():
    return json.loads(SHIPPED.read_text(encoding="utf-8"))


def test_shipped_table_matches_snapshot_regeneration():
    types, source = gen.load_files([SNAPSHOT])
    assert gen.render(types, source) == SHIPPED.read_text(encoding="utf-8")


def test_shipped_table_size_and_shape(shipped):
    assert set(shipped) == {"source", "types"}
    assert shipped["source"]
    types = shipped["types"]
    assert len(types) > 700
    assert list(types) == sorted(types)
    for name, row in types.items():
        assert list(row)[:5] == ["adapters", "ipv4", "ipv6", "hypervisor", "bare_metal"], name
        assert list(row)[5:] in ([], ["cards"]), name
        if "cards" in row:  # several network cards, card 0 the default's
            assert len(row["cards"]) > 1 and row["cards"][0] == row["adapters"], name
        assert row["hypervisor"] in ("nitro", "xen", ""), name
        assert row["adapters"] >= 1 and row["ipv4"] >= 1 and row["ipv6"] >= 0, name


@pytest.mark.parametrize(
    "name, adapters, ipv4, hypervisor",
    [
        ("m5.large", 3, 10, "nitro"),
        ("m5a.large", 3, 10, "nitro"),
        ("m5.xlarge", 4, 15, "nitro"),
        ("m5.4xlarge", 8, 30, "nitro"),
        ("m4.large", 2, 10, "xen"),
        ("m4.xlarge", 4, 15, "xen"),
        ("m3.large", 3, 10, "xen"),
        ("t2.xlarge", 3, 15, "xen"),
        ("t2.micro", 2, 2, "xen"),
        ("t3.micro", 2, 2, "nitro"),
        ("t3.medium", 3, 6, "nitro"),
        ("c3.xlarge", 4, 15, "xen"),
        ("c5.large", 3, 10, "nitro"),
        ("c5.18xlarge", 15, 50, "nitro"),
        ("m5.24xlarge", 15, 50, "nitro"),
        ("p4d.24xlarge", 15, 50, "nitro"),  # default card of four
    ],
)
def test_shipped_known_rows(shipped, name, adapters, ipv4, hypervisor):
    row = shipped["types"][name]
    assert (row["adapters"], row["ipv4"], row["hypervisor"]) == (adapters, ipv4, hypervisor)
    assert row["bare_metal"] is False


@pytest.mark.parametrize("name", ["c5.metal", "m5.metal", "i3.metal", "m7i.metal-24xl", "mac2.metal"])
def test_shipped_metal_types_have_no_hypervisor(shipped, name):
    row = shipped["types"][name]
    assert row["bare_metal"] is True
    assert row["hypervisor"] == ""


def test_shipped_metal_flag_and_hypervisor_agree(shipped):
    metal = {n for n, r in shipped["types"].items() if r["bare_metal"]}
    assert len(metal) > 50
    assert all(shipped["types"][n]["hypervisor"] == "" for n in metal)
