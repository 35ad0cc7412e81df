"""The run configuration: every bad value names its field; environment overrides; provider plug-ins."""

from __future__ import annotations

from pathlib import Path

import pytest

from eni_ipam.app.runconfig import DEFAULT_CONFIG, load_config, load_config_mapping
from eni_ipam.errors import ConfigError, ConfigErrors

SIM = {"cloud": {"vpcs": [{"id": "vpc-1", "cidr": "10.0.0.0/16"}]}}


def test_embedded_default_runs_the_in_memory_cloud_alone() -> None:
    config = load_config(None)
    assert (config.provider, config.node_source) == ("sim", "memory")
    nodes = config.static_nodes()
    assert [n.name for n in nodes] == ["node-1", "node-2", "node-3"]
    assert nodes[1].spec.pre_allocate == 12
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


def test_a_wrong_type_is_named_rather_than_called_missing() -> None:
    base = {"provider": "sim", "sim": SIM, "node_source": "memory"}
    with pytest.raises(ConfigError) as info:
        load_config_mapping({**base, "nodes": [{"name": "a", "instance": 12345}]})
    assert info.value.field == "nodes[0].instance"
    assert info.value.message == "expected a string, got int 12345"


def test_node_defaults_apply_to_memory_nodes_under_their_own_keys() -> None:
    config = load_config_mapping(
        {
            "provider": "sim",
            "sim": SIM,
            "node_source": "memory",
            "node_defaults": {"pre_allocate": 20, "min_allocate": 4, "subnet_tags": {"tier": "pods"}},
            "nodes": [{"name": "a", "instance": "i-1", "min_allocate": 9}, {"name": "b", "instance": "i-2"}],
        }
    )
    a, b = (node.spec for node in config.static_nodes())
    assert (a.pre_allocate, a.min_allocate, dict(a.subnet_tags)) == (20, 9, {"tier": "pods"})
    assert (b.pre_allocate, b.min_allocate) == (20, 4)


def test_two_memory_nodes_on_one_instance_are_refused() -> None:
    nodes = [{"name": "a", "instance": "i-1"}, {"name": "b", "instance": "i-1"}]
    with pytest.raises(ConfigError) as info:
        load_config_mapping({"provider": "sim", "sim": SIM, "node_source": "memory", "nodes": nodes})
    assert info.value.field == "nodes[1].instance" and "same addresses" in info.value.message


def test_a_key_written_twice_in_the_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("provider: sim\nprovider: aws\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.field == "--config" and "duplicate key 'provider' (line 2; first on line 1)" in str(
        info.value
    )


def test_structured_environment_values_are_yaml_and_win_over_the_file(tmp_path: Path) -> None:
    config = load_config_mapping(
        {"provider": "aws", "settings": {"gc_interval": "5m", "parallel_workers": 5}},
        environ={
            "ENI_IPAM_SETTINGS__PARALLEL_WORKERS": "7",
            "ENI_IPAM_SETTINGS__INTERFACE_TAGS": "{team: a, rack: '12'}",
            "ENI_IPAM_AWS__SUBNET_IDS_FILTER": "[subnet-1, subnet-2]",
            "ENI_IPAM_SETTINGS__RELEASE_EXCESS_IPS": "true",
        },
    )
    assert config.settings.parallel_workers == 7 and config.settings.gc_interval == 300.0
    assert dict(config.settings.interface_tags) == {"team": "a", "rack": "12"}
    assert config.provider_settings.subnet_ids_filter == ("subnet-1", "subnet-2")
    assert config.settings.release_excess_ips is True


