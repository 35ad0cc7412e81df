"""Operator-wide settings (``settings:`` in the run configuration and in scenario files).

Frozen and validated (:class:`~eni_ipam.config.schema.ConfigModel`); every default is justified in its
field's docstring, which docs/settings.md repeats. Durations accept ``250ms``, ``30s``, ``5m``.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator

from eni_ipam.config.schema import (
    ConfigModel,
    Duration,
    FieldError,
    Name,
    NonNegativeInt,
    Number,
    PositiveDuration,
    PositiveInt,
)
from eni_ipam.core.fields import TagMap
from eni_ipam.core.model import EMPTY_TAGS


class Settings(ConfigModel):
    release_excess_ips: bool = False
    """Release addresses above the watermarks. Off by default, as in the reference systems: releasing
    costs API calls and risks churn, while holding a few spare addresses costs nothing."""

    excess_ip_release_delay: Duration = 180.0
    """Seconds an address must stay continuously excess before it is marked for release, so a node
    whose pods churn does not give back addresses it is about to need again."""

    prefix_delegation: bool = False
    """Allocate /28 prefixes (16 addresses a slot) on Nitro instances. Off by default because it
    needs subnets with free aligned /28 blocks, which fragmented subnets often lack."""

    prefix_placement: bool = True
    """Place /28 prefixes only in subnets whose counted free blocks (every interface of the VPC is
    listed at each resync: docs/aws.md, "Prefixes placed where they fit") can take them, instead of
    learning of a fragmented subnet from EC2's ``InsufficientCidrBlocks``. On by default: it only
    skips a subnet EC2 would refuse, and the count is an upper bound (interfaces the listing cannot
    see, another account's, make EC2 refuse still, and the fallback stays). Without a count (an
    instance-tag scope, Azure, the generic provider) nothing changes."""

    dense_placement: bool = False
    """Name the single addresses a node is assigned (``AssignPrivateIpAddresses`` with
    ``PrivateIpAddresses``) inside /28 blocks already broken, so whole blocks stay free for prefix
    nodes. Off by default: in a subnet shared with another account, an address held by an interface
    the listing cannot see is refused (one failed call, then EC2 chooses and the subnet is left to
    its choice for an hour), and explicit addresses are a choice a mixed cluster should make, not
    one every cluster pays a call for."""

    return_to_prefixes: bool = False
    """A node that fell back to single addresses returns to prefix delegation once none of its
    single addresses is in use and a subnet it may use has free /28 blocks again: its growth takes
    prefixes, and its single addresses leave through the release handshake (docs/aws.md, "Return to
    prefixes"). Off by default: it releases addresses (never one in use) even with
    ``release_excess_ips`` off, which a cluster should choose."""

    subnet_reserve: Annotated[Number, Field(ge=0.0, le=0.5)] = 0.0625
    """Share of each subnet's addresses (its CIDR's size) that allocations made only to reach a
    node's watermarks (``pre_allocate``, ``min_allocate``, ``max_above_watermark``) leave free, for
    the pods of every node sharing the subnet: a pod waiting for an address may take from it, a
    warm pool may not. A sixteenth (16 addresses of a /24, 32 of a /23) keeps one node's spec —
    ``minAllocate: 16384`` by mistake or by malice — from taking a shared subnet's last addresses
    while the other nodes' pods wait. 0 turns the reserve off (first come, first served)."""

    subnet_pressure_enabled: bool = False
    """Let a subnet under pressure take back its nodes' spare addresses (decision 0054): while a
    subnet's free addresses are down to ``subnet_pressure_enter`` of its CIDR, every node with an
    interface in it keeps only what its pods use or wait for (``pre_allocate`` becomes the pods
    waiting, ``min_allocate`` to what is used and waited for, ``max_above_watermark`` to nothing)
    and gives the rest back through the release handshake, even with ``release_excess_ips`` off,
    so that pods of other nodes in the subnet get them. Off by default: it releases addresses on
    clusters that chose not to release, and a node under pressure makes its pods wait for a cloud
    call instead of a warm address, a trade a cluster whose subnets run full should choose."""

    subnet_pressure_enter: Annotated[Number, Field(gt=0.0, le=0.5)] = 0.05
    """Share of a subnet's CIDR that, once its free addresses are down to it (12 of a /24, 25 of a
    /23), puts the subnet under pressure. Below the default ``subnet_reserve`` (a sixteenth), where
    warm pools stop: a subnet gets there only when pods (or the cloud's other users) have taken a
    fifth of the reserve, i.e. when pods of some node are about to wait. Must be below
    ``subnet_reserve`` while pressure is enabled, so that the warm pools that regrow when pressure
    ends (they stop at the reserve) never bring it back."""

    subnet_pressure_leave: Annotated[Number, Field(gt=0.0, le=0.5)] = 0.10
    """Share of a subnet's CIDR its free addresses must be at or above (26 of a /24) for
    ``subnet_pressure_hold`` before the subnet leaves pressure. Twice ``subnet_pressure_enter`` and
    above the reserve: a subnet leaves when it has room to spare, not when it is a few addresses
    past the line it entered at. Must be above ``subnet_pressure_enter``."""

    subnet_pressure_hold: Duration = 300.0
    """Seconds a subnet's free addresses must stay at ``subnet_pressure_leave`` or above before it
    leaves pressure: a subnet under pod churn stays under pressure throughout, rather than leaving
    with each pod that goes and entering with the next (the same five minutes a node keeps its
    ``subnet`` capacity reason). Judged at each change of the subnet's free count and at each full
    resync, so leaving takes up to one ``resync_interval`` longer."""

    parallel_workers: PositiveInt = 50
    """Nodes maintained at once. Bounds memory and concurrent cloud calls; the per-operation rate
    limiter, not this, is what protects the cloud's API budget."""

    resync_interval: PositiveDuration = 60.0
    """Seconds between full resyncs at least: the safety net that catches changes made outside
    eni-ipam (its own changes are read back at once, per instance). Longer when
    ``resync_cpu_share`` asks for it."""

    resync_cpu_share: Annotated[Number, Field(ge=0.0, le=1.0)] = 0.10
    """Most of one core full resyncs may take on average: after each resync the next waits at least
    its CPU cost divided by this share (a resync that cost 15 s of CPU at 100,000 nodes waits
    150 s), never less than ``resync_interval`` and never more than 15 minutes. 0 keeps
    ``resync_interval`` whatever a resync costs."""

    trigger_min_interval: Duration = 0.01
    """Minimum seconds between two maintenance passes of one node; events in between fold into one."""

    backoff_initial: PositiveDuration = 1.0
    """First retry delay of a node whose maintenance failed (doubles per failure, jittered)."""

    backoff_max: Duration = 300.0
    """Retry delay cap: a broken node is retried at least every five minutes."""

    cluster_name: Name = "default"
    """Written to every interface eni-ipam creates, so garbage collection only ever touches its own."""

    interface_tags: TagMap = EMPTY_TAGS
    """Extra tags for created interfaces (cost allocation, ownership). EC2 allows 50 tags per
    resource and eni-ipam adds 4 of its own, so at most 46."""

    rate_limit_share: float = 1.0
    """Fraction of each cloud API bucket this controller may spend (lower it when other controllers
    share the account)."""

    gc_interval: Duration = 300.0
    """Seconds between garbage-collection runs; an interface must stay detached a whole interval
    (marked in one run, deleted in the next) before it is deleted. 0 turns garbage collection off
    (for a second controller sharing the cluster tag, which must not collect twice)."""

    gc_max_per_run: NonNegativeInt = 25
    """Interfaces marked per garbage-collection run, to bound the DeleteNetworkInterface burst."""

    ready_interfaces_enabled: bool = False
    """Keep a central pool of ready interfaces: created, tagged and detached, with their addresses
    (or /28 prefixes) already assigned, one pool per (subnet, security groups) that nodes' first new
    interfaces use, so that such an interface costs a joining node one AttachNetworkInterface
    instead of create, attach and delete-on-termination (docs/aws.md, "Burst scale-up: ready
    interfaces"). Off by default: every ready interface holds subnet addresses and counts against
    the Region's interface quota while no node uses it, a cost only clusters that scale up in
    bursts should choose to pay."""

    ready_interfaces_per_subnet: PositiveInt = 8
    """Ready interfaces kept per (subnet, security groups). A joining node takes one, so this is the
    burst of nodes served by one call each; the rest are served as without the pool while the pool
    refills behind them. Eight cover a node group's usual step (a few nodes at a time) at the cost
    of eight interfaces and their addresses per subnet; raise it for larger bursts."""

    ready_interfaces_max: NonNegativeInt = 64
    """Ready interfaces kept at most, over every (subnet, security groups): bounds what the pool
    holds whatever the number of subnets, and so what it takes from the Region's interface quota.
    64 is eight subnets' worth of the per-subnet default, about 1 % of the default quota (5,000);
    at most ``region_interface_quota``."""

    region_interface_quota: PositiveInt = 5000
    """The account's Service Quotas quota "Network interfaces per Region" (``L-DF5E4CA3``; 5,000 is
    AWS's default). The pool refills only while the interfaces the controller knows of (every
    interface of the cluster's instances, and the ready ones) stay below it, so the pool never takes
    the account's last interfaces; a create the cloud refuses with the quota stops refills until the
    next round. Set it to the quota the account has."""

    node_series_all_up_to: NonNegativeInt = 1000
    """Clusters of up to this many nodes export every node's series (``eni_ipam_node_ips``,
    ``eni_ipam_node_at_capacity``), as small clusters always have; larger ones only the nodes that
    need attention (short of addresses, or unable to grow for a reason other than being full and
    needing nothing: the nodes the per-node alerts fire for). 1,000 nodes are 4,000 per-node series,
    0.34 MB a scrape: every node on the dashboard, cheaply. 100,000 were 400,000 series, 35 MB and
    seconds of rendering, for nodes no alert or person looks at."""

    node_series_max: NonNegativeInt = 2000
    """The most nodes with per-node series in a cluster larger than ``node_series_all_up_to``, those
    that cannot grow first, then the largest deficits. It bounds a scrape when every node is short at
    once (a mass scale-up): 2,000 nodes are at most 10,000 per-node series, under 1 MB, whatever the
    cluster's size. Twice ``node_series_all_up_to``, so a cluster that has just outgrown it still
    shows each node when all are short; more nodes in trouble at once is a cluster-wide event, which
    ``eni_ipam_nodes`` and ``eni_ipam_omitted_nodes`` count. At least ``node_series_all_up_to``."""

    @model_validator(mode="after")
    def _consistent(self) -> Settings:
        if not 0 < self.rate_limit_share <= 1:
            raise FieldError("rate_limit_share", f"must be in (0, 1], got {self.rate_limit_share}")
        if self.backoff_max < self.backoff_initial:
            raise FieldError("backoff_max", "must be at least backoff_initial")
        if self.node_series_max < self.node_series_all_up_to:
            raise FieldError(
                "node_series_max",
                f"must be at least node_series_all_up_to ({self.node_series_all_up_to}), "
                f"got {self.node_series_max}",
            )
        if self.subnet_pressure_enabled:
            if self.subnet_pressure_leave <= self.subnet_pressure_enter:
                raise FieldError(
                    "subnet_pressure_leave",
                    f"must be above subnet_pressure_enter ({self.subnet_pressure_enter}), "
                    f"got {self.subnet_pressure_leave}",
                )
            if self.subnet_pressure_enter >= self.subnet_reserve:
                raise FieldError(
                    "subnet_pressure_enter",
                    f"must be below subnet_reserve ({self.subnet_reserve}) while subnet pressure is "
                    "enabled: warm pools stop at the reserve, and above it their regrowth would put a "
                    f"subnet back under pressure as soon as it left, got {self.subnet_pressure_enter}",
                )
        if self.ready_interfaces_max > self.region_interface_quota:
            raise FieldError(
                "ready_interfaces_max",
                f"must be at most region_interface_quota ({self.region_interface_quota}), "
                f"got {self.ready_interfaces_max}",
            )
        if len(self.interface_tags) > MAX_EXTRA_TAGS:
            raise FieldError(
                "interface_tags",
                f"at most {MAX_EXTRA_TAGS} (EC2 allows 50 tags per interface and eni-ipam adds "
                f"{OWN_TAGS}), got {len(self.interface_tags)}",
            )
        return self


OWN_TAGS = 4
"""Tags eni-ipam puts on every interface it creates (cluster, managed-by, node, instance)."""
MAX_EXTRA_TAGS = 50 - OWN_TAGS
"""EC2's 50 tags per resource, less eni-ipam's own."""
