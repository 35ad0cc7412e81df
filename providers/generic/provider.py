"""The generic provider: pools carved from static cluster CIDRs, with no cloud API at all.

For clusters without a cloud API (bare metal, on-premises, other clouds). It keeps the Kubernetes
node-IPAM range allocator's semantics (:mod:`providers.generic.blocks`) and maps them onto the
provider contract:

* **Instance = node.** Every node of the node store is an instance (type :data:`INSTANCE_TYPE`)
  with one virtual interface at device index 0 and no address of its own. Nothing can be attached,
  so its limits say ``hot_attach=False``. The interface is no device: no MAC address, network card 0.
* **Subnet = cluster CIDR.** A node's interface draws from one IPv4 cluster CIDR: the first of its
  spec's ``subnet_ids`` with a free block, else the first CIDR with one, chosen when the node first
  appears. ``available`` counts the CIDR's addresses in no pool.
* **Blocks, then /28 prefixes.** The node reserves blocks of ``node_mask_ipv4`` bits (its range
  allocator ``podCIDR``); its pool holds /28 prefixes cut from them, so the watermarks grow and
  shrink it 16 addresses at a time (prefixes only: ``addresses=False``). A new block is reserved
  only when the node's blocks have no free /28 left; a block other than the node's first goes back
  to the CIDR when its last /28 is released, and every block goes back when the node leaves the
  store. Each IPv6 cluster CIDR gives a node one block when it first appears, published on its
  interface as ``ipv6_prefixes``.

Durability: the provider's memory is only a cache of the node store's records
(:mod:`eni_ipam.core.records`): what the pools' statuses publish. At the first resync, and again
whenever the records' ``term`` changes (a new leadership term), everything is rebuilt from them, so
a restart or a new leader never hands out a block a published pool holds (allocate-or-occupy).
Between two rebuilds the cache is authoritative: it holds what was assigned but not yet published.

Every call goes through :class:`~eni_ipam.core.caller.ApiCaller` like a cloud call, for the metrics; there
is no rate limit to respect. Calls are synchronous inside, so no two interleave.
"""

from __future__ import annotations

import collections
import dataclasses
import ipaddress
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

import structlog

from eni_ipam.core import errors
from eni_ipam.core.caller import ApiCaller
from eni_ipam.core.clock import Clock
from eni_ipam.core.model import (
    PREFIX_SIZE,
    CloudSnapshot,
    CreateInterface,
    Instance,
    InstanceLimits,
    Interface,
    Subnet,
    address_key,
)
from eni_ipam.core.observe import ApiObserver
from eni_ipam.core.provider import RefusesReadyInterfaces
from eni_ipam.core.ratelimit import Bucket, RateLimiter
from eni_ipam.core.records import NodeRecord, NodeRecords
from providers.generic.blocks import BlockSet, Network
from providers.generic.settings import PREFIX_MASK, GenericSettings

log = structlog.get_logger("eni_ipam.generic")

INSTANCE_TYPE = "generic"
"""The type of every generic instance (limits come from the settings, not from hardware)."""
VPC = "generic"
INTERFACE_PREFIX = "vif-"
"""A node's virtual interface is ``vif-<instance id>``."""
UNLIMITED = Bucket(1e9, 1e9)

T = TypeVar("T")


@dataclasses.dataclass
class _Node:
    name: str
    instance_id: str
    cidr: int
    """Index of the IPv4 block set the node's interface draws from."""
    blocks: list[ipaddress.IPv4Network] = dataclasses.field(default_factory=list)
    """Reserved IPv4 blocks; the first is kept for the node's life."""
    prefixes: set[ipaddress.IPv4Network] = dataclasses.field(default_factory=set)
    foreign: list[tuple[int, ipaddress.IPv4Network]] = dataclasses.field(default_factory=list)
    """Blocks of another cluster CIDR its record held (after a configuration change): kept for the
    node, never grown, released when it goes."""
    ipv6: list[Network] = dataclasses.field(default_factory=list)


