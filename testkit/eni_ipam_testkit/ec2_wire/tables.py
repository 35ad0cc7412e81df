"""Listing the in-memory cloud's records as EC2's Describe calls do, cheaply: filters, order, pages,
and rendered items kept until their record changes.

The front end answers Describe calls from the :class:`~providers.sim.cloud.SimCloud`'s own records
instead of through its Describe operations, for two reasons the benchmark forces:

* EC2 pages by the request's ``MaxResults`` (5 to 1000), the cloud by its fixed ``page_size``;
* the cloud sorts every id of a table on every page, which costs ~150 ms per page at 400,000
  interfaces. Here a :class:`SortedKeys` index is kept up to date at O(1) per request when nothing
  changed, so a page costs its own items only.

:class:`Tables` is the one place the test kit reads the cloud's private tables (``_vpcs``,
``_subnets``, ``_groups``, ``_instances``, ``_interfaces`` of
:class:`~providers.sim.state.CloudState`); it only reads them. The filter semantics are the cloud's
(:mod:`providers.sim.describe`): the same filter names per operation, ``tag:<key>`` and ``tag-key``
everywhere, ``*`` / ``?`` wildcards, a record whose value is empty never matching, and an unknown
filter name answering ``InvalidParameterValue``; tests compare both listings.

Order and tokens: items come in id order and a page's token is its last id, so a listing stays
consistent while the cloud changes between pages (nothing is listed twice; what appears meanwhile
may or may not be listed), as on EC2.

Rendered items (:class:`Fragments`), kept per record until the record changes, are what make a
1,000-item page cheap.

A DescribeNetworkInterfaces item costs ~12 µs to render and a DescribeInstances one ~65 µs; a
1,000-item page would cost 12 to 65 ms, every page of every resync. Each rendered item is kept with
a *marker*, the tuple of every record field it was rendered from, and reused while a fresh marker
equals the kept one.

Why the marker is cheap and right: the in-memory cloud never changes a record's lists or tags in
place. Every change assigns a new object (``iface.addresses = …`` in
:mod:`providers.sim.state`) or a new scalar, so the kept marker holds the old objects, and tuple
equality takes the identity shortcut for every field that did not change: comparing a marker costs
a dozen pointer comparisons. A field that was reassigned with equal content compares equal by value
and the item is reused, which is right too. Holding the old objects keeps them alive, so their
identity can never be reused by a new object. (A future in-place change in the cloud would be
missed; tests/testkit/test_ec2_wire.py changes every field through the API and checks the answers.)

A reservation's marker is its instance's state, type and tags plus the markers of its attached
interfaces, so assigning an address to any of them renders the reservation again.

Memory: one rendered item per interface (~2.8 KB with 10 addresses) and per instance (~13.8 KB
with four such interfaces): about 2.7 GB for 100,000 instances (measured), in the server's process,
not the measured one (``cache=False`` renders every item every time instead). Entries of deleted records are
dropped once the cache outgrows its table by a quarter.
"""

from __future__ import annotations

import bisect
import fnmatch
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Generic, TypeVar

from eni_ipam.core import model
from eni_ipam_testkit.ec2_wire.render import Renderer
from providers.sim.cloud import SimCloud
from providers.sim.records import InstanceRecord, InterfaceRecord, SimError, SubnetRecord, Vpc

R = TypeVar("R")

Getter = Callable[[R], str]
_WILDCARDS = frozenset("*?[")

INTERFACE_FILTERS: dict[str, Getter[InterfaceRecord]] = {
    "network-interface-id": lambda r: r.id,
    "attachment.instance-id": lambda r: r.instance_id,
    "attachment.attachment-id": lambda r: r.attachment_id,
    "status": lambda r: r.status,
    "subnet-id": lambda r: r.subnet_id,
    "vpc-id": lambda r: r.vpc_id,
    "availability-zone": lambda r: r.zone,
}
INSTANCE_FILTERS: dict[str, Getter[InstanceRecord]] = {
    "instance-id": lambda r: r.id,
    "instance-state-name": lambda r: r.state,
    "instance-type": lambda r: r.type,
    "vpc-id": lambda r: r.vpc_id,
    "subnet-id": lambda r: r.subnet_id,
    "availability-zone": lambda r: r.zone,
}
SUBNET_FILTERS: dict[str, Getter[SubnetRecord]] = {
    "subnet-id": lambda r: r.id,
    "vpc-id": lambda r: r.vpc_id,
    "availability-zone": lambda r: r.zone,
}
GROUP_FILTERS: dict[str, Getter[model.SecurityGroup]] = {
    "group-id": lambda r: r.id,
    "vpc-id": lambda r: r.vpc_id,
}
VPC_FILTERS: dict[str, Getter[Vpc]] = {"vpc-id": lambda r: r.id, "cidr": lambda r: r.cidr}


