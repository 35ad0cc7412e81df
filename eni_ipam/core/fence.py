"""The mutation fence: one switch and one clock that stop every mutating cloud call, and a drain
for those in flight.

A replica may mutate the cloud only while it leads and is not shutting down. Two things close the
fence, and each is checked at every mutating call:

* the **switch**: losing the lease closes it at once (before the leader's tasks are even
  cancelled); SIGTERM seals it, then waits (bounded) for the calls already in flight so no
  interface is left half-created;
* the **term**: with leader election, leadership is proven only for ``renew_deadline`` seconds
  after the start of the last successful renewal, on a clock that counts time the process did not
  run (a SIGSTOP, a frozen VM, a long stall). A process that resumes after a pause finds its term
  lapsed and is refused (:class:`~eni_ipam.core.errors.Lapsed`) before its renew loop has even
  run: the switch alone would let the first task to run mutate. Because ``renew_deadline <
  lease_duration`` and a standby times the lease from when it saw the renewal land (after its
  start), a term always ends before any standby may take the lease.

Read calls (resync, describe) pass regardless: they change nothing.

Invariant: once :meth:`Fence.close` returns, no mutating call starts until :meth:`Fence.open`;
with a term, none starts at or after the term's end.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Callable, Iterator, Mapping, Sequence

import structlog

from eni_ipam.core import errors
from eni_ipam.core.gate import gated
from eni_ipam.core.model import CloudSnapshot, CreateInterface, Instance, InstanceLimits, Interface
from eni_ipam.core.provider import Provider

log = structlog.get_logger("eni_ipam.core.fence")


class Fence:
    """``term_clock``: where the leadership term is timed (seconds, only differences count); given,
    mutations pass only within a term granted by :meth:`renewed`, and none before the first. None
    (a replica that runs alone) has no term: the switch decides."""

    def __init__(self, *, is_open: bool = False, term_clock: Callable[[], float] | None = None) -> None:
        self._open = is_open
        self._sealed = False
        self._reason = "mutations have not been allowed yet"
        self._term_clock = term_clock
        self._term_end = -math.inf if term_clock is not None else math.inf
        self._lapse_told = False
        self.in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()

    @property
    def is_open(self) -> bool:
        return self._open

    @property
    def term_left(self) -> float:
        """Seconds left in the current term (infinite without a term; negative once it lapsed)."""
        if self._term_clock is None:
            return math.inf
        return self._term_end - self._term_clock()

    def renewed(self, until: float) -> None:
        """Leadership is proven until ``until`` on the term clock: the start of the successful
        renewal plus the renew deadline, both read on the term clock by the elector."""
        if self._term_clock is not None:
            self._term_end = until
            if self._lapse_told:
                log.info("mutations_resumed", reason="the lease was renewed")
            self._lapse_told = False

    def open(self) -> None:
        """Allow mutations again, unless the fence was sealed (the process is stopping)."""
        self._open = not self._sealed

    def seal(self, reason: str) -> None:
        """Close for good: a later :meth:`open` (a new leadership term won during shutdown) is ignored."""
        self._sealed = True
        self.close(reason)

    def close(self, reason: str) -> None:
        """Refuse every mutating call from now on (calls in flight finish)."""
        self._open = False
        self._reason = reason

    def enter(self) -> None:
        """Admit one mutating method (counted in flight until :meth:`exit`), or raise as :meth:`check`."""
        self.check()
        self.in_flight += 1
        self._idle.clear()

    def check(self) -> None:
        """Return if a mutating request may go out now; raise :class:`~eni_ipam.core.errors.Fenced`
        when the switch is closed, :class:`~eni_ipam.core.errors.Lapsed` outside a term. The
        :class:`~eni_ipam.core.gate.Gate` of every admitted method: asked again at each request."""
        if not self._open:
            raise errors.Fenced(self._reason)
        left = self.term_left
        if left <= 0:
            if not self._lapse_told and left > -math.inf:  # before the first term: nothing to tell
                # Once per lapse: a process that was paused, or renewals that keep failing.
                log.warning(
                    "mutations_refused", reason="leadership term lapsed", seconds_past=round(-left, 3)
                )
                self._lapse_told = True
            since = f"the last lease renewal is {-left:.1f}s past the renew deadline"
            raise errors.Lapsed(
                f"leadership is not proven: {since if left > -math.inf else 'no lease renewal yet'}; "
                "waiting for a renewal"
            )

    def exit(self) -> None:
        self.in_flight -= 1
        if self.in_flight == 0:
            self._idle.set()

    async def drain(self, seconds: float) -> bool:
        """Wait up to ``seconds`` (loop time) for calls in flight; True when none is left."""
        try:
            async with asyncio.timeout(seconds):
                await self._idle.wait()
        except TimeoutError:
            return False
        return True


class FencedProvider:
    """A :class:`~eni_ipam.core.provider.Provider` whose mutating calls pass only while ``fence`` is open.

    Raises :class:`~eni_ipam.core.errors.Fenced` (and calls nothing) when it is closed. An admitted
    method's requests each ask the fence again as they go out (:mod:`eni_ipam.core.gate`), so one
    that waited for a rate-limit token past the end of the term is refused then.
    """

    def __init__(self, provider: Provider, fence: Fence) -> None:
        self.inner = provider
        self.fence = fence
        self.name = provider.name

    @contextlib.contextmanager
    def _admitted(self) -> Iterator[None]:
        """A mutating method: admitted by the fence, counted in flight, and run with the fence as
        the current gate so that each of its requests asks it again (:mod:`eni_ipam.core.gate`)."""
        self.fence.enter()
        try:
            with gated(self.fence):
                yield
        finally:
            self.fence.exit()

    async def resync(self) -> CloudSnapshot:
        return await self.inner.resync()

    async def describe_instance(self, *, instance_id: str) -> Instance | None:
        return await self.inner.describe_instance(instance_id=instance_id)

    async def instance_limits(self, *, instance_type: str) -> InstanceLimits:
        return await self.inner.instance_limits(instance_type=instance_type)

    async def list_detached_interfaces(self, *, tags: Mapping[str, str]) -> list[Interface]:
        return await self.inner.list_detached_interfaces(tags=tags)

    async def assign_addresses(
        self, *, interface_id: str, count: int, prefixes: bool = False, addresses: Sequence[str] = ()
    ) -> list[str]:
        with self._admitted():
            if addresses:  # only named when asked: a wrapped provider of an older shape still works
                return await self.inner.assign_addresses(
                    interface_id=interface_id, count=count, prefixes=prefixes, addresses=addresses
                )
            return await self.inner.assign_addresses(
                interface_id=interface_id, count=count, prefixes=prefixes
            )

    async def assign_ipv6_prefix(self, *, interface_id: str) -> str:
        with self._admitted():
            return await self.inner.assign_ipv6_prefix(interface_id=interface_id)

    async def unassign_addresses(
        self, *, interface_id: str, addresses: Sequence[str] = (), prefixes: Sequence[str] = ()
    ) -> None:
        with self._admitted():
            await self.inner.unassign_addresses(
                interface_id=interface_id, addresses=addresses, prefixes=prefixes
            )

    async def create_interface(
        self,
        *,
        instance_id: str,
        request: CreateInterface,
        tags: Mapping[str, str],
        token: str,
        delete_on_termination: bool = True,
    ) -> Interface:
        with self._admitted():
            return await self.inner.create_interface(
                instance_id=instance_id,
                request=request,
                tags=tags,
                token=token,
                delete_on_termination=delete_on_termination,
            )

    async def create_ready_interface(
        self,
        *,
        subnet_id: str,
        security_groups: Sequence[str],
        count: int,
        prefixes: bool = False,
        tags: Mapping[str, str],
        token: str,
    ) -> Interface:
        with self._admitted():
            return await self.inner.create_ready_interface(
                subnet_id=subnet_id,
                security_groups=security_groups,
                count=count,
                prefixes=prefixes,
                tags=tags,
                token=token,
            )

    async def attach_interface(
        self, *, interface: Interface, instance_id: str, device_index: int, network_card: int = 0
    ) -> Interface:
        with self._admitted():
            return await self.inner.attach_interface(
                interface=interface,
                instance_id=instance_id,
                device_index=device_index,
                network_card=network_card,
            )

    async def delete_interface(self, *, interface_id: str, detach: bool = True) -> None:
        with self._admitted():
            await self.inner.delete_interface(interface_id=interface_id, detach=detach)