class GenericProvider(RefusesReadyInterfaces):
    name = "generic"
    reads_node_store = True
    """Its view is built from the node store's records: a listing is only valid once the store was
    read in full for the current term (see :data:`eni_ipam.core.provider.READS_NODE_STORE`)."""

    ready_interfaces_refused = (
        "the generic provider carves per-node blocks and has no interfaces to make ahead of a node or "
        "to attach"
    )

    def __init__(
        self,
        settings: GenericSettings,
        *,
        records: NodeRecords,
        clock: Clock,
        metrics: ApiObserver,
    ) -> None:
        self.settings = settings
        self._records = records
        self._term: int | None = None
        self._caller = ApiCaller(
            limiter=RateLimiter({}, default=UNLIMITED, clock=clock),
            metrics=metrics,
            clock=clock,
            translate=lambda exc, op: None,
        )
        self.limits = InstanceLimits(
            adapters=1,
            ipv4_per_interface=settings.slots_per_node + 1,
            hot_attach=False,
            addresses=False,
            prefixes=True,
        )
        self.calls: collections.Counter[str] = collections.Counter()
        """Calls by operation (the simulator's ``api_calls``)."""
        self._reset()

    # -- state ----------------------------------------------------------------------------------

    def _reset(self) -> None:
        s = self.settings
        self._v4 = [BlockSet(c, s.node_mask_ipv4) for c in s.ipv4]
        self._v6 = [BlockSet(c, s.node_mask_ipv6) for c in s.ipv6]
        for blocks in (*self._v4, *self._v6):
            for excluded in s.service_cidrs:
                blocks.occupy(excluded)
        self._nodes: dict[str, _Node] = {}
        self._holder: dict[Network, str] = {}
        """Who holds each reserved block: an instance id, or ``""`` while nobody may take it (a node
        that left, a duplicate record) until no record lists it any more."""
        self._released: dict[ipaddress.IPv4Network, str] = {}
        """Prefixes released this term, by the instance that held them: never handed out again until
        no record lists them (the releasing node's status may still, and a lost write keeps it so)."""
        self._reported: set[tuple[str, str]] = set()
        """(event, subject) already logged this term: a conflict is logged once, not at every resync."""

    def _report(self, event: str, subject: str, **fields: object) -> None:
        if (event, subject) not in self._reported:
            self._reported.add((event, subject))
            log.error(event, **fields)

    async def _call(self, operation: str, body: Callable[[], T]) -> T:
        async def run() -> T:
            self.calls[operation] += 1
            return body()

        return await self._caller.call(operation, run)

    def _refresh(self) -> None:
        """Bring the node set in step with the store's records (rebuilding on a new term).

        Every block a record lists is occupied before anything is allocated, on every refresh, not
        only at the start of a term: a record that arrives late (an informer behind the previous
        leader's writes) still claims its blocks before they can go to anyone else.
        """
        records = self._records.node_records()
        if records is None:
            raise errors.TransientError(
                "the node store has not been read in full yet", code="NodeStoreNotSynced", operation="Resync"
            )
        if self._records.term != self._term:
            self._reset()
            self._term = self._records.term
            log.info("generic_state_rebuilt", nodes=len(records), term=self._term)
        roster: dict[str, NodeRecord] = {}
        duplicates: list[NodeRecord] = []
        for record in sorted(records, key=lambda r: r.name):
            if not record.instance_id:
                continue
            if record.instance_id in roster:
                duplicates.append(record)
            else:
                roster[record.instance_id] = record
        for instance_id in [i for i in self._nodes if i not in roster]:
            self._forget(self._nodes.pop(instance_id))
        listed: set[Network] = set()
        for record in roster.values():
            listed |= self._occupy(record, self._nodes.get(record.instance_id) or self._new_node(record))
        for record in duplicates:
            self._report("duplicate_instance", record.name, node=record.name, instance=record.instance_id)
            listed |= self._occupy(record, None)
        for node in self._nodes.values():
            self._complete(node, roster[node.instance_id])
        self._settle_releases(listed)

    def _new_node(self, record: NodeRecord) -> _Node:
        node = _Node(name=record.name, instance_id=record.instance_id, cidr=-1)
        self._nodes[record.instance_id] = node
        return node

    def _occupy(self, record: NodeRecord, node: _Node | None) -> set[Network]:
        """Occupy every block ``record`` lists for ``node`` (``None``: for nobody); the blocks listed."""
        holder = node.instance_id if node is not None else ""
        listed: set[Network] = set()
        for text in record.prefixes:
            found = self._v4_prefix(text)
            if found is None:
                self._report("prefix_ignored", f"{record.name}:{text}", node=record.name, prefix=text)
                continue
            index, prefix = found
            block = prefix.supernet(new_prefix=self._v4[index].mask)
            listed.add(block)
            if not self._take(block, self._v4[index], holder, record.name):
                continue
            if node is None or self._released.get(prefix) == holder:
                continue  # a duplicate's, or one its node released (its status is behind)
            if node.cidr < 0:
                node.cidr = index
            mine = node.blocks if index == node.cidr else [b for _, b in node.foreign]
            if block not in mine:
                if index == node.cidr:
                    node.blocks.append(block)
                else:
                    node.foreign.append((index, block))
            node.prefixes.add(prefix)
        for text in record.ipv6_prefixes:
            found6 = self._v6_block(text)
            if found6 is None:
                self._report("prefix_ignored", f"{record.name}:{text}", node=record.name, prefix=text)
                continue
            blocks6, block6 = found6
            listed.add(block6)
            if (
                self._take(block6, blocks6, holder, record.name)
                and node is not None
                and block6 not in node.ipv6
            ):
                node.ipv6.append(block6)
        return listed

    def _take(self, block: Network, blocks: BlockSet, holder: str, name: str) -> bool:
        """Reserve ``block`` for ``holder``; False when someone else has it (a conflict, logged)."""
        current = self._holder.get(block)
        if current is None and not blocks.taken(block):
            blocks.occupy(block)
            self._holder[block] = holder
            return True
        if current == holder and holder:
            return True
        # Two records claim one block (or one inside the service CIDR): it stays where it is.
        self._report("block_conflict", f"{name}:{block}", node=name, block=str(block))
        return False

    def _complete(self, node: _Node, record: NodeRecord) -> None:
        """After every listed block is occupied: a CIDR for a new node, and its IPv6 blocks."""
        if node.cidr < 0:
            node.cidr = self._choose_cidr(record)
        for blocks in self._v6:
            if not any(blocks.contains(b) for b in node.ipv6):
                fresh = blocks.allocate()
                if fresh is None:
                    self._report("ipv6_cidr_exhausted", f"{node.name}:{blocks.cidr}", node=node.name)
                else:
                    self._holder[fresh] = node.instance_id
                    node.ipv6.append(fresh)

    def _settle_releases(self, listed: set[Network]) -> None:
        """Give back what nobody holds and no record lists any more."""
        for prefix in [p for p in self._released if p.supernet(new_prefix=self._mask_of(p)) not in listed]:
            del self._released[prefix]
        for block, holder in list(self._holder.items()):
            if holder == "" and block not in listed:
                self._release(block)
        for node in self._nodes.values():
            spare = [b for b in node.blocks[1:] if not self._in_use(node, b)]
            spare += [b for _, b in node.foreign if not self._in_use(node, b)]
            for block in spare:
                if block in node.blocks:
                    node.blocks.remove(block)
                node.foreign = [(i, b) for i, b in node.foreign if b != block]
                self._release(block)
                log.info("block_released", node=node.name, block=str(block))

    def _in_use(self, node: _Node, block: Network) -> bool:
        """Whether the node holds a prefix of ``block``, or one of its prefixes waits out a release."""
        return any(p.overlaps(block) for p in (*node.prefixes, *self._released))

    def _release(self, block: Network) -> None:
        self._holder.pop(block, None)
        for blocks in (*self._v4, *self._v6):
            if blocks.contains(block) and block.prefixlen == blocks.mask:
                blocks.release(block)

    def _mask_of(self, prefix: ipaddress.IPv4Network) -> int:
        index = self._v4_index(prefix)
        return int(self._v4[index].mask) if index is not None else prefix.prefixlen

    def _choose_cidr(self, record: NodeRecord) -> int:
        """The first CIDR the spec names with a free block, else the first with one, else the first."""
        named = [i for i, b in enumerate(self._v4) if str(b.cidr) in record.subnet_ids]
        candidates: list[int] = [*named, *range(len(self._v4))]
        for index in candidates:
            if self._v4[index].free:
                return index
        return named[0] if named else 0

    def _forget(self, node: _Node) -> None:
        """A node left the store: its blocks wait, held by nobody, until no record lists them."""
        for block in (*node.blocks, *(b for _, b in node.foreign), *node.ipv6):
            self._holder[block] = ""
        for prefix in [p for p, holder in self._released.items() if holder == node.instance_id]:
            del self._released[prefix]
        log.info("node_blocks_released", node=node.name, blocks=len(node.blocks) + len(node.ipv6))

    def _v4_index(self, network: Network) -> int | None:
        return next((n for n, b in enumerate(self._v4) if b.contains(network)), None)

    def _v4_prefix(self, text: str) -> tuple[int, ipaddress.IPv4Network] | None:
        """A published /28 inside a cluster CIDR, or None for anything else."""
        try:
            prefix = ipaddress.IPv4Network(text, strict=True)
        except (ValueError, TypeError):
            return None
        index = self._v4_index(prefix)
        if prefix.prefixlen != PREFIX_MASK or index is None:
            return None
        return index, prefix

    def _v6_block(self, text: str) -> tuple[BlockSet, Network] | None:
        """A published IPv6 block of the node mask inside an IPv6 cluster CIDR, or None."""
        try:
            block = ipaddress.IPv6Network(text, strict=True)
        except (ValueError, TypeError):
            return None
        for blocks in self._v6:
            if blocks.contains(block) and block.prefixlen == blocks.mask:
                return blocks, block
        return None

    # -- views ----------------------------------------------------------------------------------

    def _interface(self, node: _Node) -> Interface:
        return Interface(
            id=INTERFACE_PREFIX + node.instance_id,
            device_index=0,
            subnet_id=str(self._v4[node.cidr].cidr),
            primary_ip="",
            prefixes=tuple(str(p) for p in sorted(node.prefixes, key=lambda p: int(p.network_address))),
            ipv6_prefixes=tuple(str(b) for b in node.ipv6),
            instance_id=node.instance_id,
            delete_on_termination=True,
            # No device: the blocks are the node's (as a podCIDR is), not a cloud interface's, so
            # there is no MAC address to find (link 0: none, network card 0).
        )

    def _instance(self, node: _Node) -> Instance:
        iface = self._interface(node)
        return Instance(
            id=node.instance_id,
            type=INSTANCE_TYPE,
            vpc_id=VPC,
            zone="",
            subnet_id=iface.subnet_id,
            interfaces=(iface,),
        )

    def instance_view(self, instance_id: str) -> Instance | None:
        """The node as the provider holds it now, without a call (for the simulator's state)."""
        node = self._nodes.get(instance_id)
        return None if node is None else self._instance(node)

    def _subnets(self) -> dict[str, Subnet]:
        in_pools = collections.Counter[int]()
        for node in self._nodes.values():
            if node.cidr < 0:
                continue
            size = self._v4[node.cidr].block_size
            for block in node.blocks:
                taken = sum(1 for p in (*node.prefixes, *self._released) if p.subnet_of(block))
                in_pools[node.cidr] += size - PREFIX_SIZE * taken
        return {
            str(blocks.cidr): Subnet(
                id=str(blocks.cidr),
                vpc_id=VPC,
                zone="",
                cidr=str(blocks.cidr),
                available=blocks.free * blocks.block_size + max(in_pools[index], 0),
            )
            for index, blocks in enumerate(self._v4)
        }

    def _node_of(self, interface_id: str, operation: str) -> _Node:
        node = self._nodes.get(interface_id.removeprefix(INTERFACE_PREFIX))
        if node is None or not interface_id.startswith(INTERFACE_PREFIX):
            raise errors.NotFound(
                f"no interface {interface_id}", code="InterfaceNotFound", operation=operation
            )
        return node

    # -- Provider -------------------------------------------------------------------------------

    async def resync(self) -> CloudSnapshot:
        def body() -> CloudSnapshot:
            self._refresh()
            return CloudSnapshot(
                subnets=self._subnets(),
                security_groups={},
                instances={i: self._instance(n) for i, n in self._nodes.items()},
                limits={INSTANCE_TYPE: self.limits},
            )

        return await self._call("Resync", body)

    async def describe_instance(self, *, instance_id: str) -> Instance | None:
        def body() -> Instance | None:
            self._refresh()
            node = self._nodes.get(instance_id)
            return None if node is None else self._instance(node)

        return await self._call("DescribeNode", body)

    async def instance_limits(self, *, instance_type: str) -> InstanceLimits:
        if instance_type != INSTANCE_TYPE:
            raise errors.LimitsUnknown(instance_type)
        return self.limits

    async def assign_addresses(
        self, *, interface_id: str, count: int, prefixes: bool = False, addresses: Sequence[str] = ()
    ) -> list[str]:
        """``count`` /28 blocks of the node's range. Named ``addresses`` are refused
        (``InvalidRequest``, code ``ExplicitAddressesNotSupported``), nothing assigned: the generic
        provider hands out whole blocks only."""
        if addresses:
            raise errors.InvalidRequest(
                "the generic provider hands out /28 prefixes only: named addresses are not supported",
                code="ExplicitAddressesNotSupported",
                operation="AssignPrefixes",
            )
        return await self._call("AssignPrefixes", lambda: self._assign(interface_id, count, prefixes))

    def _assign(self, interface_id: str, count: int, prefixes: bool) -> list[str]:
        op = "AssignPrefixes"
        node = self._node_of(interface_id, op)
        if not prefixes:
            raise errors.InvalidRequest(
                "the generic provider hands out /28 prefixes only", code="AddressesUnsupported", operation=op
            )
        if count <= 0:
            return []
        room = self.settings.slots_per_node - len(node.prefixes)
        if count > room:
            raise errors.InterfaceLimitExceeded(
                f"{node.name} holds {len(node.prefixes)} of its {self.settings.slots_per_node} prefixes; "
                f"{count} more do not fit (max_blocks_per_node)",
                code="NodeBlockLimitExceeded",
                operation=op,
            )
        chosen = self._free_prefixes(node, count)
        blocks = self._v4[node.cidr]
        per_block = blocks.block_size // PREFIX_SIZE
        new_blocks = -(-(count - len(chosen)) // per_block)
        if new_blocks > blocks.free:
            raise errors.PrefixesExhausted(
                f"{blocks.cidr} has {blocks.free} free /{blocks.mask} blocks, {node.name} needs {new_blocks}",
                code="ClusterCidrExhausted",
                operation=op,
            )
        for _ in range(new_blocks):
            block = blocks.allocate()
            assert block is not None and isinstance(block, ipaddress.IPv4Network)  # free was checked
            self._holder[block] = node.instance_id
            node.blocks.append(block)
            chosen.extend(block.subnets(new_prefix=PREFIX_MASK))
        new = sorted(chosen[:count], key=lambda p: int(p.network_address))
        node.prefixes.update(new)
        log.info("prefixes_assigned", node=node.name, count=count, blocks=new_blocks)
        return [str(p) for p in new]

    def _free_prefixes(self, node: _Node, limit: int) -> list[ipaddress.IPv4Network]:
        out: list[ipaddress.IPv4Network] = []
        for block in sorted(node.blocks, key=lambda b: int(b.network_address)):
            for prefix in block.subnets(new_prefix=PREFIX_MASK):
                if prefix not in node.prefixes and prefix not in self._released:
                    out.append(prefix)
                    if len(out) == limit:
                        return out
        return out

    async def assign_ipv6_prefix(self, *, interface_id: str) -> str:
        """The generic provider's IPv6 blocks are its own (one per node and IPv6 ``cluster_cidrs``
        entry, docs/generic.md), not a pool spec's: no prefix is delegated on request.

        Raises:
            errors.InvalidRequest: always (``Ipv6PrefixesNotSupported``).
        """
        raise errors.InvalidRequest(
            "the generic provider hands out IPv6 blocks from its own configuration, not on request",
            code="Ipv6PrefixesNotSupported",
            operation="assign-ipv6-prefix",
        )

    async def unassign_addresses(
        self, *, interface_id: str, addresses: Sequence[str] = (), prefixes: Sequence[str] = ()
    ) -> None:
        await self._call("UnassignPrefixes", lambda: self._unassign(interface_id, addresses, prefixes))

    def _unassign(self, interface_id: str, addresses: Sequence[str], prefixes: Sequence[str]) -> None:
        op = "UnassignPrefixes"
        node = self._node_of(interface_id, op)
        if addresses:
            raise errors.InvalidRequest(
                f"{sorted(addresses, key=address_key)[0]} is not assigned to {interface_id}",
                code="InvalidAddress.NotAssigned",
                operation=op,
            )
        gone = {found[1] for text in prefixes if (found := self._v4_prefix(text)) is not None}
        missing = sorted(
            p for p in prefixes if (found := self._v4_prefix(p)) is None or found[1] not in node.prefixes
        )
        if missing:
            raise errors.InvalidRequest(
                f"{missing[0]} is not assigned to {interface_id}",
                code="InvalidPrefix.NotAssigned",
                operation=op,
            )
        node.prefixes -= gone
        # The blocks go back only once no record lists the prefixes (the node's status may be behind).
        self._released.update(dict.fromkeys(gone, node.instance_id))

    async def create_interface(
        self,
        *,
        instance_id: str,
        request: CreateInterface,
        tags: Mapping[str, str],
        token: str,
        delete_on_termination: bool = True,
    ) -> Interface:
        raise errors.AttachmentLimitExceeded(
            "a generic node has one virtual interface; its pool grows by blocks, not interfaces",
            code="VirtualInterfaceOnly",
            operation="CreateInterface",
        )

    async def delete_interface(self, *, interface_id: str, detach: bool = True) -> None:
        def body() -> None:
            node = self._node_of(interface_id, "DeleteInterface")
            raise errors.InvalidRequest(
                f"{interface_id} is {node.name}'s virtual interface; it goes when the node goes",
                code="VirtualInterfaceOnly",
                operation="DeleteInterface",
            )

        await self._call("DeleteInterface", body)

    async def list_detached_interfaces(self, *, tags: Mapping[str, str]) -> list[Interface]:
        return []  # virtual interfaces are never detached
