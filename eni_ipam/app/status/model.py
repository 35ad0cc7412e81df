"""What ``eni-ipam status`` reads (:class:`Gathered`) and what it makes of it (:class:`Report`).

The report's sections are plain dataclasses, so ``--json`` is :meth:`Report.as_json` and its keys are
these fields' names (docs/status.md lists them). A :class:`Finding` is a **problem** when an operator
must act (it counts toward the verdict, ``NEEDS ATTENTION``, and exit status 1) or a **note** when it
only says something worth knowing; each names its subject and the fix.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping, Sequence
from typing import Any

from eni_ipam.adapters.metrics.scrape import Scrape

Obj = Mapping[str, Any]

SECTIONS = ("controller", "crd", "nodes", "subnets", "api", "agents")
NODE_STATES = ("ready", "short", "no-instance", "no-pool", "pending")
"""A Node's state: its pool is ready; short of addresses (the reason says why); no instance (no usable
``spec.providerID``, or the cloud does not know its instance or it is not running); no ENIPool; its
pool has no status yet."""


@dataclasses.dataclass(frozen=True)
class Gathered:
    """What ``eni-ipam status`` read. ``unread``: each resource that could not be read, and why."""

    now: datetime.datetime
    namespace: str
    lease_name: str
    lease: Obj | None = None
    crd: Obj | None = None
    pools: Sequence[Obj] = ()
    nodes: Sequence[Obj] = ()
    events: Sequence[Obj] = ()
    unread: Mapping[str, str] = dataclasses.field(default_factory=dict)
    selector: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """The labels the Nodes were listed by (``-l``): the pools of the others are not orphans."""
    metrics_url: str = ""
    scrape: Scrape | None = None
    """The controller's ``/metrics`` (the later scrape, with ``window``)."""
    earlier: Scrape | None = None
    """The first of two scrapes ``window`` seconds apart (None: one scrape)."""
    window: float = 0.0
    metrics_error: str = ""
    """Why ``/metrics`` could not be read ("" when it was, or was not asked for)."""
    readyz: str = ""
    """The controller's ``/readyz`` answer, read beside its ``/metrics``."""

    @property
    def leader_scrape(self) -> Scrape | None:
        """The scrape, when it is the leader's: only a leader exports pools, subnets and the cloud API."""
        return self.scrape if self.scrape is not None and self.scrape.value("eni_ipam_leader") == 1 else None


@dataclasses.dataclass(frozen=True)
class Finding:
    section: str
    subject: str
    """The node, subnet, operation or object the finding is about."""
    problem: str
    """What is wrong (for a note: worth knowing), as a sentence."""
    fix: str
    """What to do about it ("" when nothing is to be done)."""
    severity: str = "problem"
    """``problem`` (counts toward the verdict) or ``note``."""


def problem(section: str, subject: str, what: str, fix: str) -> Finding:
    return Finding(section, subject, what, fix)


def note(section: str, subject: str, what: str, fix: str = "") -> Finding:
    return Finding(section, subject, what, fix, "note")


@dataclasses.dataclass(frozen=True)
class LeaseView:
    name: str
    namespace: str
    holder: str
    leading_for: float | None
    """Seconds since the holder acquired the Lease (None: no holder, or not said)."""
    renewed_ago: float | None
    duration: int
    transitions: int
    stale: bool


@dataclasses.dataclass(frozen=True)
class MetricsView:
    url: str
    reachable: bool
    error: str = ""
    version: str = ""
    role: str = ""
    """``leader`` or ``standby``: what the scraped replica is."""
    ready: bool | None = None
    readyz: str = ""
    resync_age: float | None = None
    resync_failing: int | None = None
    resyncs: int | None = None
    resync_failures: int | None = None
    crd_state: str = ""


@dataclasses.dataclass(frozen=True)
class ControllerView:
    namespace: str
    lease: LeaseView | None
    metrics: MetricsView | None


@dataclasses.dataclass(frozen=True)
class CrdView:
    name: str
    state: str
    """``current``, ``outdated`` or ``missing`` (:func:`eni_ipam.kube.crd.judge`)."""
    revision: int
    expected: int
    """The revision this eni-ipam carries."""
    lost: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class NodeRow:
    name: str
    state: str
    reason: str = ""
    message: str = ""
    instance: str = ""
    since: float | None = None
    """Seconds in this state, where the objects say (the condition's transition, the object's age)."""
    events: tuple[str, ...] = ()
    """eni-ipam's recent Warning Events about the Node, ``Reason: message``, the latest first."""


