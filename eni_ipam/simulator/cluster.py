"""An embedded cluster: the real NodeManager over the embedded node store, with a simulated node side.

This is the one place that wires a reconciler without Kubernetes for the simulator, the demos, the
benchmarks and the tests: a :class:`~eni_ipam.store.memory.MemoryStore` is both the node source and
the status sink, and a :class:`~eni_ipam.simulator.simnode.SimulatedNodeSide` plays the node agents
(it uses pool addresses and answers the release handshake). ``eni-ipam run`` with
``node_source: memory`` wires the same store without the simulated side (real agents answer).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator

from eni_ipam.adapters.metrics.controller import Metrics
from eni_ipam.core.clock import Clock
from eni_ipam.core.manager import NodeManager
from eni_ipam.core.provider import Provider
from eni_ipam.core.settings import Settings
from eni_ipam.simulator.simnode import SimulatedNodeSide
from eni_ipam.store.memory import MemoryStore


class EmbeddedCluster:
    """A manager over ``provider`` with the embedded store and a simulated node side.

    ``store`` and ``side`` outlive a manager when given (a process restarted over the same store).
    """

    def __init__(
        self,
        provider: Provider,
        *,
        settings: Settings,
        metrics: Metrics,
        clock: Clock,
        rng: random.Random | None = None,
        store: MemoryStore | None = None,
        side: SimulatedNodeSide | None = None,
    ) -> None:
        self.store = store if store is not None else MemoryStore()
        self.side = side if side is not None else SimulatedNodeSide(self.store)
        self.manager = NodeManager(
            provider=provider,
            settings=settings,
            metrics=metrics,
            clock=clock,
            status_sink=self.store,
            rng=rng,
        )
        self.store.attach(self.manager)
        # Alone, as ``eni-ipam run`` without Kubernetes: it leads, and is ready once resynced.
        metrics.report_role(leader=lambda: True, ready=lambda: self.manager.ready)
        self.task: asyncio.Task[None] | None = None
        """The manager's task while :meth:`running`."""

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[EmbeddedCluster]:
        """The manager running for the block, cancelled (and awaited) after it."""
        task = self.task = asyncio.create_task(self.manager.run(), name="eni-ipam-manager")
        try:
            yield self
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            self.task = None
