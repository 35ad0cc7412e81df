"""The fake ARM's long-running operations and ETags: how a write is accepted, runs and ends.

Role: every write the provider makes (a NIC ``PUT`` or ``DELETE``, a scale-set VM update) is a
long-running operation here, as on ARM. :class:`Operations` starts one when a handler accepts a
write, hands out its status URL (``Azure-AsyncOperation``), answers its status document
(``InProgress``, then ``Succeeded``, ``Failed`` or ``Canceled``) and ends it. :func:`check_if_match`
is ARM's optimistic concurrency: a write with a stale ``If-Match`` is refused ``412``.

Invariants:

* a change is made when its write is accepted, not when its operation ends; an operation that ends
  failed after its change was made (:meth:`~eni_ipam_testkit.fake_azure.faults.Faults.fail_next_lro`
  with ``apply``) restores what it changed, and the NICs it restored get new ETags;
* while an operation runs, the resources it changed read ``provisioningState: Updating`` (or a stalled
  operation's state); when it ends they read ``Succeeded``, or ``Failed`` for any other end;
* an operation answers ``InProgress`` to ``lro_polls`` status polls, then its end; a ``GET`` of a
  resource it changed counts as such a poll, so an operation whose poller went away still ends;
  a stalled operation never ends;
* an operation ends once: its status document may be read again, but its undo runs only once.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import Any

from eni_ipam_testkit.fake_azure.configurations import Snapshot
from eni_ipam_testkit.fake_azure.faults import Faults
from eni_ipam_testkit.fake_azure.model import COMPUTE_API, NETWORK_API, Json, Nic, Refusal, ScaleSetVm
from eni_ipam_testkit.fake_azure.wire import Answer, Request


@dataclasses.dataclass
class Lro:
    id: str
    operation: str
    provider: str
    polls_left: int
    ends: str = "Succeeded"
    """Its final status: ``Succeeded``, ``Failed`` or ``Canceled``."""
    error: tuple[str, str] | None = None
    """``(code, message)`` of the error object of a failed end (``None``: no error object)."""
    stalled: bool = False
    state: str = "Updating"
    """Provisioning state of the resources it changed while it runs."""
    changed: list[Nic | ScaleSetVm] = dataclasses.field(default_factory=list)
    """Resources whose provisioning state follows it."""
    undo: Snapshot | None = None
    """What to restore when it ends failed."""
    ended: bool = False


class Operations(Faults):
    """The store and its faults, and the long-running operations of the writes to it."""

    def __init__(self, *, lro_polls: int, **settings: Any) -> None:
        super().__init__(**settings)
        self.lro_polls = lro_polls
        self._lros: dict[str, Lro] = {}

    def _start_lro(self, operation: str, provider: str) -> tuple[Lro, dict[str, str], bool]:
        """A new long-running operation, its status URL header, and whether its change must be applied
        (not when a fault that changes nothing was injected for it)."""
        fault = self._next_lro_fault(operation)
        lro = Lro(f"{next(self._counter):08d}-op", operation, provider, self.lro_polls)
        if fault is not None:
            if fault.ends:
                lro.ends = fault.ends
                lro.error = (fault.code, fault.message) if fault.code else None
            else:
                lro.stalled, lro.state = True, fault.state
        self._lros[lro.id] = lro
        version = NETWORK_API if provider == "Network" else COMPUTE_API
        url = (
            f"{self.base_url}/subscriptions/{self.subscription_id}/providers/Microsoft.{provider}"
            f"/locations/{self.location}/operations/{lro.id}?api-version={version}"
        )
        return lro, {"Azure-AsyncOperation": url}, fault is None or fault.apply

    def _follow(self, lro: Lro, changed: Sequence[Nic | ScaleSetVm], before: Snapshot) -> None:
        """The operation changed ``changed`` (from ``before``): their provisioning state follows it."""
        lro.changed = list(changed)
        lro.undo = before if lro.ends != "Succeeded" else None
        for resource in changed:
            resource.state = lro.state

    def _end(self, lro: Lro) -> None:
        """The operation is over: a failed one's change is undone; the changed resources settle."""
        if lro.ended:
            return
        lro.ended = True
        if lro.undo is not None:
            lro.undo.restore(self._subnets)
            for nic, _, _ in lro.undo.nics:
                self._touch(nic)
        for resource in lro.changed:
            resource.state = "Succeeded" if lro.ends == "Succeeded" else "Failed"

    def _progress(self, resource: Nic | ScaleSetVm) -> None:
        """A read of ``resource``: the running operations that changed it move on, as a status poll
        would move them."""
        for lro in list(self._lros.values()):
            if lro.ended or lro.stalled or not any(r is resource for r in lro.changed):
                continue
            if lro.polls_left > 0:
                lro.polls_left -= 1
            else:
                self._end(lro)

    # -- handlers: the operations' status ----------------------------------------------------------

    def _get_operation(self, m: re.Match[str], req: Request) -> Answer:
        lro = self._lros.get(m["op"])
        if lro is None:
            raise Refusal(404, "NotFound", f"operation {m['op']} not found")
        if lro.stalled or (not lro.ended and lro.polls_left > 0):
            lro.polls_left -= 1
            return Answer(200, {"status": "InProgress", "name": lro.id})
        self._end(lro)
        document: Json = {"status": lro.ends, "name": lro.id}
        if lro.error is not None:
            code, message = lro.error
            document["error"] = {"code": code, "message": message}
        return Answer(200, document)

    def _get_operation_result(self, m: re.Match[str], req: Request) -> Answer:
        if m["op"] not in self._lros:
            raise Refusal(404, "NotFound", f"operation {m['op']} not found")
        return Answer(204)


def check_if_match(req: Request, etag: str) -> None:
    wanted = req.headers.get("If-Match")
    if wanted is not None and wanted != "*" and wanted != etag:
        raise Refusal(
            412,
            "PreconditionFailed",
            f"Precondition failed: the resource changed since it was read "
            f"(If-Match {wanted}, current {etag}).",
        )
