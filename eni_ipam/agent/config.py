"""Configuration of ``eni-ipam agent`` (one YAML file, validated up front; errors name the field).

The agent runs on every node (a DaemonSet). Its default pool follows the node's ENIPool; named
static pools (for the libnetwork driver, address claims, or ``node_source: memory`` on a host
without Kubernetes) are declared here as a CIDR with optional ranges. The models are the
project's configuration layer (:mod:`eni_ipam.config.schema`); the format is in docs/node.md.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, Field, model_validator

from eni_ipam.adapters.limits import (
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_READ_TIMEOUT,
    MAX_SERVER_CONNECTIONS,
    MAX_SERVER_READ_TIMEOUT,
)
from eni_ipam.agent.datapath.settings import DatapathSettings
from eni_ipam.agent.types import DEFAULT_POOL, PoolAddress
from eni_ipam.config.files import read_config_file
from eni_ipam.config.schema import (
    Cidr,
    ConfigModel,
    Duration,
    FieldError,
    LogLevel,
    Name,
    PositiveDuration,
    short,
    validate,
)
from eni_ipam.core.profiles import LABEL_KEY
from eni_ipam.errors import ConfigError

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

MAX_IPV6_POOL = 65_536
"""Most addresses listed from one IPv6 block (each is a pool member in memory)."""
MAX_RANGE = 65_536
"""Most addresses one static pool range (or a whole pool without ranges) may list."""


class StaticPool(ConfigModel):
    """A named pool declared in the configuration (``pools: {NAME: {cidr, gateway, ranges}}``)."""

    name: str
    cidr: Network
    gateway: str
    addresses: tuple[PoolAddress, ...]


MAX_SOCKET_PATH = 107
"""Longest unix socket path Linux accepts (``sun_path`` holds 108 bytes with the terminating NUL)."""


def _taint_key(key: str) -> str:
    """A Kubernetes taint key (a qualified name: an optional DNS prefix and ``/``, then a name of at
    most 63 characters), or empty."""
    key = key.strip()
    if key and not LABEL_KEY.fullmatch(key):
        raise ValueError(
            f"{key!r} is not a taint key: an optional DNS-name prefix and '/', then letters, digits, "
            "'-', '_' or '.' (at most 63), as eni-ipam.io/not-ready; empty turns the startup taint off"
        )
    return key


def _socket_path(path: str) -> str:
    if not path.startswith("/"):
        raise ValueError(f"must be an absolute path, got {short(path)}")
    if "\0" in path or len(path.encode()) > MAX_SOCKET_PATH:
        raise ValueError(
            f"a unix socket path has at most {MAX_SOCKET_PATH} bytes and no NUL, got {short(path)}"
        )
    return path


def _address(raw: Any) -> str:
    try:
        return str(ipaddress.ip_address(str(raw)))
    except ValueError:
        raise ValueError(f"expected an address, got {short(raw)}") from None


Address = Annotated[str, BeforeValidator(_address)]


class PoolDeclaration(ConfigModel):
    cidr: Cidr
    """The pool's network: its prefix length and (by default) its first host, the gateway."""
    gateway: Address | None = None
    """The router of the network (default: its first host); never handed out."""
    ranges: Annotated[tuple[str, ...], Field(strict=False, min_length=1)] | None = None
    """Address ranges handed out (``10.99.0.10-10.99.0.200``, or one address); default: every host
    of the network (at most 65,536)."""

    def pool(self, name: str) -> StaticPool:
        cidr = self.cidr
        gateway = self.gateway or str(next(iter(cidr.hosts()), cidr.network_address))
        if ipaddress.ip_address(gateway) not in cidr:
            raise FieldError("gateway", f"{gateway} is not inside {cidr}")
        if self.ranges is None:
            if cidr.num_addresses > MAX_RANGE:
                raise FieldError("ranges", "required for a network larger than 65,536 addresses")
            hosts = [str(a) for a in cidr.hosts()]
        else:
            hosts = []
            for n, text in enumerate(self.ranges):
                hosts.extend(_range(text, cidr, f"ranges[{n}]"))
        members = tuple(
            PoolAddress(address=a, prefix_length=cidr.prefixlen, gateway=gateway)
            for a in dict.fromkeys(hosts)
            if a != gateway
        )
        return StaticPool(name=name, cidr=cidr, gateway=gateway, addresses=members)


def _range(text: str, cidr: Network, field: str) -> list[str]:
    first, dash, last = str(text).partition("-")
    if dash and not last.strip():
        raise FieldError(field, f"the range {text} has no end (write FIRST-LAST, or one address)")
    bounds = []
    for end in (first, last or first):
        try:
            address = ipaddress.ip_address(end.strip())
        except ValueError:
            raise FieldError(field, f"expected an address, got {short(end.strip())}") from None
        if address not in cidr:
            raise FieldError(field, f"{address} is not inside {cidr}")
        bounds.append(int(address))
    lo, hi = bounds
    if hi < lo:
        raise FieldError(field, f"the range {text} ends before it starts")
    if hi - lo >= MAX_RANGE:
        raise FieldError(field, "a range holds at most 65,536 addresses")
    make = ipaddress.IPv4Address if cidr.version == 4 else ipaddress.IPv6Address
    return [str(make(k)) for k in range(lo, hi + 1)]


