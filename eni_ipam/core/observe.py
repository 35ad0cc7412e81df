"""What the domain reports, as narrow protocols: the domain never sees how it is exported.

Each part of the reconciler reports through the smallest protocol that covers it: the cloud-call
wrapper and every provider through :class:`ApiObserver`, the shared view through
:class:`ViewObserver`, garbage collection through :class:`GcObserver`, a node's pass through
:class:`PassObserver`, the manager through :class:`ManagerObserver`. :class:`Observer` is all of them,
what a :class:`~eni_ipam.core.manager.NodeManager` is given. The process's Prometheus metrics
(:class:`eni_ipam.adapters.metrics.controller.Metrics`) implement it.

Every method must be cheap, must not block and must not raise; an :class:`ApiObserver` must also be
thread-safe (the AWS provider reports each request from botocore's threads).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol

from eni_ipam.core.model import NodeStats, Subnet

CAPACITY_REASONS = ("instance-limit", "subnet", "security-groups", "limits-unknown")
"""Why a node's pool cannot grow; ``instance-limit`` is a node at capacity (every adapter slot and
address slot taken)."""

FAILURE_REASONS = (
    "Throttled",
    "TransientError",
    "NotFound",
    "InstanceNotRunning",
    "InstanceOutOfScope",
    "DeviceIndexInUse",
    "InvalidRequest",
    "AddressInUse",
    "Unauthorized",
    "CapacityError",
    "InterfaceLimitExceeded",
    "AttachmentLimitExceeded",
    "SubnetExhausted",
    "PrefixesExhausted",
    "QuotaExceeded",
    "ProviderError",
    "NotReady",
    "LimitsUnknown",
    "other",
)
"""Why a node's last pass failed, as ``node_failing``'s ``reason``: the error's class among the
cloud's errors and the reconciler's own, ``other`` for any else (a bug's exception). A closed set,
so that one node costs one fixed row."""


def failure_reason(error: BaseException) -> str:
    """``error``'s entry in :data:`FAILURE_REASONS`."""
    name = type(error).__name__
    return name if name in FAILURE_REASONS else "other"


class ApiObserver(Protocol):
    """Cloud API calls: what :class:`~eni_ipam.core.caller.ApiCaller` and the providers report."""

    def api_call(self, *, operation: str, outcome: str, seconds: float) -> None:
        """One logical call (all its SDK attempts) finished; ``outcome`` is ``ok`` or the cloud's
        error code."""

    def api_request(self, *, operation: str, throttled: bool = False) -> None:
        """One request went to the cloud (``throttled``: and the cloud answered with a throttle)."""

    def api_throttle(self, *, operation: str) -> None:
        """The cloud answered one request with a throttle."""

    def rate_limit_wait(self, *, operation: str, seconds: float) -> None:
        """A call waited ``seconds`` for a client-side rate-limit token."""


class ViewObserver(Protocol):
    """The shared cloud view's subnets."""

    def replace_subnets(self, subnets: Iterable[Subnet]) -> None:
        """Every subnet there is after a full resync, each with the cloud's free count."""

    def set_subnet_free(self, subnet: Subnet, free: int) -> None:
        """The free addresses of one subnet now, net of the passes since the resync."""

    def subnet_pressure(self, subnet: Subnet, *, under: bool, changed: bool) -> None:
        """Whether one subnet is under pressure now; ``changed``: it just entered or left it (only
        reported with subnet pressure enabled)."""

    def set_subnet_free_blocks(self, subnet: Subnet, blocks: int) -> None:
        """The free aligned /28 blocks of one subnet now (counted, :mod:`eni_ipam.core.blocks`)."""


class GcObserver(Protocol):
    """Garbage collection of leaked interfaces."""

    def gc_interfaces(self, *, action: str, count: int) -> None:
        """Interfaces ``marked``, ``deleted`` or ``failed`` in one run."""

    def gc_failure(self) -> None:
        """A run whose listing failed."""


class ReadyPoolObserver(Protocol):
    """What the pool of ready interfaces reports (:mod:`eni_ipam.core.readypool`)."""

    def ready_interfaces(self, *, subnet: str, count: int) -> None:
        """Ready interfaces in ``subnet`` now (``eni_ipam_ready_interfaces{subnet}``)."""

    def ready_interface_taken(self, *, subnet: str, outcome: str) -> None:
        """A node took one: ``attached``, or the failed attach's error code."""

    def ready_interface_refilled(self, *, subnet: str, outcome: str) -> None:
        """A refill's create: ``created``, or the error code that refused it."""


class PassObserver(Protocol):
    """What one node's maintenance pass did."""

    def addresses_allocated(self, *, subnet: str, count: int) -> None:
        """Addresses added to a pool in ``subnet`` (a /28 prefix counts 16)."""

    def addresses_released(self, *, subnet: str, count: int) -> None:
        """Addresses given back to ``subnet``."""

    def interface_created(self, *, subnet: str, outcome: str) -> None:
        """An interface create (with its attach) in ``subnet`` ended: ``success``, or the cloud's
        error code."""

    def allocation_finished(self, *, kind: str, ok: bool, seconds: float) -> None:
        """An allocation call of ``kind`` (``assign``, ``create``) ended."""

    def release_finished(self, *, ok: bool, seconds: float) -> None:
        """A release call ended."""

    def deficit_resolved(self, *, seconds: float) -> None:
        """A node's deficit, open for ``seconds``, is resolved (time to IP)."""


class ManagerObserver(Protocol):
    """The manager's resyncs, passes and each node's published stats."""

    def resync_finished(self, *, ok: bool) -> None:
        """A full resync of the cloud view ended."""

    def pass_finished(self, *, seconds: float) -> None:
        """A maintenance pass ended, failed or not, after ``seconds``."""

    def report_schedule(
        self,
        *,
        waiting: Callable[[], int],
        in_backoff: Callable[[], int],
        oldest_deficit: Callable[[], float],
        since_resync: Callable[[], float],
    ) -> None:
        """Where the schedule stands, read when reported: nodes queued for a pass not started yet,
        nodes in backoff after a failed pass, seconds the oldest open deficit has lasted, and seconds
        since the last full listing of the cloud succeeded (since the manager began, while none has)."""

    def pass_failed(self, *, reason: str) -> None:
        """A maintenance pass failed; ``reason`` names its error's type (a stopped mutation fence is
        not a failure)."""

    def set_node(
        self, name: str, stats: NodeStats, *, capacity: str = "", failing: tuple[str, int] | None = None
    ) -> None:
        """Node ``name``'s stats now; ``capacity`` is why its pool cannot grow (one of
        :data:`CAPACITY_REASONS`), or empty; ``failing``, while its last pass failed, the reason (one
        of :data:`FAILURE_REASONS`) and how many passes in a row have failed."""

    def remove_node(self, name: str) -> None:
        """Node ``name`` is gone: nothing is reported of it any more."""

    def show_totals(self) -> None:
        """This process reconciles: cluster totals are meaningful, zero included."""


class Observer(
    ApiObserver, ViewObserver, GcObserver, ReadyPoolObserver, PassObserver, ManagerObserver, Protocol
):
    """Everything the reconciler reports."""