class SortedKeys:
    """The keys of a dict in sorted order, kept up to date cheaply.

    It relies on how dicts keep order (a new key is appended at the end) and on the cloud never
    reusing an id (a key removed from a table never comes back). Then the last key changes whenever
    a key is added and the length whenever keys are only removed: checking both is O(1). The keys
    added since the last look are the ones after the last key seen (or, when that one was removed,
    after the newest key already indexed), found by walking back from the end. Removed keys stay in
    the index and are skipped when read (:meth:`after`), until they are a quarter of it.
    """

    def __init__(self) -> None:
        self._keys: list[str] = []
        self._length = -1
        self._last: str | None = None

    def after(self, table: dict[str, Any], token: str | None) -> Iterator[str]:
        """The keys of ``table`` greater than ``token`` (all of them for ``None``), in order."""
        self.refresh(table)
        keys = self._keys
        start = 0 if token is None else bisect.bisect_right(keys, token)
        # By position, not by a slice: a slice would copy the rest of a 400,000-key index per page.
        return (keys[n] for n in range(start, len(keys)) if keys[n] in table)

    def _indexed(self, key: str) -> bool:
        at = bisect.bisect_left(self._keys, key)
        return at < len(self._keys) and self._keys[at] == key

    def refresh(self, table: dict[str, Any]) -> None:
        """Bring the index up to date with ``table`` (O(1) when nothing changed)."""
        last = next(reversed(table.keys()), None)
        if len(table) == self._length and last == self._last:
            return
        boundary = self._last if self._last in table else None
        added: list[str] = []
        for key in reversed(table.keys()):
            if key == boundary or (boundary is None and self._indexed(key)):
                break
            added.append(key)
        added.sort()
        if not self._keys or not added or added[0] > self._keys[-1]:
            self._keys.extend(added)
        else:
            for key in added:
                bisect.insort(self._keys, key)
        if len(self._keys) - len(table) > max(len(table) // 4, 64):
            self._keys = [k for k in self._keys if k in table]
        self._length, self._last = len(table), last


def _matcher(patterns: Sequence[str]) -> Callable[[str], bool]:
    exact = {p for p in patterns if _WILDCARDS.isdisjoint(p)}
    wild = [p for p in patterns if not _WILDCARDS.isdisjoint(p)]
    if not wild:
        return exact.__contains__
    return lambda value: value in exact or any(fnmatch.fnmatchcase(value, p) for p in wild)


def compile_filters(
    filters: Mapping[str, Sequence[str]],
    getters: Mapping[str, Getter[R]],
    tags: Callable[[R], Mapping[str, str]],
) -> Callable[[R], bool]:
    """A predicate accepting the records every filter accepts (a filter: any of its values).

    Raises:
        SimError: ``InvalidParameterValue`` for a filter name the operation does not support.
    """
    tests = [_test(name, _matcher(values), getters, tags) for name, values in filters.items()]
    return lambda record: all(test(record) for test in tests)


def _test(
    name: str,
    like: Callable[[str], bool],
    getters: Mapping[str, Getter[R]],
    tags: Callable[[R], Mapping[str, str]],
) -> Callable[[R], bool]:
    if name.startswith("tag:"):
        key = name[4:]
        return lambda r: key in tags(r) and like(tags(r)[key])
    if name == "tag-key":
        return lambda r: any(like(k) for k in tags(r))
    get = getters.get(name)
    if get is None:
        raise SimError("InvalidParameterValue", f"The filter '{name}' is invalid")
    # A record without the value (a detached interface's instance id) matches no value at all.
    return lambda r: bool(get(r)) and like(get(r))


def take_page(
    keys: Iterable[str], table: Mapping[str, R], keep: Callable[[R], bool], limit: int | None
) -> tuple[list[R], str | None]:
    """Up to ``limit`` records of ``keys`` that ``keep`` accepts, and the token of the next page
    (``None`` when no accepted record is left, as the in-memory cloud answers)."""
    chosen: list[R] = []
    last = ""
    for key in keys:
        record = table.get(key)
        if record is None or not keep(record):
            continue
        if limit is not None and len(chosen) == limit:
            return chosen, last
        chosen.append(record)
        last = key
    return chosen, None


def known(ids: Sequence[str], table: Mapping[str, object], code: str, noun: str) -> list[str]:
    """``ids`` deduplicated in id order, every one of them present.

    Raises:
        SimError: ``code`` naming the first unknown id, worded as EC2 words it.
    """
    for id in ids:
        if id not in table:
            raise SimError(code, f"The {noun} '{id}' does not exist")
    return sorted(set(ids))


class Table(Generic[R]):
    """One of the cloud's tables with its sorted index."""

    def __init__(self, read: Callable[[], dict[str, R]]) -> None:
        self._read = read
        self.index = SortedKeys()

    @property
    def rows(self) -> dict[str, R]:
        return self._read()

    def after(self, token: str | None) -> Iterator[str]:
        return self.index.after(self._read(), token)

    def refresh(self) -> None:
        self.index.refresh(self._read())


class Tables:
    """Read-only access to a :class:`SimCloud`'s records (the only reader of its private tables)."""

    def __init__(self, cloud: SimCloud) -> None:
        self.cloud = cloud
        self.vpcs: Table[Vpc] = Table(lambda: cloud._vpcs)
        self.subnets: Table[SubnetRecord] = Table(lambda: cloud._subnets)
        self.groups: Table[model.SecurityGroup] = Table(lambda: cloud._groups)
        self.instances: Table[InstanceRecord] = Table(lambda: cloud._instances)
        self.interfaces: Table[InterfaceRecord] = Table(lambda: cloud._interfaces)

    def refresh(self) -> None:
        """Bring every index up to date (the first listing of a big table then pays nothing)."""
        for table in (self.vpcs, self.subnets, self.groups, self.instances, self.interfaces):
            table.refresh()

    def interfaces_of(self, instance_ids: Iterable[str]) -> list[str]:
        """Ids of the interfaces attached to these instances (unknown instances have none), sorted:
        the candidates of a listing filtered by exact ``attachment.instance-id`` values."""
        instances = self.instances.rows
        return sorted({i for o in instance_ids if o in instances for i in instances[o].interface_ids()})

    def exact_values(self, filters: Mapping[str, Sequence[str]], name: str) -> Sequence[str] | None:
        """The values of filter ``name`` when all are exact (no wildcard), else ``None``."""
        values = filters.get(name)
        if values is None or any(not _WILDCARDS.isdisjoint(v) for v in values):
            return None
        return values


Marker = tuple[Any, ...]


def interface_marker(iface: InterfaceRecord) -> Marker:
    """Every field an interface's items are rendered from (its id is the cache key)."""
    return (
        iface.primary_ip,
        iface.addresses,
        iface.prefixes,
        iface.ipv6_prefixes,
        iface.instance_id,
        iface.device_index,
        iface.network_card,
        iface.attachment_id,
        iface.delete_on_termination,
        iface.tags,
        iface.security_groups,
        iface.description,
        iface.subnet_id,
        iface.created_at,
        iface.kind,
    )


class Fragments:
    """Rendered DescribeNetworkInterfaces items and DescribeInstances reservations, by record id."""

    def __init__(
        self,
        renderer: Renderer,
        tables: Tables,
        instance_tags: Callable[[str], Mapping[str, str]],
        *,
        cache: bool = True,
    ) -> None:
        self.renderer = renderer
        self.cache = cache
        """Keep rendered items; ``False`` renders every item every time (no memory held)."""
        self.tables = tables
        self._instance_tags = instance_tags
        self._interfaces: dict[str, tuple[Marker, bytes]] = {}
        self._reservations: dict[str, tuple[Marker, bytes]] = {}
        self.hits = 0
        """Items served from the cache (for tests and measurements)."""
        self.misses = 0
        """Items rendered."""

    def interface(self, iface: InterfaceRecord) -> bytes:
        marker = interface_marker(iface)
        kept = self._interfaces.get(iface.id)
        if kept is not None and kept[0] == marker:
            self.hits += 1
            return kept[1]
        self.misses += 1
        body = self.renderer.interface(iface)
        if self.cache:
            self._interfaces[iface.id] = (marker, body)
        return body

    def attached(self, instance: InstanceRecord) -> list[InterfaceRecord]:
        """The instance's attached interfaces, card 0 first, each card in device-index order."""
        rows = self.tables.interfaces.rows
        return [rows[i] for i in instance.interface_ids() if i in rows]

    def reservation(self, instance: InstanceRecord) -> bytes:
        interfaces = self.attached(instance)
        tags = self._instance_tags(instance.id)
        marker = (instance.state, instance.type, tags, *(interface_marker(i) for i in interfaces))
        kept = self._reservations.get(instance.id)
        if kept is not None and kept[0] == marker:
            self.hits += 1
            return kept[1]
        self.misses += 1
        body = self.renderer.reservation(instance, interfaces, tags)
        if self.cache:
            self._reservations[instance.id] = (marker, body)
        return body

    def prune(self) -> None:
        """Drop the items of records that no longer exist, once they are a quarter of a cache."""
        for cache, table in (
            (self._interfaces, self.tables.interfaces.rows),
            (self._reservations, self.tables.instances.rows),
        ):
            if len(cache) > len(table) + max(len(table) // 4, 256):
                for key in [k for k in cache if k not in table]:
                    del cache[key]

    def clear(self) -> None:
        """Forget every rendered item (the next pages render cold: for measurements)."""
        self._interfaces.clear()
        self._reservations.clear()

    def __len__(self) -> int:
        return len(self._interfaces) + len(self._reservations)
