"""Every Azure operation the provider calls: its name, the token buckets it spends, its RBAC actions.

One table (:data:`OPERATIONS`) serves three purposes: the rate limiter (which buckets a request
spends from), the metrics (the ``operation`` label), and the role docs (docs/azure.md lists the
union of :attr:`Operation.actions`; a test checks that it covers the table, and another that every
operation the provider's source names is in the table).

Operation names are the SDK's ``<OperationGroup>.<Method>`` in the REST reference's spelling
(``NetworkInterfaces.CreateOrUpdate``). A long-running operation's status polls and its final read
are labelled ``<Operation>.Poll``: they are reads, and spend read tokens, not write tokens.

Client-side buckets model the limits Azure documents, so that our own buckets say "wait" before
Azure says 429. A request spends a token from *every* bucket its operation lists: ARM's
subscription-wide bucket of its kind, and the resource provider's own policy where that is tighter.

ARM (*Understand how Azure Resource Manager throttles requests*, learn.microsoft.com,
azure-resource-manager/management/request-limits-and-throttling; the regional token-bucket
algorithm in force since 2024), per subscription, per principal, per region:

=============  ======  ==============
operations     bucket  refill per sec
=============  ======  ==============
reads           250     25
writes          200     10
deletes         200     10
=============  ======  ==============

Microsoft.Network (same page, *Network throttling*): write/delete (PUT) 1,000 per 5 minutes, read
(GET) 10,000 per 5 minutes. A fixed window is modelled as a bucket whose burst plus five minutes of
refill equals the window: writes ``Bucket(100, 3)`` (100 + 3 × 300 = 1,000). Network reads
(33 per second) are looser than ARM's reads and need no bucket of their own.

Microsoft.Compute (*Compute throttling limits*, learn.microsoft.com,
virtual-machines/compute-throttling-limits), subscription level, per region, per minute:

==========================  ======================================  ==========  ========
policy                      REST APIs we call                       refill/min  capacity
==========================  ======================================  ==========  ========
High Cost Get VM            Virtual Machines - List                 300         900
High Cost Get VMSS          Virtual Machine Scale Sets - List       360         1,080
Update VMSS VMs             Virtual Machine Scale Set VMs - Update  500         1,500
Low Cost Get VM             Virtual Machines - Get                  8,000       24,000
Get VMSS VMs                Virtual Machine Scale Set VMs - Get     2,000       6,000
Get Operation               status of asynchronous operations       5,000       15,000
==========================  ======================================  ==========  ========

Only the first three are tighter than ARM's reads or writes, so only they get buckets. Compute also
limits *each* VM (Update VMSS VMs: 4 per minute, 12 at most, per scale-set VM); that per-resource
limit is not modelled (the manager never updates one instance concurrently, and a 429 from it is
honoured through ``Retry-After``).

``settings.rate_limit_share`` scales every bucket, and ``azure.rate_limits`` overrides any of them
by name.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from types import MappingProxyType

from eni_ipam.core.clock import Clock
from eni_ipam.core.ratelimit import Bucket, RateLimiter

ARM_READS = "arm-reads"
ARM_WRITES = "arm-writes"
ARM_DELETES = "arm-deletes"
NETWORK_WRITES = "network-writes"
COMPUTE_VM_LIST = "compute-vm-list"
COMPUTE_SCALE_SET_LIST = "compute-vmss-list"
COMPUTE_SCALE_SET_VM_UPDATE = "compute-vmss-vm-update"

BUCKETS: Mapping[str, Bucket] = MappingProxyType(
    {
        ARM_READS: Bucket(250, 25),
        ARM_WRITES: Bucket(200, 10),
        ARM_DELETES: Bucket(200, 10),
        NETWORK_WRITES: Bucket(100, 3),
        COMPUTE_VM_LIST: Bucket(900, 5),
        COMPUTE_SCALE_SET_LIST: Bucket(1080, 6),
        COMPUTE_SCALE_SET_VM_UPDATE: Bucket(1500, 500 / 60),
    }
)
"""Client-side token buckets by name (sources in the module docstring)."""

POLL_SUFFIX = ".Poll"

# RBAC actions a request needs besides the resource's own: a NIC or VM model that references a
# subnet or an application security group is checked against that resource too ("linked access
# check"), so every write carrying IP configurations needs both join actions.
_JOIN = (
    "Microsoft.Network/virtualNetworks/subnets/join/action",
    "Microsoft.Network/applicationSecurityGroups/joinIpConfiguration/action",
)


@dataclasses.dataclass(frozen=True, slots=True)
class Operation:
    name: str
    """Metrics and rate-limiter name (``NetworkInterfaces.CreateOrUpdate``)."""
    buckets: tuple[str, ...]
    """Every bucket one request spends a token from."""
    actions: tuple[str, ...]
    """The Azure RBAC actions the request needs."""


def _op(name: str, buckets: tuple[str, ...], *actions: str) -> tuple[str, Operation]:
    return name, Operation(name, buckets, actions)


_NIC_READ = "Microsoft.Network/networkInterfaces/read"
_VMSS_VM_READ = "Microsoft.Compute/virtualMachineScaleSets/virtualMachines/read"
_NETWORK_POLL = "Microsoft.Network/locations/operations/read"
_COMPUTE_POLL = "Microsoft.Compute/locations/operations/read"

OPERATIONS: Mapping[str, Operation] = MappingProxyType(
    dict(
        [
            # -- discovery (resync, describe_instance, garbage collection) --------------------------
            _op(
                "VirtualMachines.List", (ARM_READS, COMPUTE_VM_LIST), "Microsoft.Compute/virtualMachines/read"
            ),
            _op("VirtualMachines.Get", (ARM_READS,), "Microsoft.Compute/virtualMachines/read"),
            _op(
                "VirtualMachineScaleSets.List",
                (ARM_READS, COMPUTE_SCALE_SET_LIST),
                "Microsoft.Compute/virtualMachineScaleSets/read",
            ),
            _op("VirtualMachineScaleSetVMs.List", (ARM_READS,), _VMSS_VM_READ),
            _op("VirtualMachineScaleSetVMs.Get", (ARM_READS,), _VMSS_VM_READ),
            _op("NetworkInterfaces.List", (ARM_READS,), _NIC_READ),
            _op("NetworkInterfaces.Get", (ARM_READS,), _NIC_READ),
            _op(
                "NetworkInterfaces.ListVirtualMachineScaleSetNetworkInterfaces",
                (ARM_READS,),
                "Microsoft.Compute/virtualMachineScaleSets/networkInterfaces/read",
            ),
            _op(
                "NetworkInterfaces.ListVirtualMachineScaleSetVMNetworkInterfaces",
                (ARM_READS,),
                "Microsoft.Compute/virtualMachineScaleSets/virtualMachines/networkInterfaces/read",
            ),
            _op(
                "NetworkInterfaces.GetVirtualMachineScaleSetNetworkInterface",
                (ARM_READS,),
                "Microsoft.Compute/virtualMachineScaleSets/virtualMachines/networkInterfaces/read",
            ),
            _op("VirtualNetworks.Get", (ARM_READS,), "Microsoft.Network/virtualNetworks/read"),
            _op("VirtualNetworks.ListUsage", (ARM_READS,), "Microsoft.Network/virtualNetworks/usages/read"),
            _op(
                "ApplicationSecurityGroups.List",
                (ARM_READS,),
                "Microsoft.Network/applicationSecurityGroups/read",
            ),
            # -- mutations ---------------------------------------------------------------------------
            _op(
                "NetworkInterfaces.CreateOrUpdate",
                (ARM_WRITES, NETWORK_WRITES),
                "Microsoft.Network/networkInterfaces/write",
                *_JOIN,
            ),
            _op("NetworkInterfaces.CreateOrUpdate.Poll", (ARM_READS,), _NETWORK_POLL, _NIC_READ),
            _op(
                "NetworkInterfaces.Delete",
                (ARM_DELETES, NETWORK_WRITES),
                "Microsoft.Network/networkInterfaces/delete",
            ),
            # Network answers a delete with both Azure-AsyncOperation and Location; the poller's final
            # read follows Location (an operationResults URL).
            _op(
                "NetworkInterfaces.Delete.Poll",
                (ARM_READS,),
                _NETWORK_POLL,
                "Microsoft.Network/locations/operationResults/read",
            ),
            _op(
                "VirtualMachineScaleSetVMs.Update",
                (ARM_WRITES, COMPUTE_SCALE_SET_VM_UPDATE),
                "Microsoft.Compute/virtualMachineScaleSets/virtualMachines/write",
                *_JOIN,
            ),
            _op("VirtualMachineScaleSetVMs.Update.Poll", (ARM_READS,), _COMPUTE_POLL, _VMSS_VM_READ),
        ]
    )
)
"""Every operation the provider sends, by name."""

DEFAULT_BUCKETS = (ARM_WRITES,)
"""Buckets of an operation missing from the table: ARM's writes, the tighter of its generic kinds."""


