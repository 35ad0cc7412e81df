"""The run configuration: every bad value names its field; environment overrides; provider plug-ins."""

from __future__ import annotations

from pathlib import Path

import pytest

from eni_ipam.app.runconfig import DEFAULT_CONFIG, load_config, load_config_mapping
from eni_ipam.core.errors import ConfigError

SIM = {"cloud": {"vpcs": [{"id": "vpc-1", "cidr": "10.0.0.0/16"}]}}


def test_embedded_default_runs_the_in_memory_cloud_alone() -> None:
    config = load_config(None)
    assert (config.provider, config.node_source) == ("sim", "memory")
    assert [n.spec.name for n in config.nodes] == ["node-1", "node-2", "node-3"]
    assert config.nodes[1].spec.pre_allocate == 12
    assert config.kubernetes.lease_duration == 15.0


def test_file_is_read_and_environment_overrides_it(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(DEFAULT_CONFIG)
    config = load_config(
        path,
        {
            "ENI_IPAM_SETTINGS__GC_INTERVAL": "10m",
            "ENI_IPAM_KUBERNETES__LEASE_NAME": "other",
            "ENI_IPAM_LOG_LEVEL": "debug",
            "UNRELATED": "x",
        },
    )
    assert config.settings.gc_interval == 600.0
    assert config.kubernetes.lease_name == "other"
    assert config.log_level == "debug"


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({}, "provider"),
        ({"provider": "gcp"}, "provider"),
        ({"provider": "sim", "sim": SIM, "bogus": 1}, "bogus"),
        ({"provider": "sim", "sim": SIM, "node_source": "etcd"}, "node_source"),
        ({"provider": "sim", "sim": SIM, "settings": {"parallel_workers": 0}}, "settings.parallel_workers"),
        (
            {"provider": "sim", "sim": SIM, "kubernetes": {"renew_deadline": "20s"}},
            "kubernetes.lease_duration",
        ),
        ({"provider": "sim", "sim": SIM, "kubernetes": {"retry_period": "10s"}}, "kubernetes.renew_deadline"),
        ({"provider": "sim", "sim": SIM, "kubernetes": {"status_qps": 0}}, "kubernetes.status_qps"),
        ({"provider": "sim", "sim": SIM, "server": {"port": 70000}}, "server.port"),
        (
            {"provider": "sim", "sim": SIM, "node_defaults": {"min_allocate": -1}},
            "node_defaults.min_allocate",
        ),
        ({"provider": "sim", "sim": SIM, "node_defaults": {"colour": "red"}}, "node_defaults.colour"),
        ({"provider": "sim", "sim": SIM, "nodes": [{"name": "a", "instance": "i-1"}]}, "nodes"),
        ({"provider": "sim", "sim": SIM, "aws": {"region": "eu-west-1"}}, "aws"),
        ({"provider": "sim", "sim": {"cloud": {"vpcs": [{"id": "v"}]}}}, "sim.cloud.vpcs[0].cidr"),
        ({"provider": "sim"}, "sim"),
        ({"provider": "aws", "aws": {"region": "nowhere"}}, "aws.region"),
        ({"provider": "sim", "sim": SIM, "shutdown_timeout": "soon"}, "shutdown_timeout"),
    ],
)
def test_bad_values_name_their_field(data: dict, field: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config_mapping(data)
    assert info.value.field == field


def test_memory_nodes_are_checked_one_by_one() -> None:
    base = {"provider": "sim", "sim": SIM, "node_source": "memory"}
    with pytest.raises(ConfigError) as info:
        load_config_mapping(
            {**base, "nodes": [{"name": "a", "instance": "i-1"}, {"name": "a", "instance": "i-2"}]}
        )
    assert info.value.field == "nodes[1].name"
    with pytest.raises(ConfigError) as info:
        load_config_mapping({**base, "nodes": [{"name": "a", "instance": "i-1", "used": -2}]})
    assert info.value.field == "nodes[0].used"


def test_environment_errors_say_which_variable_set_the_value() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(None, {"ENI_IPAM_SETTINGS__RATE_LIMIT_SHARE": "2"})
    assert info.value.field == "settings.rate_limit_share"
    assert "ENI_IPAM_SETTINGS__RATE_LIMIT_SHARE" in str(info.value)
    with pytest.raises(ConfigError, match="does not name a setting"):
        load_config(None, {"ENI_IPAM___X": "1"})


def test_unreadable_or_invalid_files_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("provider: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)


def test_azure_section_is_parsed_by_the_azure_plugin() -> None:
    sub = "00000000-0000-0000-0000-000000000001"
    vnet = f"/subscriptions/{sub}/resourceGroups/g/providers/Microsoft.Network/virtualNetworks/v"
    section = {"subscription_id": sub, "resource_groups": ["g"], "vnet_id": vnet}
    config = load_config_mapping({"provider": "azure", "azure": section})
    assert config.provider_settings.resource_groups == ("g",)
    with pytest.raises(ConfigError) as caught:
        load_config_mapping({"provider": "azure", "azure": {**section, "resource_groups": []}})
    assert caught.value.field.startswith("azure.resource_groups")


def test_generic_section_is_parsed_by_the_generic_plugin_and_required() -> None:
    config = load_config_mapping({"provider": "generic", "generic": {"cluster_cidrs": ["10.244.0.0/16"]}})
    assert [str(c) for c in config.provider_settings.cluster_cidrs] == ["10.244.0.0/16"]
    with pytest.raises(ConfigError) as caught:
        load_config_mapping({"provider": "generic", "generic": {"cluster_cidrs": ["10.244.0.0/33"]}})
    assert caught.value.field == "generic.cluster_cidrs[0]"


def test_aws_section_is_parsed_by_the_aws_plugin() -> None:
    config = load_config_mapping({"provider": "aws", "aws": {"region": "eu-west-1", "vpc_id": "vpc-1"}})
    assert config.provider_settings.region == "eu-west-1"
    assert config.provider_settings.vpc_id == "vpc-1"
