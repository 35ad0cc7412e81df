"""Kubernetes Events on Nodes, for what an operator must act on: deduplicated and rate limited.

Role: the parts of the Kubernetes source say, synchronously, that a Node is in a state someone must
act on (:meth:`EventRecorder.warn`: a Node without a provider id, a pool that found no subnet room,
an instance type whose limits are unknown, two Nodes on one instance, a pool deleted by hand and made
again); while leading, :meth:`EventRecorder.run` sends them. ``kubectl describe node NODE`` and
``kubectl get events --field-selector involvedObject.name=NODE`` show them. Events are about Nodes,
not ENIPools: a Node without a provider id has no pool to speak of, and the operator starts from the
node that has no addresses.

Invariants:

* One Event object per Node, reason and message. The same one said again within
  :data:`REPEAT_AFTER` sends nothing (it is counted); said again later, the Event's ``count`` and
  ``lastTimestamp`` are patched (a new Event is created when the old one has expired), as
  client-go's recorder does. What is remembered is bounded (:data:`REMEMBERED`).
* At most :data:`BURST` events at once and one every ``1 / QPS`` seconds after that, whatever the
  cluster does: at 100,000 nodes with a full subnet, the API server sees a trickle, not a storm. At
  most :data:`QUEUED` wait; more are dropped (and logged at debug), the oldest first kept.
* Nothing is sent while not leading (:meth:`clear` when a term ends): a standby says nothing twice.
* A failed send is logged and dropped: an Event is a hint, never worth a retry loop.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses

import structlog

from eni_ipam.core.clock import Clock
from eni_ipam.core.model import NodeStatus
from eni_ipam.core.ratelimit import Bucket, TokenBucket
from eni_ipam.kube import errors
from eni_ipam.kube.api import EVENTS, KubeApi

log = structlog.get_logger("eni_ipam.kube.events")

NAMESPACE = "default"
"""Where the Events of cluster-scoped objects (Nodes) live."""
COMPONENT = "eni-ipam"
REPEAT_AFTER = 600.0
"""Seconds within which the same event (Node, reason, message) is not sent again, only counted."""
BURST = 25
QPS = 1 / 5
"""Events sent at once at most, and a second after that (client-go's spam filter: 25, one in 5 min a
source and object; this bounds them all together)."""
QUEUED = 1024
"""Events waiting to be sent at most; more are dropped."""
REMEMBERED = 16384
"""Events remembered for deduplication at most (the oldest are forgotten first)."""

Key = tuple[str, str, str, str]
"""``(node, node uid, reason, message)``."""


@dataclasses.dataclass(slots=True)
class _Sent:
    name: str
    """The Event object's name ("" until it was created)."""
    count: int
    at: float
    """When (the clock's monotonic time) it was last sent."""
    unsent: int = 0
    """Times it was said since, within :data:`REPEAT_AFTER`."""


class EventRecorder:
    def __init__(self, api: KubeApi, *, clock: Clock, qps: float = QPS, burst: int = BURST) -> None:
        self.api = api
        self.clock = clock
        self._bucket = TokenBucket(Bucket(burst=float(burst), refill=qps), clock)
        self._queued: dict[Key, str] = {}
        """Events to send, each with its type (``Warning``, ``Normal``), in the order they came."""
        self._sent: collections.OrderedDict[Key, _Sent] = collections.OrderedDict()
        self._wake = asyncio.Event()
        self.dropped = 0
        """Events dropped because too many waited."""

    def warn(self, node: str, uid: str, reason: str, message: str) -> None:
        """Say, as a ``Warning`` Event on Node ``node``, ``reason`` (CamelCase) and ``message`` (a
        sentence saying what is wrong and what to do). Never blocks; sent by :meth:`run`."""
        self._record((node, uid, reason, message), "Warning")

    def _record(self, key: Key, kind: str) -> None:
        sent = self._sent.get(key)
        if sent is not None and self.clock.monotonic() - sent.at < REPEAT_AFTER:
            sent.unsent += 1  # said recently: counted, sent with the next repeat
            return
        if key in self._queued:
            return
        if len(self._queued) >= QUEUED:
            self.dropped += 1
            log.debug("event_dropped", node=key[0], reason=key[2], queued=len(self._queued))
            return
        self._queued[key] = kind
        self._wake.set()

    def clear(self) -> None:
        """The term ended: nothing queued is sent (the next leader finds the states again)."""
        self._queued.clear()

    async def run(self) -> None:
        """Send what is queued until cancelled (leader only)."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._queued:
                await self._bucket.acquire()
                if not self._queued:
                    break  # cleared meanwhile
                key = next(iter(self._queued))
                kind = self._queued.pop(key)
                await self._send(key, kind)

    async def _send(self, key: Key, kind: str) -> None:
        node, _, reason, _ = key
        now = self.clock.monotonic()
        stamp = self.clock.now_utc().strftime("%Y-%m-%dT%H:%M:%SZ")
        sent = self._sent.pop(key, None)
        try:
            if sent is not None and sent.name:
                count = sent.count + sent.unsent + 1
                try:
                    await self.api.patch(
                        EVENTS, sent.name, {"count": count, "lastTimestamp": stamp}, namespace=NAMESPACE
                    )
                    self._remember(key, _Sent(sent.name, count, now))
                    return
                except errors.KubeNotFound:
                    pass  # expired (the API server keeps Events for an hour by default): a new one
            created = await self.api.create(EVENTS, _event(key, kind, stamp))
        except errors.KubeError as exc:
            log.warning("event_failed", node=node, reason=reason, error=str(exc))
            return
        name = str((created.get("metadata") or {}).get("name") or "")
        self._remember(key, _Sent(name, 1, now))

    def _remember(self, key: Key, sent: _Sent) -> None:
        self._sent[key] = sent
        while len(self._sent) > REMEMBERED:
            self._sent.popitem(last=False)


_LIMITS = {
    "limits-unknown": (
        "LimitsUnknown",
        "the limits of the node's instance type are unknown: nothing is allocated on this node",
    ),
    "subnet": ("NoSubnetRoom", "the pool's last allocation found no subnet with room for it"),
    "security-groups": (
        "NoSecurityGroups",
        "the pool's last allocation found no security group for a new interface",
    ),
}
"""A pool's capacity limit (:data:`~eni_ipam.core.observe.CAPACITY_REASONS`) someone must act on →
the Event's reason and the message said when the status has none. A node at its instance's limit
(``instance-limit``) is full, not broken: no Event."""


def status_event(status: NodeStatus) -> tuple[str, str] | None:
    """The Event a pool's ``status`` calls for, ``(reason, message)``, or None when it calls for
    none: two Nodes on one instance (``DuplicateInstance``), unknown limits, no subnet room, no
    security group."""
    if status.problem:
        return status.problem, status.message or status.problem
    found = _LIMITS.get(status.limit)
    if found is None:
        return None
    reason, fallback = found
    return reason, status.message or fallback


def _event(key: Key, kind: str, stamp: str) -> dict[str, object]:
    node, uid, reason, message = key
    return {
        # "<node>-" and a server-made suffix: a generateName must itself be a DNS subdomain but
        # for a trailing "-" (a trailing "." is refused with 422 by the API server).
        "metadata": {"generateName": f"{node}-", "namespace": NAMESPACE},
        "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": node, **({"uid": uid} if uid else {})},
        "reason": reason,
        "message": message,
        "type": kind,
        "source": {"component": COMPONENT},
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }
