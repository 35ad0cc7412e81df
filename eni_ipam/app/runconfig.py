"""The run configuration of ``eni-ipam run``: one YAML file, overridable from the environment.

Everything is validated before anything starts: an unknown key or a bad value is a
:class:`~eni_ipam.core.errors.ConfigError` naming the field (and the environment variable that set
it, if one did), and nothing runs. The format is documented in docs/configuration.md.

Environment overrides: ``ENI_IPAM_<KEY>`` sets a top-level key and ``__`` descends into a
section, e.g. ``ENI_IPAM_PROVIDER=aws``, ``ENI_IPAM_SETTINGS__GC_INTERVAL=10m``,
``ENI_IPAM_AWS__REGION=eu-west-1``. Values are read as YAML scalars (``true``, ``5``, ``{a: b}``).

Providers are plug-ins: the core never imports a provider package; :func:`provider_plugin`
imports the selected one by name (``providers.<name>.service``), which parses its own section.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, Protocol, cast

import yaml

from eni_ipam.core.clock import Clock
from eni_ipam.core.config import (
    Settings,
    load_yaml_text,
    parse_duration,
    parse_int,
    plain_data_problem,
    read_config_file,
    settings_from_mapping,
)
from eni_ipam.core.errors import ConfigError, ScenarioError
from eni_ipam.core.metrics import Metrics
from eni_ipam.core.model import NodeSpec
from eni_ipam.core.provider import Provider
from eni_ipam.kube.settings import KubeSettings, kube_settings_from_mapping
from eni_ipam.simulator.scenario import spec_fields
from eni_ipam.store.records import NodeRecords

ENV_PREFIX = "ENI_IPAM_"
PROVIDERS = ("aws", "azure", "generic", "sim")
NODE_SOURCES = ("kubernetes", "memory")
LOG_LEVELS = ("debug", "info", "warning", "error")
_TOP_KEYS = {
    "provider",
    "node_source",
    "log_level",
    "shutdown_timeout",
    "server",
    "settings",
    "kubernetes",
    "node_defaults",
    "nodes",
    *PROVIDERS,
}


class ProviderPlugin(Protocol):
    """What ``providers/<name>/service.py`` offers ``eni-ipam run``."""

    def parse_settings(self, data: Any, *, path: str) -> object:
        """Validate the provider's section (``None`` when absent). Raises ConfigError naming the field."""
        ...

    def open_provider(
        self, settings: Any, *, clock: Clock, metrics: Metrics, rate_limit_share: float, records: NodeRecords
    ) -> AbstractAsyncContextManager[Provider]:
        """The provider, open for the block and closed (clients, threads) after it. ``records`` is
        the node store's view of the published pools (the generic provider keeps its state there)."""
        ...


def provider_plugin(name: str) -> ProviderPlugin:
    return cast(ProviderPlugin, importlib.import_module(f"providers.{name}.service"))


@dataclasses.dataclass(frozen=True, kw_only=True)
class StaticNode:
    """A node of the embedded store (``node_source: memory``)."""

    spec: NodeSpec
    used: int = 0


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunConfig:
    provider: str
    """Which cloud: aws, azure, generic or sim (the in-memory cloud, for trials)."""
    provider_settings: Any = None
    """The provider's own section, parsed by its plug-in."""
    node_source: str = "kubernetes"
    """Where nodes come from: ENIPool resources (kubernetes) or the ``nodes`` list (memory)."""
    log_level: str = "info"
    shutdown_timeout: float = 20.0
    """On SIGTERM, how long in-flight cloud calls may take to finish before they are cancelled.
    Shorter than the pod's termination grace period (45 s in the chart), so the Lease is always
    released and a standby takes over at once instead of after a lease duration."""
    server_host: str = "0.0.0.0"
    """Where /metrics, /healthz and /readyz listen (all interfaces: Prometheus and kubelet probes
    come from outside the pod)."""
    server_port: int = 9090
    settings: Settings = dataclasses.field(default_factory=Settings)
    kubernetes: KubeSettings = dataclasses.field(default_factory=KubeSettings)
    node_defaults: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """NodeSpec keyword arguments for ENIPools created from Nodes."""
    nodes: tuple[StaticNode, ...] = ()


