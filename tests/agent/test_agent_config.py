"""The agent's configuration: defaults, static pools, and errors that name the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from eni_ipam.agent.config import agent_config_from_mapping, load_agent_config
from eni_ipam.errors import ConfigError


def test_defaults_follow_the_nodes_enipool() -> None:
    config = load_agent_config(None)
    assert config.node_source == "kubernetes" and config.socket == "/run/eni-ipam/agent.sock"
    assert config.ipv4 and not config.ipv6 and config.pools == ()


def test_static_pool_from_ranges_skips_the_gateway() -> None:
    config = agent_config_from_mapping(
        {
            "node_source": "memory",
            "pools": {"default": {"cidr": "10.99.0.0/24", "ranges": ["10.99.0.1-10.99.0.4", "10.99.0.9"]}},
        }
    )
    (pool,) = config.pools
    assert pool.gateway == "10.99.0.1"
    assert [a.address for a in pool.addresses] == ["10.99.0.2", "10.99.0.3", "10.99.0.4", "10.99.0.9"]
    assert {(a.prefix_length, a.gateway) for a in pool.addresses} == {(24, "10.99.0.1")}


def test_ipv6_pool_with_a_gateway() -> None:
    config = agent_config_from_mapping(
        {
            "ipv6": True,
            "pools": {"v6": {"cidr": "fd00::/120", "gateway": "fd00::fe", "ranges": ["fd00::10-fd00::12"]}},
        }
    )
    assert [a.address for a in config.pools[0].addresses] == ["fd00::10", "fd00::11", "fd00::12"]


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"node_source": "etcd"}, "node_source"),
        ({"colour": 1}, "colour"),
        ({"ipv4": False}, "ipv4"),
        ({"node_source": "memory"}, "pools.default"),
        ({"pools": {"default": {"cidr": "10.0.0.0/24"}}}, "pools.default"),
        ({"pools": {"p": {}}}, "pools.p.cidr"),
        ({"pools": {"p": {"cidr": "10.0.0.1/24"}}}, "pools.p.cidr"),
        ({"pools": {"p": {"cidr": "10.0.0.0/24", "gateway": "10.0.1.1"}}}, "pools.p.gateway"),
        ({"pools": {"p": {"cidr": "10.0.0.0/24", "ranges": ["10.0.0.9-10.0.0.3"]}}}, "pools.p.ranges[0]"),
        ({"pools": {"p": {"cidr": "10.0.0.0/24", "ranges": ["10.0.1.9"]}}}, "pools.p.ranges[0]"),
        ({"pools": {"p": {"cidr": "10.0.0.0/8"}}}, "pools.p.ranges"),
        ({"server": {"port": "x"}}, "server.port"),
        ({"report_interval": 0}, "report_interval"),
        ({"server": {"port": 99999}}, "server.port"),
        ({"socket": "agent.sock"}, "socket"),
        ({"socket": "/run/" + "x" * 103}, "socket"),
        ({"socket": "/run/eni\0.sock"}, "socket"),
    ],
)
def test_bad_values_name_their_field(data: dict, field: str) -> None:
    with pytest.raises(ConfigError) as info:
        agent_config_from_mapping(data)
    assert info.value.field == field


def test_file_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_agent_config(tmp_path / "missing.yaml")
    bad = tmp_path / "agent.yaml"
    bad.write_text("pools: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_agent_config(bad)
    with pytest.raises(ConfigError, match="larger than 4 MiB"):
        load_agent_config("/dev/zero")  # read with a limit: not for ever


def test_a_key_written_twice_is_refused_with_its_lines(tmp_path: Path) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text("node_source: memory\nipv6: true\nipv6: false\n")
    with pytest.raises(ConfigError) as info:
        load_agent_config(path)
    assert "duplicate key 'ipv6' (line 3; first on line 2)" in str(info.value)
    assert str(path) in str(info.value)


def test_a_range_without_an_end_is_refused_rather_than_read_as_one_address() -> None:
    pools = {"default": {"cidr": "10.0.0.0/24", "ranges": ["10.0.0.5-"]}}
    with pytest.raises(ConfigError) as info:
        agent_config_from_mapping({"node_source": "memory", "pools": pools})
    assert info.value.field == "pools.default.ranges[0]" and "no end" in info.value.message


def test_the_reuse_quarantine_outlasts_conntracks_syn_sent_timeout_by_default() -> None:
    config = load_agent_config(None)
    assert config.reuse_quarantine_seconds > 120 and config.reuse_quarantine_endpointslices
    assert agent_config_from_mapping({"reuse_quarantine_seconds": "5m"}).reuse_quarantine_seconds == 300
    assert agent_config_from_mapping({"reuse_quarantine_seconds": 0}).reuse_quarantine_seconds == 0


@pytest.mark.parametrize("value", [-1, "2d", True])
def test_a_bad_reuse_quarantine_names_the_field(value: object) -> None:
    with pytest.raises(ConfigError, match="reuse_quarantine_seconds"):
        agent_config_from_mapping({"reuse_quarantine_seconds": value})


@pytest.mark.parametrize("value", ["bad key", "-leading", "a/" + "x" * 64, "Upper.Domain/x"])
def test_a_startup_taint_that_is_no_taint_key_names_the_field(value: str) -> None:
    with pytest.raises(ConfigError, match=r"startup_taint: .* is not a taint key"):
        agent_config_from_mapping({"startup_taint": value})


@pytest.mark.parametrize("value", ["eni-ipam.io/not-ready", "node.example.com/starting", "plain", ""])
def test_a_startup_taint_key_or_nothing_is_taken(value: str) -> None:
    assert agent_config_from_mapping({"startup_taint": value}).startup_taint == value