def _pools(raw: Any) -> tuple[StaticPool, ...]:
    if isinstance(raw, tuple):
        return raw  # already read (a copy of the configuration)
    if not isinstance(raw, Mapping):
        raise ValueError(f"expected a mapping of pool names, got {type(raw).__name__}")
    pools = []
    for name, spec in raw.items():
        try:
            declaration = validate(PoolDeclaration, spec)
            pools.append(declaration.pool(str(name)))
        except (FieldError, ConfigError) as exc:  # re-rooted under the pool's name
            raise FieldError(f"{name}.{exc.field}" if exc.field else str(name), exc.message) from None
    return tuple(pools)


class ServerSection(ConfigModel):
    host: Name = "0.0.0.0"
    """/metrics, /healthz, /readyz (the DaemonSet uses the host network: kubelet probes the node, and
    the chart binds the loopback address unless Prometheus scrapes the agent)."""
    port: Annotated[int, Field(ge=0, le=65535)] = 9091
    """The port of /metrics, /healthz and /readyz (with the host network: free on every node)."""
    probe_host: Name = "127.0.0.1"
    """Where kubelet's probes are answered (/healthz, /readyz alone). The loopback address: kubelet
    probes a host-network pod there (the chart's ``host: 127.0.0.1``), and no pod reaches it."""
    probe_port: Annotated[int, Field(ge=0, le=65535)] = 9093
    """The probe listener's port (free on every node; the chart's probes follow it): slots of its own,
    so that no flood of ``port`` can make kubelet restart the agent (decision 0043). 0: a port the
    kernel picks."""
    max_connections: Annotated[int, Field(ge=1, le=MAX_SERVER_CONNECTIONS)] = DEFAULT_MAX_CONNECTIONS
    """Connections the endpoint serves at once; one more is answered 503 without being read. Prometheus
    and kubelet's two probes need a handful; 64 keeps a flood from any pod that reaches the port to a
    few dozen open files, far from the limit the CNI socket's connections need too."""
    read_timeout: Annotated[PositiveDuration, Field(le=MAX_SERVER_READ_TIMEOUT)] = DEFAULT_READ_TIMEOUT
    """Seconds a client has to send a whole request once connected (or answered): a connection still
    without a request head is then closed, a body that does not arrive is answered 408. Scrapers and
    probes send their request at once; 10 s only bites on a stuck or hostile client."""


class KubernetesSection(ConfigModel):
    kubeconfig: str = ""
    """Path of a kubeconfig file; empty: the pod's service account."""