def load_config(path: str | Path | None, environ: Mapping[str, str] | None = None) -> RunConfig:
    """Read ``path`` (the embedded default when ``None``), apply ``ENI_IPAM_…`` overrides, validate.

    Raises:
        ConfigError: unreadable file, invalid YAML, unknown key or bad value (``field`` names it).
    """
    data: Any = yaml.safe_load(DEFAULT_CONFIG) if path is None else read_config_file(path)
    if not isinstance(data, Mapping):
        raise ConfigError("--config", f"expected a mapping at the top, got {type(data).__name__}")
    # The file was checked to be plain data when it was read (load_yaml_file), the default is ours.
    data, sources = apply_env(data, environ or {})
    try:
        return load_config_mapping(data)
    except ConfigError as exc:
        for field, variable in sources.items():
            if exc.field == field or exc.field.startswith((field + ".", field + "[")):
                raise ConfigError(exc.field, f"{exc.message} (set by {variable})") from None
        raise


def apply_env(data: Mapping[str, Any], environ: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
    """``data`` with every ``ENI_IPAM_…`` variable applied; also which field each variable set."""
    out: dict[str, Any] = _deep_copy(data)
    sources: dict[str, str] = {}
    for variable in sorted(environ):
        if not variable.startswith(ENV_PREFIX):
            continue
        keys = [k.lower() for k in variable[len(ENV_PREFIX) :].split("__")]
        field = ".".join(keys)
        if not all(keys):
            raise ConfigError(field or variable, f"{variable} does not name a setting")
        try:
            value = load_yaml_text(environ[variable], what=variable)
        except ValueError as exc:
            raise ConfigError(field, str(exc)) from None
        target = out
        for depth, key in enumerate(keys[:-1]):
            child = target.get(key)
            if child is None:
                child = target[key] = {}
            if not isinstance(child, dict):
                raise ConfigError(".".join(keys[: depth + 1]), f"{variable} descends into a non-mapping")
            target = child
        target[keys[-1]] = value
        sources[field] = variable
    return out, sources


def _deep_copy(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _deep_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_deep_copy(v) for v in value]
    return value


def load_config_mapping(data: Mapping[str, Any]) -> RunConfig:
    """Validate a run configuration given as plain data. Raises as :func:`load_config`."""
    if not isinstance(data, Mapping):
        raise ConfigError("config", f"expected a mapping, got {type(data).__name__}")
    problem = plain_data_problem(data)
    if problem:
        raise ConfigError("config", f"the configuration {problem}")
    for key in data:
        if key not in _TOP_KEYS:
            raise ConfigError(str(key) or repr(key), f"unknown key (known: {', '.join(sorted(_TOP_KEYS))})")
    if "provider" not in data:
        raise ConfigError("provider", f"required: one of {', '.join(PROVIDERS)}")
    provider = _choice(data["provider"], "provider", PROVIDERS)
    plugin = provider_plugin(provider)
    for other in PROVIDERS:
        if other != provider and data.get(other) is not None:
            raise ConfigError(other, f"a section for provider {other}, but provider is {provider}")
    node_source = _choice(data.get("node_source", "kubernetes"), "node_source", NODE_SOURCES)
    server = data.get("server") or {}
    if not isinstance(server, Mapping):
        raise ConfigError("server", f"expected a mapping, got {type(server).__name__}")
    for key in server:
        if key not in ("host", "port"):
            raise ConfigError(f"server.{key}", "unknown key (known: host, port)")
    host = server.get("host", "0.0.0.0")
    if not isinstance(host, str) or not host:
        raise ConfigError("server.host", f"expected a host name or address, got {host!r}")
    port = parse_int("server.port", server.get("port", 9090), minimum=0)
    if port > 65535:
        raise ConfigError("server.port", f"expected a port number, got {port}")
    config = RunConfig(
        provider=provider,
        provider_settings=plugin.parse_settings(data.get(provider), path=provider),
        node_source=node_source,
        log_level=_choice(data.get("log_level", "info"), "log_level", LOG_LEVELS),
        shutdown_timeout=parse_duration(data.get("shutdown_timeout", "20s"), "shutdown_timeout"),
        server_host=host,
        server_port=port,
        settings=settings_from_mapping(data.get("settings")),
        kubernetes=kube_settings_from_mapping(data.get("kubernetes")),
        node_defaults=_node_defaults(data.get("node_defaults")),
        nodes=_nodes(data.get("nodes")),
    )
    if config.nodes and node_source != "memory":
        raise ConfigError("nodes", "only used with node_source: memory (Kubernetes nodes come from Nodes)")
    return config


def _choice(raw: Any, field: str, allowed: tuple[str, ...]) -> str:
    if raw not in allowed:
        raise ConfigError(field, f"expected one of {', '.join(allowed)}, got {raw!r}")
    return cast(str, raw)


def _scenario_errors(call: Any, *args: Any) -> Any:
    try:
        return call(*args)
    except ScenarioError as exc:  # the scenario parsers name the path; here it is a config field
        raise ConfigError(exc.path, exc.message) from None


def _node_defaults(raw: Any) -> dict[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ConfigError("node_defaults", f"expected a mapping, got {type(raw).__name__}")
    fields: dict[str, Any] = _scenario_errors(spec_fields, raw, "node_defaults")
    unknown = set(raw) - set(fields)
    if unknown:
        raise ConfigError(f"node_defaults.{sorted(unknown)[0]}", "unknown node spec key")
    return fields


def _nodes(raw: Any) -> tuple[StaticNode, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ConfigError("nodes", f"expected a list, got {type(raw).__name__}")
    out: list[StaticNode] = []
    names: set[str] = set()
    for n, entry in enumerate(raw):
        path = f"nodes[{n}]"
        if not isinstance(entry, Mapping):
            raise ConfigError(path, f"expected a mapping, got {type(entry).__name__}")
        for key in ("name", "instance"):
            if not isinstance(entry.get(key), str) or not entry[key]:
                raise ConfigError(f"{path}.{key}", "required: a non-empty string")
        if entry["name"] in names:
            raise ConfigError(f"{path}.name", f"node {entry['name']} listed twice")
        names.add(entry["name"])
        rest = {k: v for k, v in entry.items() if k not in ("name", "instance", "used")}
        fields: dict[str, Any] = _scenario_errors(spec_fields, rest, path)
        unknown = set(rest) - set(fields)
        if unknown:
            raise ConfigError(f"{path}.{sorted(unknown)[0]}", "unknown node key")
        spec = NodeSpec(name=entry["name"], instance_id=entry["instance"], **fields)
        out.append(StaticNode(spec=spec, used=parse_int(f"{path}.used", entry.get("used", 0), minimum=0)))
    return tuple(out)


def parse_sim_cloud(data: Any, *, path: str) -> dict[str, Any]:
    """The ``sim.cloud`` section: the scenario files' ``cloud:`` format (docs/scenarios.md)."""
    from eni_ipam.simulator.scenario import read_cloud

    try:
        return read_cloud(data)
    except ScenarioError as exc:
        raise ConfigError(f"{path}.{exc.path}", exc.message) from None


DEFAULT_CONFIG = """\
# The embedded default of `eni-ipam run` without --config: the in-memory cloud and three nodes,
# no Kubernetes. A starting point for trials; deployments use the Helm chart's configuration.
provider: sim
node_source: memory
server: {host: 127.0.0.1, port: 9090}
sim:
  latency: 0.05
  cloud:
    vpcs: [{id: vpc-1, cidr: 10.0.0.0/16}]
    subnets:
      - {id: subnet-a, vpc: vpc-1, zone: us-east-1a, cidr: 10.0.0.0/22}
      - {id: subnet-b, vpc: vpc-1, zone: us-east-1b, cidr: 10.0.4.0/22}
    security_groups: [{id: sg-nodes, vpc: vpc-1}]
    instances:
      - {id: i-0001, type: m5.large, subnet: subnet-a, security_groups: [sg-nodes]}
      - {id: i-0002, type: m5.xlarge, subnet: subnet-b, security_groups: [sg-nodes]}
      - {id: i-0003, type: c5.large, subnet: subnet-a, security_groups: [sg-nodes]}
nodes:
  - {name: node-1, instance: i-0001, used: 3}
  - {name: node-2, instance: i-0002, pre_allocate: 12}
  - {name: node-3, instance: i-0003, used: 9}
"""