@pytest.mark.parametrize(
    ("variable", "field", "words"),
    [
        ("ENI_IPAM_SETTINGS__PARALLELISM", "settings.parallelism", "unknown key 'parallelism'"),
        ("ENI_IPAM_COLOUR", "colour", "unknown key 'colour'"),
        ("ENI_IPAM_LOG_LEVEL__X", "log_level", "non-mapping"),
        ("ENI_IPAM_SETTINGS____GC_INTERVAL", "settings..gc_interval", "does not name a setting"),
    ],
)
def test_an_environment_variable_naming_no_setting_is_refused(variable: str, field: str, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(None, {variable: "1"})
    assert info.value.field == field and words in info.value.message and variable in str(info.value)


# -- every error at once, and "did you mean" --------------------------------------------------------


def test_every_bad_value_is_listed_at_once_the_first_as_before() -> None:
    data = {
        "provider": "sim",
        "sim": SIM,
        "settings": {"gc_interval": "1d", "parallel_workers": 0},
        "node_defaults": {"pre_alocate": 4},
    }
    with pytest.raises(ConfigErrors) as caught:
        load_config_mapping(data)
    fields = [e.field for e in caught.value.errors]
    assert fields[0] == "node_defaults.pre_alocate"  # a misspelt key first, as config_error had it
    assert set(fields) == {"node_defaults.pre_alocate", "settings.gc_interval", "settings.parallel_workers"}
    assert caught.value.field == "node_defaults.pre_alocate"  # what code reading one error sees
    assert str(caught.value).count("\n") == 2  # one line per problem


def test_a_misspelt_key_names_the_key_it_may_mean() -> None:
    with pytest.raises(ConfigError) as caught:
        load_config_mapping({"provider": "sim", "sim": SIM, "node_defaults": {"min_alocate": 4}})
    assert "did you mean 'min_allocate'?" in caught.value.message


def test_a_misspelt_provider_names_the_provider_it_may_mean() -> None:
    with pytest.raises(ConfigError) as caught:
        load_config_mapping({"provider": "azur"})
    assert caught.value.field == "provider" and "did you mean 'azure'?" in caught.value.message


def test_a_misspelt_variable_names_the_variable_it_may_mean() -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(None, {"ENI_IPAM_SETTINGS__GC_INTERVALL": "10m", "ENI_IPAM_SERVR__PORT": "1"})
    messages = {e.field: e.message for e in caught.value.errors}
    assert "did you mean ENI_IPAM_SETTINGS__GC_INTERVAL?" in messages["settings.gc_intervall"]
    assert "did you mean ENI_IPAM_SERVER__PORT?" in messages["servr"]


# -- watermarks that contradict each other -----------------------------------------------------------


def test_a_minimum_above_the_maximum_is_refused_naming_both() -> None:
    with pytest.raises(ConfigError) as caught:
        load_config_mapping(
            {"provider": "sim", "sim": SIM, "node_defaults": {"min_allocate": 40, "max_allocate": 10}}
        )
    assert caught.value.field == "node_defaults.min_allocate"
    assert "min_allocate 40 is above max_allocate 10" in caught.value.message
    assert "Lower min_allocate to at most 10, or raise max_allocate" in caught.value.message


def test_a_written_pre_allocate_above_the_maximum_is_refused_but_not_the_default() -> None:
    base = {"provider": "sim", "sim": SIM}
    load_config_mapping({**base, "node_defaults": {"max_allocate": 4}})  # the default 8: a small pool
    with pytest.raises(ConfigError) as caught:
        load_config_mapping({**base, "node_defaults": {"max_allocate": 4, "pre_allocate": 6}})
    assert caught.value.field == "node_defaults.pre_allocate"
    assert "pre_allocate 6 is above max_allocate 4" in caught.value.message


def test_a_node_or_profile_is_checked_as_merged_over_the_defaults() -> None:
    nodes = [{"name": "a", "instance": "i-1", "max_allocate": 5}, {"name": "b", "instance": "i-2"}]
    with pytest.raises(ConfigError) as caught:
        load_config_mapping(
            {
                "provider": "sim",
                "sim": SIM,
                "node_source": "memory",
                "node_defaults": {"min_allocate": 8},
                "nodes": nodes,
            }
        )
    assert [e.field for e in caught.value.errors] == ["nodes[0].min_allocate"]
    profile = {"name": "p", "node_selector": {}, "spec": {"min_allocate": 20}}
    with pytest.raises(ConfigError) as caught:
        load_config_mapping(
            {"provider": "sim", "sim": SIM, "node_defaults": {"max_allocate": 10}, "profiles": [profile]}
        )
    assert caught.value.field == "profiles[0].spec.min_allocate"


def test_a_contradiction_of_the_defaults_is_named_once_not_per_node() -> None:
    nodes = [{"name": "a", "instance": "i-1"}, {"name": "b", "instance": "i-2"}]
    defaults = {"min_allocate": 40, "max_allocate": 10}
    with pytest.raises(ConfigError) as caught:
        load_config_mapping(
            {
                "provider": "sim",
                "sim": SIM,
                "node_source": "memory",
                "node_defaults": defaults,
                "nodes": nodes,
            }
        )
    assert [e.field for e in caught.value.errors] == ["node_defaults.min_allocate"]


def test_a_contradiction_set_by_a_variable_names_it() -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(None, {"ENI_IPAM_NODE_DEFAULTS": "{min_allocate: 40, max_allocate: 10}"})
    assert caught.value.message.endswith("(set by ENI_IPAM_NODE_DEFAULTS)")


# -- overrides without --config ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("variable", "value", "field"),
    [
        ("ENI_IPAM_PROVIDER", "aws", "provider"),
        ("ENI_IPAM_NODE_SOURCE", "kubernetes", "node_source"),
        ("ENI_IPAM_AWS__REGION", "eu-west-1", "aws"),
    ],
)
def test_without_a_file_another_cloud_needs_one(variable: str, value: str, field: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(None, {variable: value})
    assert caught.value.field == field
    assert f"set by {variable}" in caught.value.message
    assert "pass --config FILE (e.g. examples/config/aws-kubernetes.yaml)" in caught.value.message
    assert "sim:" not in caught.value.message  # not the demo's section, which nobody wrote


def test_without_a_file_other_overrides_work_on_the_demo() -> None:
    config = load_config(None, {"ENI_IPAM_LOG_LEVEL": "debug", "ENI_IPAM_SERVER__PORT": "0"})
    assert (config.provider, config.log_level, config.server.port) == ("sim", "debug", 0)


def test_without_a_file_the_other_variables_mistakes_come_in_the_same_round() -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(None, {"ENI_IPAM_PROVIDER": "aws", "ENI_IPAM_LOG_LEVL": "debug"})
    assert [e.field for e in caught.value.errors] == ["provider", "log_levl"]


def test_with_a_file_provider_and_node_source_may_be_overridden(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("provider: aws\nnode_source: kubernetes\n")
    config = load_config(path, {"ENI_IPAM_PROVIDER": "aws", "ENI_IPAM_NODE_SOURCE": "memory"})
    assert (config.provider, config.node_source) == ("aws", "memory")