class AgentConfig(ConfigModel):
    node_source: Literal["kubernetes", "memory"] = "kubernetes"
    """kubernetes: the default pool follows the node's ENIPool; memory: it is ``pools.default``."""
    socket: Annotated[str, AfterValidator(_socket_path)] = "/run/eni-ipam/agent.sock"
    """The unix socket of the CNI plugin's API and the libnetwork driver."""
    state_dir: Name = "/var/lib/eni-ipam"
    """Where allocations survive restarts (a hostPath in the DaemonSet)."""
    cni_cache_dir: Name = "/var/lib/cni/results"
    """libcni's cache of results: one of the runtimes' views a lost or corrupt state file is rebuilt from."""
    oci_state_dirs: Annotated[tuple[Name, ...], Field(strict=False)] = (
        "/run/runc",
        "/run/crun",
        "/run/containerd/runc/k8s.io",
    )
    """Where OCI runtimes keep a directory per container they created (runc's and crun's roots, for
    root, and containerd's runc shims' root for its CRI namespace, where a pod sandbox's ID, the CNI
    container ID, is a directory: without it a host running podman too would judge every sandbox
    gone). A libcni cache entry without a network namespace (libcni before 1.2, as podman 4 uses, records
    none) is alive while its container ID is a directory in one of them, and gone once it is in none:
    the rebuild then drops it, and the sweep releases it. Only directories that exist count; with
    none, such an entry is kept."""
    ipv4: bool = True
    ipv6: bool = False
    server: ServerSection = ServerSection()
    report_interval: PositiveDuration = 1.0
    """Seconds between reports of the addresses in use and the handshake answers (changes only)."""
    sweep_interval: Annotated[Duration, Field(ge=0)] = 30.0
    """How often addresses whose owner is gone are looked for (0: never). Runtimes do not retry a DEL
    or a release that failed while the agent was down; without the sweep such an address stays
    allocated for good. Half a minute finds them well within the grace period below."""
    sweep_grace: PositiveDuration = 60.0
    """How long an owner must have been judged gone, at every sweep, before its addresses are released.
    A pod or container being created may not be visible to the judge yet; a minute covers that and a
    slow API server, while a leaked address comes back within two minutes."""
    reuse_quarantine_seconds: Annotated[Duration, Field(ge=0, le=86_400)] = 150.0
    """How long a released address waits before the automatic choice hands it out again, unless
    nothing else is free (docs/node.md, "Freed addresses wait out their traffic"; 0: no quarantine).
    Traffic still arrives for a deleted pod's address: kube-proxy's rules until its EndpointSlice
    changes and every node has applied it, and conntrack entries (an unanswered SYN's, SYN_SENT, lives
    120 s). 150 s outlasts that entry with room for a slow endpoint update; the AWS VPC CNI's 30 s
    cooldown is known to be too short (aws/amazon-vpc-cni-k8s#3634)."""
    reuse_quarantine_endpointslices: bool = True
    """With Kubernetes and a quarantine: watch the cluster's EndpointSlices (as kube-proxy does) and
    hand out no address one of them still lists, however long ago it was released. False: the time
    alone (no watch)."""
    socket_max_connections: Annotated[int, Field(ge=1, le=65_536)] = 256
    """Most connections the socket serves at once; more are answered 503 (the plugin: try again later)
    without being read. The plugin opens one per call and Docker a few, so 256 is far above a node's
    real load, and far below the open-file limit idle connections would otherwise exhaust."""
    socket_read_timeout: PositiveDuration = 10.0
    """Seconds a client has to send a whole request (head, then body) once connected or answered.
    The plugin writes its request at once; only a stuck or hostile client waits this long, and its
    connection is then closed. Also how long an idle keep-alive connection stays open."""
    docker_socket: str = ""
    """Docker's API socket (``/run/docker.sock`` on a Docker host): the libnetwork driver's addresses
    and pools are then reconciled with the endpoints Docker reports. Empty: no reconciliation."""
    docker_ipam_driver: Name = "eni-ipam"
    """The name networks use for this driver (``--ipam-driver``): the plugin's ``.spec`` or socket name."""
    kubernetes: KubernetesSection = KubernetesSection()
    claims: bool = True
    """Serve Cluster API IPAddressClaims whose poolRef names this node's ENIPool."""
    startup_taint: Annotated[str, AfterValidator(_taint_key)] = "eni-ipam.io/not-ready"
    """With Kubernetes, the taint taken off this node's Node once its pool holds ``minAllocate``
    addresses and ADDs are served: register nodes with it (``NoSchedule``; Karpenter's
    ``startupTaints``, the kubelet's ``--register-with-taints``) and no pod is scheduled to a node
    that cannot give it an address yet. Read once per start, written only when present; empty: the
    Node is never read or written."""
    log_level: LogLevel = "info"
    pools: Annotated[tuple[StaticPool, ...], BeforeValidator(_pools)] = ()
    exclude: Annotated[tuple[Address, ...], Field(strict=False)] = ()
    """Addresses of the default pool never handed out (reserved for something that does not ask)."""
    datapath: DatapathSettings = DatapathSettings()
    """The node datapath for pods on every interface of the pool (docs/node.md, "The node datapath");
    off by default."""
    ipv6_pool_size: Annotated[int, Field(ge=0, le=MAX_IPV6_POOL)] = 256
    """With ``ipv6``: addresses offered from each IPv6 block the node's ENIPool publishes (the
    generic provider's per-node block), from ``::2`` on. A /64 is far too large to list whole, and
    256 covers any node's pods; raise it for more."""

    @model_validator(mode="after")
    def _consistent(self) -> AgentConfig:
        if not (self.ipv4 or self.ipv6):
            raise FieldError("ipv4", "at least one of ipv4 and ipv6 must be enabled")
        names = {p.name for p in self.pools}
        if self.node_source == "memory" and DEFAULT_POOL not in names:
            raise FieldError("pools.default", "required with node_source: memory (the pool to hand out)")
        if self.node_source == "kubernetes" and DEFAULT_POOL in names:
            raise FieldError(
                "pools.default", "the default pool follows the node's ENIPool with node_source: kubernetes"
            )
        return self

    @property
    def server_host(self) -> str:
        return self.server.host

    @property
    def server_port(self) -> int:
        return self.server.port

    @property
    def kubeconfig(self) -> str:
        return self.kubernetes.kubeconfig


_HOSTNAME = re.compile(
    r"^(?=.{1,253}$)[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?)*$"
)


def listen_address(host: str) -> str:
    """``host`` if it is an IP address or a host name to listen on.

    Raises:
        ConfigError: naming ``--server-host`` (an unset ``$(HOST_IP)`` arrives here unexpanded).
    """
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        # A dotted name whose last label is all digits is a mistyped address, not a host name.
        if _HOSTNAME.match(host) and not host.rsplit(".", 1)[-1].isdigit():
            return host
    hint = " (is HOST_IP set from the pod's status.hostIP?)" if "$(" in host else ""
    raise ConfigError("--server-host", f"expected an IP address or a host name, got {host!r}{hint}")


def agent_config_from_mapping(data: Any) -> AgentConfig:
    """Validate an agent configuration given as plain data (``None``: every default).

    Raises:
        ConfigError: naming the field.
    """
    return validate(AgentConfig, {} if data is None else data)


def load_agent_config(path: str | Path | None) -> AgentConfig:
    """Read and validate ``path`` (defaults when None). Raises ConfigError naming the field."""
    return agent_config_from_mapping({} if path is None else read_config_file(path))
