"""Configuration of ``eni-ipam agent`` (one YAML file, validated up front; errors name the field).

The agent runs on every node (a DaemonSet). Its default pool follows the node's ENIPool; named
static pools (for the libnetwork driver, address claims, or ``node_source: memory`` on a host
without Kubernetes) are declared here as a CIDR with optional ranges.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from eni_ipam.agent.types import DEFAULT_POOL, PoolAddress
from eni_ipam.app.runconfig import LOG_LEVELS
from eni_ipam.core.config import parse_bool, parse_duration, parse_int, read_config_file, section_items
from eni_ipam.core.errors import ConfigError

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclasses.dataclass(frozen=True, kw_only=True)
class StaticPool:
    name: str
    cidr: Network
    gateway: str
    addresses: tuple[PoolAddress, ...]


MAX_IPV6_POOL = 65_536
"""Most addresses listed from one IPv6 block (each is a pool member in memory)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class AgentConfig:
    node_source: str = "kubernetes"
    """kubernetes: the default pool follows the node's ENIPool; memory: it is ``pools.default``."""
    socket: str = "/run/eni-ipam/agent.sock"
    """The unix socket of the CNI plugin's API and the libnetwork driver."""
    state_dir: str = "/var/lib/eni-ipam"
    """Where allocations survive restarts (a hostPath in the DaemonSet)."""
    cni_cache_dir: str = "/var/lib/cni/results"
    """libcni's cache of results: the runtime's view used to rebuild a corrupt state file."""
    ipv4: bool = True
    ipv6: bool = False
    server_host: str = "0.0.0.0"
    """/metrics, /healthz, /readyz (the DaemonSet uses the host network: kubelet probes the node)."""
    server_port: int = 9091
    report_interval: float = 1.0
    """Seconds between reports of the addresses in use and the handshake answers (changes only)."""
    kubeconfig: str = ""
    claims: bool = True
    """Serve Cluster API IPAddressClaims whose poolRef names this node's ENIPool."""
    log_level: str = "info"
    pools: tuple[StaticPool, ...] = ()
    exclude: tuple[str, ...] = ()
    """Addresses of the default pool never handed out (reserved for something that does not ask)."""
    ipv6_pool_size: int = 256
    """With ``ipv6``: addresses offered from each IPv6 block the node's ENIPool publishes (the
    generic provider's per-node block), from ``::2`` on. A /64 is far too large to list whole, and
    256 covers any node's pods; raise it for more."""


_KEYS = {f.name for f in dataclasses.fields(AgentConfig)} - {"server_host", "server_port", "kubeconfig"}
_KEYS |= {"server", "kubernetes"}


def load_agent_config(path: str | Path | None) -> AgentConfig:
    """Read and validate ``path`` (defaults when None). Raises ConfigError naming the field."""
    return agent_config_from_mapping({} if path is None else read_config_file(path))


