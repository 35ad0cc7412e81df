"""The mutation fence: one switch that stops every mutating cloud call, and a drain for those in flight.

A replica may mutate the cloud only while it leads and is not shutting down. Losing the lease
closes the fence at once (before the leader's tasks are even cancelled); SIGTERM closes it, then
waits (bounded) for the calls already in flight so no interface is left half-created. Read
calls (resync, describe) pass regardless: they change nothing.

Invariant: once :meth:`Fence.close` returns, no mutating call starts until :meth:`Fence.open`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

from eni_ipam.core import errors
from eni_ipam.core.model import CloudSnapshot, CreateInterface, Instance, InstanceLimits, Interface
from eni_ipam.core.provider import Provider


class Fence:
    def __init__(self, *, is_open: bool = False) -> None:
        self._open = is_open
        self._sealed = False
        self._reason = "mutations have not been allowed yet"
        self.in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()

    @property
    def is_open(self) -> bool:
        return self._open

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
        if not self._open:
            raise errors.Fenced(self._reason)
        self.in_flight += 1
        self._idle.clear()

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

    Raises :class:`~eni_ipam.core.errors.Fenced` (and calls nothing) when it is closed.
    """

    def __init__(self, provider: Provider, fence: Fence) -> None:
        self.inner = provider
        self.fence = fence
        self.name = provider.name

    async def resync(self) -> CloudSnapshot:
        return await self.inner.resync()

    async def describe_instance(self, *, instance_id: str) -> Instance | None:
        return await self.inner.describe_instance(instance_id=instance_id)

    async def instance_limits(self, *, instance_type: str) -> InstanceLimits:
        return await self.inner.instance_limits(instance_type=instance_type)

    async def list_detached_interfaces(self, *, tags: Mapping[str, str]) -> list[Interface]:
        return await self.inner.list_detached_interfaces(tags=tags)

    async def assign_addresses(self, *, interface_id: str, count: int, prefixes: bool = False) -> list[str]:
        self.fence.enter()
        try:
            return await self.inner.assign_addresses(
                interface_id=interface_id, count=count, prefixes=prefixes
            )
        finally:
            self.fence.exit()

    async def unassign_addresses(
        self, *, interface_id: str, addresses: Sequence[str] = (), prefixes: Sequence[str] = ()
    ) -> None:
        self.fence.enter()
        try:
            await self.inner.unassign_addresses(
                interface_id=interface_id, addresses=addresses, prefixes=prefixes
            )
        finally:
            self.fence.exit()

    async def create_interface(
        self,
        *,
        instance_id: str,
        request: CreateInterface,
        tags: Mapping[str, str],
        token: str,
        delete_on_termination: bool = True,
    ) -> Interface:
        self.fence.enter()
        try:
            return await self.inner.create_interface(
                instance_id=instance_id,
                request=request,
                tags=tags,
                token=token,
                delete_on_termination=delete_on_termination,
            )
        finally:
            self.fence.exit()

    async def delete_interface(self, *, interface_id: str, detach: bool = True) -> None:
        self.fence.enter()
        try:
            await self.inner.delete_interface(interface_id=interface_id, detach=detach)
        finally:
            self.fence.exit()
