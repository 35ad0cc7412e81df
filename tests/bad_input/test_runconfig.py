"""The run configuration (``eni-ipam run --config``): every bad document, file or ``ENI_IPAM_*`` override
is a :class:`~eni_ipam.errors.ConfigError` naming the field, and the caller's data, environment and
file are left as they were."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eni_ipam.app.runconfig import DEFAULT_CONFIG, RunConfig, load_config, load_config_mapping
from eni_ipam.errors import ConfigError
from tests.bad_input import corpus
from tests.bad_input.mutations import SPECIAL_STRINGS, mutated, truncated

VNET = (
    "/subscriptions/00000000-0000-0000-0000-000000000001/resourceGroups/rg-1"
    "/providers/Microsoft.Network/virtualNetworks/vnet-1"
)

SEEDS: list[dict[str, Any]] = [
    yaml.safe_load(DEFAULT_CONFIG),
    {
        "provider": "generic",
        "log_level": "debug",
        "shutdown_timeout": "15s",
        "server": {"host": "127.0.0.1", "port": 9091},
        "generic": {
            "cluster_cidrs": ["10.244.0.0/16", "fd00:10:244::/56"],
            "service_cidrs": ["10.96.0.0/12"],
            "node_mask_ipv4": 26,
            "node_mask_ipv6": 64,
            "max_blocks_per_node": 4,
        },
        "settings": {
            "release_excess_ips": True,
            "excess_ip_release_delay": "3m",
            "parallel_workers": 8,
            "resync_interval": 30,
            "backoff_initial": "500ms",
            "backoff_max": "2m",
            "cluster_name": "blue",
            "interface_tags": {"team": "net"},
            "rate_limit_share": 0.5,
            "gc_interval": 0,
            "gc_max_per_run": 10,
        },
        "kubernetes": {
            "lease_name": "eni-ipam-blue",
            "lease_duration": "20s",
            "renew_deadline": "12s",
            "retry_period": "3s",
            "node_selector": {"role": "worker"},
            "instance_ids": "node-name",
            "status_qps": 5,
            "status_burst": 20,
            "watch_timeout": "2m",
        },
        "node_defaults": {
            "pre_allocate": 16,
            "min_allocate": 16,
            "max_allocate": 64,
            "subnet_ids": ["10.244.0.0/16"],
            "subnet_tags": {"zone": "a"},
            "disable_prefix_delegation": False,
        },
    },
    {
        "provider": "aws",
        "aws": {
            "region": "eu-west-1",
            "endpoint_url": "https://ec2.eu-west-1.amazonaws.com",
            "vpc_id": "vpc-0abc",
            "subnet_ids_filter": ["subnet-1", "subnet-2"],
            "instance_tags_filter": {"kubernetes.io/cluster/blue": "owned"},
            "max_results": 500,
            "connect_timeout": "3s",
            "update_limits_via_api": False,
            "rate_limits": {"AssignPrivateIpAddresses": {"burst": 50, "refill": 2}},
        },
        "node_defaults": {"first_interface_index": 1, "security_groups": ["sg-1"]},
    },
    {
        "provider": "azure",
        "azure": {
            "subscription_id": "00000000-0000-0000-0000-000000000001",
            "resource_groups": ["MC_rg_cluster_westeurope"],
            "vnet_id": VNET,
            "cloud": "AzurePublicCloud",
            "operation_timeout": "2m",
            "max_retries": 2,
            "vm_sizes": {"Standard_D8s_v5": 4},
            "rate_limits": {"network-writes": {"burst": 50, "refill": 1}},
        },
    },
]
"""Valid run configurations covering every section; the fuzzing starts from these."""

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _file_case(case: corpus.Case) -> bool:
    return any(case.has(key) for key in ("text", "bytes", "env"))


def _check(error: ConfigError, expect: dict[str, Any]) -> None:
    assert isinstance(error.field, str) and error.field
    assert str(error).startswith(f"{error.field}: ") and error.message
    corpus.check_named(error.field, str(error), expect, key="field", contains="message_contains")


@pytest.mark.parametrize("case", corpus.params("runconfig", lambda case: not _file_case(case)))
def test_a_bad_configuration_mapping_is_refused_naming_the_field_and_left_unchanged(
    case: corpus.Case,
) -> None:
    document = case.data["input"]
    before = repr(document)
    with pytest.raises(ConfigError) as caught:
        load_config_mapping(document)
    _check(caught.value, case.expect)
    assert repr(document) == before


@pytest.mark.parametrize("case", corpus.params("runconfig", _file_case))
def test_a_bad_configuration_file_or_override_is_refused_naming_the_field_and_changes_nothing(
    case: corpus.Case, tmp_path: Path
) -> None:
    path = case.write(tmp_path / "config.yaml")
    environ = {name: corpus.expand(value) for name, value in (case.data.get("env") or {}).items()}
    environ_before, file_before = dict(environ), path.read_bytes()
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ)
    _check(caught.value, case.expect)
    assert environ == environ_before
    assert path.read_bytes() == file_before


def test_every_fuzzing_seed_is_a_valid_configuration(tmp_path: Path) -> None:
    for seed in SEEDS:
        before = repr(seed)
        assert isinstance(load_config_mapping(seed), RunConfig)
        assert repr(seed) == before
        path = tmp_path / "seed.yaml"
        path.write_text(yaml.safe_dump(seed))
        assert load_config(path, {}) == load_config_mapping(seed)


def _loads_or_refuses(load: Any, *args: Any) -> None:
    try:
        config = load(*args)
    except ConfigError as error:
        assert isinstance(error.field, str) and error.message
    else:
        assert isinstance(config, RunConfig)
        assert config.provider in ("aws", "azure", "generic", "sim")


@FUZZ
@given(document=mutated(SEEDS))
def test_a_mutated_configuration_loads_or_is_refused_with_a_config_error(document: Any) -> None:
    before = repr(document)
    _loads_or_refuses(load_config_mapping, document)
    assert repr(document) == before


@FUZZ
@given(text=truncated([yaml.safe_dump(seed) for seed in SEEDS] + [DEFAULT_CONFIG]))
def test_a_truncated_configuration_file_loads_or_is_refused_with_a_config_error(
    text: str, tmp_path: Path
) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8")
    _loads_or_refuses(load_config, path, {})
    assert path.read_text(encoding="utf-8") == text


_SETTING_NAMES = st.sampled_from(
    (
        "PROVIDER",
        "NODE_SOURCE",
        "LOG_LEVEL",
        "SERVER__PORT",
        "SETTINGS__PARALLEL_WORKERS",
        "SETTINGS__GC_INTERVAL",
        "SETTINGS__INTERFACE_TAGS",
        "KUBERNETES__LEASE_DURATION",
        "GENERIC__CLUSTER_CIDRS",
        "GENERIC__NODE_MASK_IPV4",
        "NODES",
        "SIM__CLOUD__VPCS",
        "SETTINGS",
        "",
        "SETTINGS__",
        "X__Y__Z",
    )
)
_ENV_VALUES = st.one_of(
    st.sampled_from(SPECIAL_STRINGS),
    st.sampled_from(("5", "-1", "1.5", "{a: b}", "[10.0.0.0/8]", "[", "'", "&a [*a]", "!!binary x", "~")),
    st.text(max_size=12),
)


@FUZZ
@given(
    seed=st.sampled_from(SEEDS),
    environ=st.dictionaries(_SETTING_NAMES.map(lambda n: f"ENI_IPAM_{n}"), _ENV_VALUES, max_size=3),
)
def test_random_environment_overrides_load_or_are_refused_with_a_config_error(
    seed: dict[str, Any], environ: dict[str, str], tmp_path: Path
) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(seed), encoding="utf-8")
    before = dict(environ)
    _loads_or_refuses(load_config, path, environ)
    assert environ == before