def poll_name(operation: str) -> str:
    """The label of a long-running ``operation``'s status polls and final read."""
    return operation + POLL_SUFFIX


def actions() -> frozenset[str]:
    """Every RBAC action the provider's requests need."""
    return frozenset(a for op in OPERATIONS.values() for a in op.actions)


class ArmRateLimiter(RateLimiter):
    """Token buckets shared by operations: a request spends one token from each bucket its
    operation lists (:data:`OPERATIONS`), and the wait it reports is the sum of the waits.

    ARM throttles by kind of request (reads, writes, deletes), not by API, so two operations of the
    same kind must drain one bucket; :class:`~eni_ipam.core.ratelimit.RateLimiter` keys buckets by name,
    and here the names are the buckets', not the operations'.
    """

    def __init__(
        self,
        buckets: Mapping[str, Bucket] = BUCKETS,
        *,
        operations: Mapping[str, Operation] = OPERATIONS,
        share: float = 1.0,
        clock: Clock | None = None,
    ) -> None:
        super().__init__(buckets, default=BUCKETS[ARM_WRITES], share=share, clock=clock)
        self._spends = {name: op.buckets for name, op in operations.items()}

    def buckets_of(self, operation: str) -> tuple[str, ...]:
        return self._spends.get(operation, DEFAULT_BUCKETS)

    async def acquire(self, operation: str) -> float:
        waited = 0.0
        for bucket in self.buckets_of(operation):
            waited += await super().acquire(bucket)
        return waited
