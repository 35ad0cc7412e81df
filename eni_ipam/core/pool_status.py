"""The ENIPool status as the CRD declares it: the model its schema is generated from (``make crd``).

Role: the status is written by :func:`~eni_ipam.kube.resources.status_ops` (the controller's fields)
and :func:`~eni_ipam.kube.resources.agent_status_patch` (the node agent's) and read by
:mod:`~eni_ipam.kube.projection`; nothing validates it with this model. It declares what the API
server admits, field by field: names, types, bounds, and the descriptions ``kubectl explain enipool.status``
shows. scripts/gen_crd.py writes the CRD's status schema from it, as it writes the spec's from
:class:`~eni_ipam.core.spec.PoolSpec`; tests/deploy/test_crd.py checks both against the code.

Bounds (:mod:`eni_ipam.core.model`): ``MAX_NODE_ADDRESSES`` for what is keyed by address,
``MAX_NODE_INTERFACES`` for interfaces, subnets and an interface's groups (EC2 allows 16, Azure 20
application security groups), ``MAX_INTERFACE_PREFIXES`` for prefixes, 8 conditions (2 are written):
an unbounded list lets a writer store an object the size of etcd's limit, which every informer then
holds and decodes.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from eni_ipam.core.devices import MAC_PATTERN, MAX_NETWORK_CARD
from eni_ipam.core.model import MAX_INTERFACE_PREFIXES, MAX_NODE_ADDRESSES, MAX_NODE_INTERFACES
from eni_ipam.core.spec import camel

MAX_CONDITIONS = 8
Count = Annotated[int, Field(ge=0)]
InterfaceType = Literal["interface", "efa", "efa-only", "trunk", "branch", "other"]
"""Every :attr:`~eni_ipam.core.devices.Kind.label` (a test keeps the two the same)."""


class _Schema(BaseModel):
    model_config = ConfigDict(alias_generator=camel, use_attribute_docstrings=True)


class PoolAddress(_Schema):
    interface: str
    """The interface the address is on."""
    subnet: str
    """The subnet of that interface."""
    prefix: str = ""
    """The /28 prefix the address belongs to, when the node's interfaces carry prefixes."""


class SubnetStatus(_Schema):
    cidr: str
    """The subnet's CIDR: the node side derives each address's prefix length and gateway from it."""


class InterfaceStatus(_Schema):
    id: str
    """The interface's id in the cloud (ENI id, NIC resource id, the generic provider's block)."""
    device_index: int
    """Where it is attached on the instance (0: the primary interface)."""
    subnet: str
    """The subnet it lives in."""
    primary_ip: str = Field("", alias="primaryIP")
    """Its primary address, never in the pool."""
    security_groups: Annotated[list[str], Field(max_length=MAX_NODE_INTERFACES)] = []
    """The security groups it carries."""
    addresses: Count = 0
    """Pool addresses on it."""
    prefixes: Annotated[list[str], Field(max_length=MAX_INTERFACE_PREFIXES)] = []
    """The /28 prefixes delegated to it."""
    ipv6_prefixes: Annotated[list[str], Field(max_length=MAX_INTERFACE_PREFIXES)] = []
    """The IPv6 blocks delegated to it."""
    mac_address: Annotated[str, Field(pattern=MAC_PATTERN)] = ""
    """The MAC address the node sees the interface's device with (lowercase, colon-separated,
    unicast); absent when the interface is no device (the generic provider's)."""
    network_card: Annotated[int, Field(ge=0, le=MAX_NETWORK_CARD)] = 0
    """The network card the interface is attached on (EC2's networkCardIndex); absent for card 0."""
    interface_type: InterfaceType = "interface"
    """What the interface is (EC2's InterfaceType; ``other`` for a type the controller does not
    know); absent for a plain interface. Only ``interface`` and ``efa`` are ever in the pool: the
    node side leaves the others alone."""


class StatsStatus(_Schema):
    available: Count = 0
    """Addresses in the pool, used ones included."""
    used: Count = 0
    """Pool addresses the node's workloads use, as the node agent reports them."""
    needed: Count = 0
    """Addresses the pool lacks to reach its watermark (what the instance can still hold, at most)."""
    excess: Count = 0
    """Free addresses beyond the watermark, which the release handshake may give back."""
    capacity: Count = 0
    """Most addresses the node's interfaces could ever hold (excluded interfaces not counted)."""
    remaining_interfaces: Count = 0
    """Interfaces that could still take addresses, free adapter slots included."""
    at_capacity: bool = False
    """Every usable interface is full and no adapter slot is free."""
    limits_known: bool = False
    """The instance type's limits are known; while they are not, nothing is allocated."""
    running: bool = False
    """The instance is running; nothing is allocated while it is not."""
    prefix_delegated: bool = False
    """The pool is made of /28 prefixes rather than single addresses."""


class ConditionStatus(_Schema):
    type: str
    """Ready (the pool is within its watermarks), AtCapacity (the instance holds no more) or
    SubnetPressure (a subnet of the pool is short of free addresses: only while
    settings.subnet_pressure_enabled)."""
    status: Literal["True", "False", "Unknown"]
    """Whether the condition holds."""
    reason: str = ""
    """Why, in one CamelCase word (PoolReady, Deficit, AtCapacity, LimitsUnknown, InstanceNotRunning,
    DuplicateInstance, NoFreeSlot, RoomLeft, SubnetPressure, NoPressure)."""
    message: str = ""
    """Why, as a sentence."""
    last_transition_time: Annotated[str, Field(json_schema_extra={"format": "date-time"})] = ""
    """When the status last changed."""
    observed_generation: Count = 0
    """The spec's generation the condition was computed from."""


class PoolStatus(_Schema):
    pool: Annotated[dict[str, PoolAddress], Field(max_length=MAX_NODE_ADDRESSES)] = {}
    """Pool addresses, each with the interface and subnet it lives on (written by the controller)."""
    subnets: Annotated[dict[str, SubnetStatus], Field(max_length=MAX_NODE_INTERFACES)] = {}
    """The CIDR of every subnet a pool address lives in, by subnet id (written by the controller)."""
    used: Annotated[list[str], Field(max_length=MAX_NODE_ADDRESSES)] = []
    """Addresses the node's workloads use (written by the node agent)."""
    release: Annotated[
        dict[str, Literal["marked-for-release", "released"]], Field(max_length=MAX_NODE_ADDRESSES)
    ] = {}
    """The controller's side of the release handshake, by address."""
    release_answers: Annotated[
        dict[str, Literal["ready-for-release", "do-not-release"]], Field(max_length=MAX_NODE_ADDRESSES)
    ] = {}
    """The node agent's side of the release handshake, by address."""
    interfaces: Annotated[list[InterfaceStatus], Field(max_length=MAX_NODE_INTERFACES)] = []
    """Every interface of the instance, by device index (written by the controller)."""
    stats: StatsStatus = StatsStatus()
    """The pool's numbers after the controller's last pass."""
    message: str = ""
    """What stands in the way of the pool, as a sentence saying what to do (no subnet room, unknown
    limits, another node on the same instance, …); empty when nothing does."""
    observed_generation: Count = 0
    """The spec's generation the status was computed from."""
    conditions: Annotated[list[ConditionStatus], Field(max_length=MAX_CONDITIONS)] = []
    """Ready and AtCapacity, and SubnetPressure while subnet pressure is enabled."""
