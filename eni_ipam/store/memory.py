"""The embedded node store: node resources and their statuses, in memory.

It is the node source for single-process use (``demo``, ``simulate``, ``run`` without Kubernetes)
and the status sink the manager publishes to. Observers may subscribe to status changes — the
simulated node side does, to answer the release handshake.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from eni_ipam.core.model import NodeStatus
from eni_ipam.core.records import NodeRecord
from eni_ipam.core.spec import NodeResource


class NodeSink(Protocol):
    """Where node events go (the NodeManager)."""

    def upsert(self, resource: NodeResource) -> None: ...

    def delete(self, name: str) -> object: ...


StatusObserver = Callable[[str, NodeStatus], None]


class MemoryStore:
    def __init__(self) -> None:
        self.resources: dict[str, NodeResource] = {}
        self.statuses: dict[str, NodeStatus] = {}
        self._sink: NodeSink | None = None
        self._observers: list[StatusObserver] = []

    def attach(self, sink: NodeSink) -> None:
        """Start delivering events to ``sink``; it first receives every node already stored."""
        self._sink = sink
        for resource in self.resources.values():
            sink.upsert(resource)

    def observe(self, observer: StatusObserver) -> None:
        self._observers.append(observer)

    def put(self, resource: NodeResource) -> None:
        self.resources[resource.name] = resource
        if self._sink is not None:
            self._sink.upsert(resource)

    def remove(self, name: str) -> None:
        self.resources.pop(name, None)
        self.statuses.pop(name, None)
        if self._sink is not None:
            self._sink.delete(name)

    # NodeRecords (one process, one term)
    term = 0

    def node_records(self) -> list[NodeRecord]:
        records = []
        for name, resource in self.resources.items():
            status = self.statuses.get(name)
            interfaces = status.interfaces if status else ()
            records.append(
                NodeRecord(
                    name=name,
                    instance_id=resource.instance_id,
                    subnet_ids=resource.spec.subnet_ids,
                    prefixes=tuple(p for i in interfaces for p in i.prefixes),
                    ipv6_prefixes=tuple(p for i in interfaces for p in i.ipv6_prefixes),
                )
            )
        return records

    # StatusSink
    def publish(self, name: str, status: NodeStatus) -> None:
        if name not in self.resources:
            return  # the node went away while its last pass ran
        self.statuses[name] = status
        for observer in self._observers:
            observer(name, status)
