"""The chart's ``config`` block is the run configuration: every setting is there, commented, with the
code's defaults, and what the ConfigMap carries loads with ``eni-ipam run``'s own loader."""

from __future__ import annotations

import dataclasses
import re

import pytest
import yaml

from eni_ipam.core.settings import Settings
from eni_ipam.core.spec import SPEC_FIELDS, NodeSpec
from eni_ipam.kube.settings import KubeSettings
from providers.aws.settings import AwsSettings
from tests.deploy.conftest import ALL_FEATURES, CHART, REGION, one, render, values

SECTIONS = {
    "settings": Settings,
    "aws": AwsSettings,
    "kubernetes": KubeSettings,
}
TOP_KEYS = {
    "provider",
    "node_source",
    "log_level",
    "shutdown_timeout",
    "server",
    *SECTIONS,
    "node_defaults",
    "profiles",
}


def field_names(cls: type) -> set[str]:
    if dataclasses.is_dataclass(cls):
        return {f.name for f in dataclasses.fields(cls)}
    return set(cls.model_fields)  # type: ignore[attr-defined]


@pytest.mark.parametrize("section", sorted(SECTIONS))
def test_every_setting_of_a_section_is_in_values(section):
    assert set(values()["config"][section]) == field_names(SECTIONS[section])


def test_node_defaults_are_every_node_spec_field():
    assert set(values()["config"]["node_defaults"]) == set(SPEC_FIELDS)


def test_config_has_every_top_level_key():
    assert set(values()["config"]) == TOP_KEYS
    assert values()["config"]["server"] == {
        "host": "0.0.0.0",
        "port": 9090,
        "probe_host": "0.0.0.0",
        "probe_port": 9092,
        "max_connections": 64,
        "read_timeout": "10s",
    }


def test_every_config_key_is_commented():
    """Each key of a section is preceded by its own comment line in values.yaml."""
    lines = (CHART / "values.yaml").read_text().splitlines()
    config = values()["config"]
    for section in [*SECTIONS, "node_defaults"]:
        start = lines.index(f"  {section}:")
        for key in config[section]:
            n = next(i for i in range(start, len(lines)) if re.match(rf"^    {key}:", lines[i]))
            assert lines[n - 1].lstrip().startswith("#"), f"config.{section}.{key} has no comment"
    for key in TOP_KEYS:
        n = lines.index(next(line for line in lines if re.match(rf"^  {key}:", line)))
        assert lines[n - 1].lstrip().startswith("#"), f"config.{key} has no comment"


def test_the_commented_profiles_example_is_a_valid_configuration():
    """The example above ``profiles: []`` in values.yaml, uncommented, loads and chooses as it says."""
    from eni_ipam.app.runconfig import load_config_mapping

    lines = (CHART / "values.yaml").read_text().splitlines()
    end = lines.index("  profiles: []")
    start = next(n for n in range(end, 0, -1) if lines[n].strip() == "#   profiles:")
    example = yaml.safe_load("\n".join(line.removeprefix("  #   ") for line in lines[start:end]))
    sim = {"cloud": {"vpcs": [{"id": "vpc-1", "cidr": "10.0.0.0/16"}]}}
    config = load_config_mapping({"provider": "sim", "sim": sim, **example})
    chosen = config.profile_set()
    zone = {"eks.amazonaws.com/nodegroup": "web", "topology.kubernetes.io/zone": "us-east-1a"}
    assert chosen.choose(zone)[0] == "web-us-east-1a"
    assert chosen.choose({**zone, "topology.kubernetes.io/zone": "us-east-1b"})[0] == ""
    assert chosen.choose({"karpenter.sh/nodepool": "batch"})[0] == "batch"


def _load(docs):
    from eni_ipam.app.runconfig import load_config_mapping

    return load_config_mapping(yaml.safe_load(one(docs, "ConfigMap")["data"]["config.yaml"]))


@pytest.mark.system
@pytest.mark.parametrize("overrides", [None, ALL_FEATURES], ids=["default", "all-features"])
def test_the_configmap_loads_with_the_run_configuration_loader(overrides):
    loaded = _load(render(overrides))
    assert loaded.provider == "aws" and loaded.node_source == "kubernetes"
    assert loaded.shutdown_timeout == 20.0 and loaded.server.port == 9090


@pytest.mark.system
def test_the_defaults_in_values_are_the_code_defaults():
    loaded = _load(render())
    assert loaded.settings == Settings()
    assert loaded.kubernetes == KubeSettings()
    assert loaded.provider_settings == AwsSettings(region=REGION)  # the one value without a default
    # values.yaml writes every key; each holds the model's default
    assert loaded.node_defaults == NodeSpec()
    assert loaded.node_defaults.model_fields_set == set(SPEC_FIELDS)


@pytest.mark.system
def test_a_bad_value_in_config_is_refused_by_the_loader():
    from eni_ipam.errors import ConfigError

    with pytest.raises(ConfigError, match=r"settings\.rate_limit_share"):
        _load(render({"config": {"settings": {"rate_limit_share": 2}}}))


SUB = "00000000-0000-0000-0000-00000000abcd"
OTHER_PROVIDERS = {
    "azure": {
        "subscription_id": SUB,
        "resource_groups": ["nodes"],
        "vnet_id": f"/subscriptions/{SUB}/resourceGroups/net/providers/Microsoft.Network/virtualNetworks/v",
    },
    "generic": {"cluster_cidrs": ["10.244.0.0/16"]},
}


@pytest.mark.system
@pytest.mark.parametrize("provider", sorted(OTHER_PROVIDERS))
def test_the_chart_runs_the_other_providers_as_their_docs_say(provider):
    # docs/azure.md and docs/generic.md: set the provider, its section, and `aws: null`.
    docs = render({"config": {"provider": provider, "aws": None, provider: OTHER_PROVIDERS[provider]}})
    loaded = _load(docs)
    assert loaded.provider == provider
    assert type(loaded.provider_settings).__module__ == f"providers.{provider}.settings"
