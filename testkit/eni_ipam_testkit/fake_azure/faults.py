"""The fake ARM's fault injection: what goes wrong, when a test asks for it, and only then.

Role: :class:`Faults` holds the faults a test queued and hands each one out to the request it is
for; the transport (:mod:`~eni_ipam_testkit.fake_azure.transport`), the handlers and the operations
(:mod:`~eni_ipam_testkit.fake_azure.operations`) consult it. Every fault is keyed by the operation
name the provider uses (``NetworkInterfaces.CreateOrUpdate``; a status poll is
``<operation>.Poll``), or, for :meth:`~Faults.delay_addresses` and :meth:`~Faults.before_next_write`,
by the resource.

Invariants:

* every fault is one-shot or counted: it is used up by the requests it hits, and a request no fault
  was queued for is answered as ARM would, so a test sees exactly the faults it asked for;
* faults of one kind and operation are served in the order they were queued;
* a request meets them in a fixed order: a dropped connection first, then a throttle (neither
  reaches ARM, so nothing changes), then the handler, which runs the other writer's change just
  before it checks the resource's ETag and gives a long-running operation it starts its fault, then
  a lost answer (the change was made).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from eni_ipam_testkit.fake_azure.model import key
from eni_ipam_testkit.fake_azure.store import Store
from eni_ipam_testkit.fake_azure.wire import Answer, error


@dataclasses.dataclass
class Throttle:
    times: int
    retry_after: float
    code: str
    after: int = 0


@dataclasses.dataclass
class LroFault:
    """How the next long-running operation of an operation goes wrong."""

    ends: str
    """``Failed`` or ``Canceled``; ``""``: it never ends."""
    code: str = ""
    """The error object's code (``""``: the status document has no error object)."""
    message: str = ""
    apply: bool = False
    """Whether the change is carried out (and, when the operation ends, undone)."""
    state: str = "Updating"
    """Provisioning state of the changed resources while a stalled operation never ends."""


class Faults(Store):
    """The resource store, and the faults queued against it."""

    def __init__(self, **settings: Any) -> None:
        super().__init__(**settings)
        self._throttles: dict[str, list[Throttle]] = {}
        self._lro_faults: dict[str, list[LroFault]] = {}
        self._hooks: dict[str, list[Callable[[], None]]] = {}
        self._lost: dict[str, int] = {}
        self._drops: dict[str, int] = {}

    # -- what a test asks for ----------------------------------------------------------------------

    def throttle(
        self,
        operation: str,
        *,
        times: int = 1,
        retry_after: float = 5,
        code: str = "TooManyRequests",
        after: int = 0,
    ) -> None:
        """Answer ``times`` requests of ``operation`` with ``429`` and ``Retry-After``, once ``after``
        more of them have been served (``after=1``: from the second page of a listing on)."""
        self._throttles.setdefault(operation, []).append(Throttle(times, retry_after, code, after))

    def lose_next_answer(self, operation: str) -> None:
        """Carry out the next ``operation`` but answer ``500`` (the answer was lost on the way back):
        the SDK's retry then meets the changed resource."""
        self._lost[operation] = self._lost.get(operation, 0) + 1

    def disconnect(self, operation: str, *, times: int = 1) -> None:
        """Drop the next ``times`` requests of ``operation`` before ARM sees them: azure-core raises
        ``ServiceRequestError``."""
        self._drops[operation] = self._drops.get(operation, 0) + times

    def fail_next_lro(
        self, operation: str, code: str, message: str = "", *, apply: bool = False, ends: str = "Failed"
    ) -> None:
        """The next ``operation`` is accepted and ends ``ends`` (``Failed`` or ``Canceled``) with an
        error object carrying ``code`` (none when ``code`` is empty).

        Without ``apply`` it changes nothing. With ``apply`` its change is carried out when it is
        accepted (readers see it, ``Updating``) and undone when it ends, leaving the resource
        ``Failed``: what a reader saw while it ran is not what stays.
        """
        if ends not in ("Failed", "Canceled"):
            raise ValueError(f"an operation ends Failed or Canceled, not {ends!r}")
        message = message or f"{operation} failed: {code}"
        self._lro_faults.setdefault(operation, []).append(LroFault(ends, code, message, apply))

    def stall_next_lro(self, operation: str, *, apply: bool = False, state: str = "Succeeded") -> None:
        """The next ``operation`` is accepted and never ends: its status says ``InProgress`` forever.

        Without ``apply`` it changes nothing. With ``apply`` its change is carried out and the changed
        resources read ``state``: ``Succeeded`` (the change landed; only the operation's status never
        says so) or ``Updating`` (still in progress, for good).
        """
        self._lro_faults.setdefault(operation, []).append(LroFault("", apply=apply, state=state))

    def delay_addresses(self, nic_id: str, *, reads: int = 1) -> None:
        """The next ``reads`` reads (``GET``) of the NIC show its secondary configurations without a
        private address, as Azure does while it still allocates them."""
        self._nic(nic_id).hidden_reads += reads

    def before_next_write(self, resource_id: str, change: Callable[[], None]) -> None:
        """Run ``change`` just before the next write (PUT or DELETE) to ``resource_id`` is handled."""
        self._hooks.setdefault(key(resource_id), []).append(change)

    # -- what the requests meet --------------------------------------------------------------------

    def _dropped(self, operation: str) -> bool:
        """Whether this request of ``operation`` is dropped before ARM sees it (one drop used up)."""
        if self._drops.get(operation):
            self._drops[operation] -= 1
            return True
        return False

    def _throttled(self, operation: str) -> Answer | None:
        queue = self._throttles.get(operation)
        if not queue:
            return None
        throttle = queue[0]
        if throttle.after > 0:
            throttle.after -= 1
            return None
        throttle.times -= 1
        if throttle.times <= 0:
            queue.pop(0)
        answer = error(429, throttle.code, "The request is being throttled.")
        answer.headers["Retry-After"] = f"{throttle.retry_after:g}"
        return answer

    def _run_hooks(self, resource_id: str) -> None:
        """Run the oldest change registered for the resource's next write (one per write)."""
        queue = self._hooks.get(key(resource_id))
        if queue:
            queue.pop(0)()

    def _lose(self, operation: str, answer: Answer) -> Answer:
        """The answer the client gets: a success is lost (``500``) if a loss is queued for ``operation``."""
        if answer.status < 400 and self._lost.get(operation):
            self._lost[operation] -= 1
            return error(500, "InternalServerError", "The answer was lost on its way back.")
        return answer

    def _next_lro_fault(self, operation: str) -> LroFault | None:
        queue = self._lro_faults.get(operation)
        return queue.pop(0) if queue else None
