"""One instance, one pool: which of the ENIPools naming a cloud instance holds its addresses.

Role: two Nodes may name one instance (a Node registered again under another name while the old one
lingers, a pool copied by hand, a provider id typed by hand). Two pools filling one instance would
hand out the same addresses twice, so only one of them, the *holder*, goes to the manager: the
oldest pool naming the instance (by ``metadata.creationTimestamp``, then by name, so every replica
picks the same one). The others get no addresses and a status saying why (:func:`duplicate_status`).

:class:`InstanceIndex` keeps the pools by the instance their spec names, as the ENIPool informer
sees them. :mod:`~eni_ipam.kube.delivery` asks it for the holder before every delivery, and when a
pool stops naming an instance, or leaves, hands the instance's other pools to the manager again:
one of them may hold it now.

Invariants:

* A pool is indexed under at most one instance, the one its latest event names; a pool being
  deleted, or gone, names none.
* Only a pool the source maintains (``maintained``: its Node is here, selected and of the configured
  cloud, the pool is that Node's and not being deleted) can hold an instance; a pool that is not
  maintained never keeps another from holding it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from eni_ipam.core.model import NodeStatus
from eni_ipam.kube.informer import Informer
from eni_ipam.kube.projection import PoolInfo


class InstanceIndex:
    def __init__(self, pools: Informer[PoolInfo], *, maintained: Callable[[str, PoolInfo], bool]) -> None:
        """``pools``: the ENIPool informer; ``maintained``: whether a pool of that name is one
        the source maintains (its checks may log, once, a Node of another cloud)."""
        self._pools = pools
        self._maintained = maintained
        self._pool_instance: dict[str, str] = {}
        self._instance_pools: dict[str, str | set[str]] = {}
        """The pools naming each instance: its one pool's name (nearly always), or a set of them (a
        set a node cost 26 MB at 100,000 nodes)."""

    def index(self, name: str, obj: PoolInfo | None) -> str:
        """Keep the index current (``obj`` None: the pool is going). Returns the instance the pool
        stopped naming, or ``""``: another pool may hold that instance now."""
        old = self._pool_instance.pop(name, None)
        if old is not None:
            held = self._instance_pools.get(old)
            if held == name:
                del self._instance_pools[old]
            elif isinstance(held, set):
                held.discard(name)
                if len(held) == 1:
                    self._instance_pools[old] = next(iter(held))
        instance = obj.instance_id if obj is not None else None
        if isinstance(instance, str) and instance:
            self._pool_instance[name] = instance
            held = self._instance_pools.get(instance)
            if held is None:
                self._instance_pools[instance] = name
            elif isinstance(held, set):
                held.add(name)
            elif held != name:
                self._instance_pools[instance] = {held, name}
        return old if old is not None and old != instance else ""

    def _pools_of(self, instance: str) -> Collection[str]:
        held = self._instance_pools.get(instance)
        return () if held is None else (held,) if isinstance(held, str) else held

    def instance(self, name: str) -> str:
        """The instance pool ``name`` names, as indexed (``""``: none)."""
        return self._pool_instance.get(name, "")

    def rivals(self, instance: str, *, but: str) -> list[str]:
        """The other pools naming ``instance``, by name."""
        return sorted(other for other in self._pools_of(instance) if other != but)

    def holder(self, name: str, obj: PoolInfo) -> str:
        """The pool that holds ``obj``'s instance: the oldest maintained pool naming it (then by name);
        ``name`` itself when no pool is maintained."""
        instance = obj.instance_id
        rivals = set(self._pools_of(instance)) if isinstance(instance, str) else set()
        candidates = []
        for other in rivals | {name}:
            pool = obj if other == name else self._pools.store.get(other)
            if pool is not None and self._maintained(other, pool):
                candidates.append((pool.created, other))
        return min(candidates)[1] if candidates else name


def duplicate_status(instance: object, holder: str) -> NodeStatus:
    """The status of a pool that names ``holder``'s instance: no addresses, and why."""
    message = (
        f"instance {instance} is node {holder}'s already: its pool holds the addresses, and this "
        "pool gets none (two nodes on one instance would hand out the same addresses)"
    )
    return NodeStatus(problem="DuplicateInstance", message=message)