@dataclasses.dataclass(frozen=True)
class NodesView:
    total: int
    counts: dict[str, int]
    rows: tuple[NodeRow, ...]
    pools_without_node: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class SubnetRow:
    id: str
    zone: str = ""
    free: int | None = None
    size: int | None = None
    pressure: bool | None = None
    nodes: int = 0
    """Nodes whose pool has an interface in the subnet."""


@dataclasses.dataclass(frozen=True)
class SubnetsView:
    source: str
    """``metrics`` (the leader's counts) or ``pools`` (what the pools' statuses say: no free counts)."""
    rows: tuple[SubnetRow, ...]


@dataclasses.dataclass(frozen=True)
class OperationRow:
    operation: str
    requests: int
    throttled: int


@dataclasses.dataclass(frozen=True)
class ApiView:
    window: float
    """Seconds the request figures cover (0: since the controller started)."""
    operations: tuple[OperationRow, ...]
    failing: dict[str, int]
    """Nodes whose last maintenance pass failed, by the error's class."""
    kube_unhealthy: tuple[str, ...]
    """The controller's problems with the Kubernetes API (``credentials_rejected``, ``unreachable``)."""


@dataclasses.dataclass(frozen=True)
class AgentsView:
    tainted: int
    """Nodes carrying the startup taint ``eni-ipam.io/not-ready``."""
    not_serving: tuple[str, ...]
    """Of those, the Nodes whose pool has been ready beyond the grace: their agent has not served."""


@dataclasses.dataclass(frozen=True)
class Report:
    checked_at: str
    version: str
    """This eni-ipam's version (the CRD revision it expects is its own)."""
    controller: ControllerView
    crd: CrdView | None
    nodes: NodesView
    subnets: SubnetsView
    api: ApiView | None
    """None without the leader's metrics."""
    agents: AgentsView
    findings: tuple[Finding, ...]
    """Problems first, each in section order."""

    @property
    def problems(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "problem"]

    @property
    def verdict(self) -> str:
        return "NEEDS ATTENTION" if self.problems else "OK"

    @property
    def exit_code(self) -> int:
        return 1 if self.problems else 0

    def as_json(self) -> dict[str, Any]:
        """The report as ``--json`` prints it (docs/status.md lists the keys)."""
        summary = {"verdict": self.verdict, "problems": len(self.problems), "exit_code": self.exit_code}
        return {**summary, **dataclasses.asdict(self)}


# -- reading documents (what the cluster holds may be of any shape: never trusted) -----------------


def parse_time(text: object) -> datetime.datetime | None:
    """An RFC 3339 time of the API (``…Z``, with or without fractions), or None."""
    if not isinstance(text, str) or not text:
        return None
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=datetime.UTC)


def since(now: datetime.datetime, text: object) -> float | None:
    """Seconds from the time ``text`` to ``now`` (never negative: another machine's clock may be ahead)."""
    moment = parse_time(text)
    return max((now - moment).total_seconds(), 0.0) if moment is not None else None


def text(value: object) -> str:
    """``value`` if it is a string, else ``""``."""
    return value if isinstance(value, str) else ""


def mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def meta(obj: Obj) -> Mapping[str, Any]:
    return mapping(obj.get("metadata"))


def name_of(obj: Obj) -> str:
    return text(meta(obj).get("name"))


def condition(pool: Obj, kind: str) -> Mapping[str, Any] | None:
    """The pool's status condition of type ``kind``."""
    for entry in mapping(pool.get("status")).get("conditions") or ():
        if isinstance(entry, Mapping) and entry.get("type") == kind:
            return entry
    return None


def duration_text(seconds: float) -> str:
    """``42s``, ``3m12s``, ``5h3m``, ``2d4h``: a duration at a glance."""
    whole = int(max(seconds, 0))
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60}s" if whole % 60 else f"{whole // 60}m"
    if whole < 86400:
        return f"{whole // 3600}h{whole % 3600 // 60}m"
    return f"{whole // 86400}d{whole % 86400 // 3600}h"