def agent_config_from_mapping(data: Any) -> AgentConfig:
    values: dict[str, Any] = {}
    for key, field, raw in section_items(data, "", _KEYS):
        if key == "node_source":
            if raw not in ("kubernetes", "memory"):
                raise ConfigError(field, f"expected kubernetes or memory, got {raw!r}")
            values[key] = raw
        elif key == "log_level":
            if raw not in LOG_LEVELS:
                raise ConfigError(field, f"expected one of {', '.join(LOG_LEVELS)}, got {raw!r}")
            values[key] = raw
        elif key in ("socket", "state_dir", "cni_cache_dir"):
            if not isinstance(raw, str) or not raw:
                raise ConfigError(field, f"expected a non-empty string, got {raw!r}")
            values[key] = raw
        elif key in ("ipv4", "ipv6", "claims"):
            values[key] = parse_bool(field, raw)
        elif key == "ipv6_pool_size":
            values[key] = parse_int(field, raw, minimum=0)
            if values[key] > MAX_IPV6_POOL:
                raise ConfigError(field, f"at most {MAX_IPV6_POOL}, got {values[key]}")
        elif key == "report_interval":
            values[key] = parse_duration(raw, field)
        elif key == "server":
            for sub, sub_field, value in section_items(raw, "server", {"host", "port"}):
                if sub == "host":
                    if not isinstance(value, str) or not value:
                        raise ConfigError(sub_field, f"expected a host, got {value!r}")
                    values["server_host"] = value
                else:
                    values["server_port"] = parse_int(sub_field, value, minimum=0)
        elif key == "kubernetes":
            for _, sub_field, value in section_items(raw, "kubernetes", {"kubeconfig"}):
                if not isinstance(value, str):
                    raise ConfigError(sub_field, f"expected a path, got {value!r}")
                values["kubeconfig"] = value
        elif key == "exclude":
            if not isinstance(raw, list):
                raise ConfigError(field, f"expected a list of addresses, got {raw!r}")
            out = []
            for n, item in enumerate(raw):
                try:
                    out.append(str(ipaddress.ip_address(str(item))))
                except ValueError:
                    raise ConfigError(f"{field}[{n}]", f"expected an address, got {item!r}") from None
            values[key] = tuple(out)
        elif key == "pools":
            if not isinstance(raw, Mapping):
                raise ConfigError(field, f"expected a mapping of pool names, got {type(raw).__name__}")
            values[key] = tuple(_pool(str(name), spec, f"pools.{name}") for name, spec in raw.items())
    config = AgentConfig(**values)
    if not (config.ipv4 or config.ipv6):
        raise ConfigError("ipv4", "at least one of ipv4 and ipv6 must be enabled")
    if config.report_interval <= 0:
        raise ConfigError("report_interval", "must be positive")
    names = {p.name for p in config.pools}
    if config.node_source == "memory" and DEFAULT_POOL not in names:
        raise ConfigError("pools.default", "required with node_source: memory (the pool to hand out)")
    if config.node_source == "kubernetes" and DEFAULT_POOL in names:
        raise ConfigError(
            "pools.default", "the default pool follows the node's ENIPool with node_source: kubernetes"
        )
    return config


def _pool(name: str, spec: Any, path: str) -> StaticPool:
    known = {"cidr", "gateway", "ranges"}
    items = {key: (field, raw) for key, field, raw in section_items(spec, path, known)}
    if "cidr" not in items:
        raise ConfigError(f"{path}.cidr", "required")
    try:
        cidr = ipaddress.ip_network(items["cidr"][1], strict=True)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{path}.cidr", f"expected a network such as 10.99.0.0/24: {exc}") from None
    gateway = str(next(iter(cidr.hosts()), cidr.network_address))
    if "gateway" in items:
        gateway = _address(items["gateway"][1], f"{path}.gateway", cidr)
    hosts: list[str] = []
    if "ranges" in items:
        field, raw = items["ranges"]
        if not isinstance(raw, list) or not raw:
            raise ConfigError(field, "expected a list of ranges such as 10.99.0.10-10.99.0.200")
        for n, text in enumerate(raw):
            first, _, last = str(text).partition("-")
            lo = int(ipaddress.ip_address(_address(first.strip(), f"{field}[{n}]", cidr)))
            hi = int(ipaddress.ip_address(_address((last or first).strip(), f"{field}[{n}]", cidr)))
            if hi < lo:
                raise ConfigError(f"{field}[{n}]", f"the range {text} ends before it starts")
            if hi - lo >= 65536:
                raise ConfigError(f"{field}[{n}]", "a range holds at most 65,536 addresses")
            hosts.extend(
                str(ipaddress.ip_address(k) if cidr.version == 4 else ipaddress.IPv6Address(k))
                for k in range(lo, hi + 1)
            )
    else:
        if cidr.num_addresses > 65536:
            raise ConfigError(f"{path}.ranges", "required for a network larger than 65,536 addresses")
        hosts = [str(a) for a in cidr.hosts()]
    members = tuple(
        PoolAddress(address=a, prefix_length=cidr.prefixlen, gateway=gateway)
        for a in dict.fromkeys(hosts)
        if a != gateway
    )
    return StaticPool(name=name, cidr=cidr, gateway=gateway, addresses=members)


def _address(raw: Any, field: str, cidr: Network) -> str:
    try:
        address = ipaddress.ip_address(str(raw))
    except ValueError:
        raise ConfigError(field, f"expected an address, got {raw!r}") from None
    if address not in cidr:
        raise ConfigError(field, f"{address} is not inside {cidr}")
    return str(address)
