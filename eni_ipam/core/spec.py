"""The node spec, declared once: what a node asks of its pool, with its bounds and defaults.

:class:`NodeSpec` is the only declaration of the spec's keys. Files write them in snake_case (the
run configuration's ``node_defaults`` and ``nodes``, scenario files); ENIPools in camelCase, the
model's aliases (``min_allocate`` ↔ ``minAllocate``, ``subnet_ids`` ↔ ``subnetIDs``). The ENIPool
CRD's spec schema is generated from :class:`PoolSpec` (``scripts/gen_crd.py``; a test fails when
the committed CRD differs), so a bound changed here changes the CRD.

Invariants:

* Defaults are resolved when a spec is parsed: ``pre_allocate`` written as 0 reads as
  :data:`DEFAULT_PRE_ALLOCATE`, so the planner only ever sees final values. The remaining zeroes
  are not defaults but "no constraint" (no minimum, the instance's maximum, no slack).
* A spec is immutable and hashable, and carries no identity: many nodes share one
  (:func:`shared`); the node's name and instance live on :class:`NodeResource`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from types import MappingProxyType
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, ConfigDict, Field, WithJsonSchema, field_validator

from eni_ipam.config.schema import ConfigModel
from eni_ipam.core.devices import MAX_NETWORK_CARD
from eni_ipam.core.fields import LooseTagMap, TagMap
from eni_ipam.core.model import EMPTY_TAGS, ReleaseState, Tags
from eni_ipam.core.packed import EMPTY_ADDRESS_SET, AddressSet

DEFAULT_PRE_ALLOCATE = 8
"""Free addresses kept ready when a spec leaves ``pre_allocate`` unset (or writes 0, as the reference
operator reads it)."""
MAX_ADDRESSES = 16384
"""Bound of every address count of a spec: above any instance's pool (the largest EC2 types hold
under 12,000 addresses with /28 prefixes, an Azure VM 2,048), so that no pool asks for more than an
instance could ever hold, and a typo is refused. What a pool may take of a shared subnet is bounded
apart, by the subnet reserve (``settings.subnet_reserve``)."""
MAX_DEVICE_INDEX = 31
"""Highest device index an interface may have (EC2's largest instances take 32 per network card)."""
MAX_ID_LENGTH = 256
"""Length of a cloud resource id (EC2 ids are 21 characters, Azure's resource ids run to ~200)."""
MAX_TAG_VALUE = 256
"""Length of a tag value, EC2's and Azure's limit."""
MAX_TAG_KEY = 512
"""Length of a tag key: Azure's limit (EC2's is 128)."""
MAX_TAGS = 50
"""Tags a filter may name: EC2's limit of tags on one resource (a filter naming more matches nothing)."""
PRINTABLE = r"^[!-~]*$"
"""An identifier from the cluster or the cloud (an instance id, type, zone, subnet or group id):
printable ASCII, no space, no control character, so that what a Node or an edit wrote cannot drive
the terminal of whoever lists the pools (``kubectl get``: escape sequences, window titles, links)."""
MAX_SUBNETS = 64
MAX_SECURITY_GROUPS = 16
"""EC2's limit of security groups per interface."""

_SPECIAL_ALIASES = {"subnet_ids": "subnetIDs", "instance_id": "instanceID"}


def camel(field: str) -> str:
    """The ENIPool spec key of a spec field (``min_allocate`` → ``minAllocate``)."""
    if field in _SPECIAL_ALIASES:
        return _SPECIAL_ALIASES[field]
    head, *rest = field.split("_")
    return head + "".join(part.capitalize() for part in rest)


def _tag_values_bounded(tags: Tags) -> Tags:
    if len(tags) > MAX_TAGS:
        raise ValueError(f"at most {MAX_TAGS} tags (a resource carries no more), got {len(tags)}")
    for key, value in tags.items():
        if not 0 < len(key) <= MAX_TAG_KEY:
            raise ValueError(f"a tag key must have 1 to {MAX_TAG_KEY} characters, got {len(key)}")
        if len(value) > MAX_TAG_VALUE:
            raise ValueError(f"the value of tag {key!r} is longer than {MAX_TAG_VALUE} characters")
    return tags


_TAGS_SCHEMA = WithJsonSchema(
    {
        "type": "object",
        "maxProperties": MAX_TAGS,
        "additionalProperties": {"type": "string", "maxLength": MAX_TAG_VALUE},
        "x-kubernetes-validations": [
            {
                "rule": f"self.all(k, size(k) >= 1 && size(k) <= {MAX_TAG_KEY})",
                "message": f"a tag key must have 1 to {MAX_TAG_KEY} characters",
            }
        ],
    }
)
SpecTags = Annotated[LooseTagMap, AfterValidator(_tag_values_bounded), _TAGS_SCHEMA]
"""Tags as files write them (number values read as text), values bounded."""
PoolTags = Annotated[TagMap, AfterValidator(_tag_values_bounded), _TAGS_SCHEMA]
"""Tags as an ENIPool holds them: string values only, as the CRD's schema says."""
Count = Annotated[int, Field(ge=0, le=MAX_ADDRESSES)]
CloudId = Annotated[str, Field(min_length=1, max_length=MAX_ID_LENGTH, pattern=PRINTABLE)]


class NodeSpec(ConfigModel):
    """What a node asks of its pool (docs/settings.md, "node spec")."""

    # Files write snake_case; ENIPools are read with ``by_alias`` (camelCase) by the Kubernetes side.
    model_config = ConfigDict(alias_generator=camel, validate_by_name=True, validate_by_alias=False)

    pre_allocate: Annotated[int, Field(ge=-MAX_ADDRESSES, le=MAX_ADDRESSES)] = DEFAULT_PRE_ALLOCATE
    """Free addresses to keep ready beyond those in use; 0 means the default (8). Negative values are
    used as they are, as in the reference operator."""
    min_allocate: Count = 0
    """Addresses the pool always holds, used or not; 0 means no minimum."""
    max_allocate: Count = 0
    """Addresses the pool never exceeds; 0 means the instance's maximum."""
    max_above_watermark: Count = 0
    """Addresses one pass may add beyond the watermark, to save calls on a growing node."""
    first_interface_index: Annotated[int, Field(ge=0, le=MAX_DEVICE_INDEX)] = 0
    """Interfaces of network card 0 below this device index are never filled nor counted (1 keeps pods
    off the primary interface)."""
    network_cards: Annotated[
        tuple[Annotated[int, Field(ge=0, le=MAX_NETWORK_CARD)], ...],
        Field(
            min_length=1,
            max_length=MAX_NETWORK_CARD + 1,
            strict=False,
            json_schema_extra={"x-kubernetes-list-type": "set"},  # the API server refuses a card twice
        ),
    ] = (0,)
    """Network cards whose interfaces the pool fills and where it attaches new ones (EC2's
    NetworkCardIndex), in order of preference. Default: card 0 only, every instance's one card. A
    multi-card instance (p5.48xlarge: 32 cards of 2 interfaces) holds many more addresses with more
    cards; a card the instance type does not have is skipped."""
    subnet_ids: Annotated[tuple[CloudId, ...], Field(max_length=MAX_SUBNETS, strict=False)] = ()
    """Subnets new interfaces are created in, the one with most free addresses first."""
    subnet_tags: SpecTags = EMPTY_TAGS
    """Tags a subnet must all carry to receive new interfaces (when subnetIDs is empty)."""
    security_groups: Annotated[tuple[CloudId, ...], Field(max_length=MAX_SECURITY_GROUPS, strict=False)] = ()
    """Security groups of new interfaces (empty: those of the primary interface)."""
    security_group_tags: SpecTags = EMPTY_TAGS
    """Tags the security groups of new interfaces must all carry (when securityGroups is empty)."""
    exclude_interface_tags: SpecTags = EMPTY_TAGS
    """An interface carrying all of these tags is neither filled nor counted."""
    address_family: Literal["ipv4", "ipv6", "dual"] = "ipv4"
    """The pods' addresses: ``ipv4`` (the pool's secondary addresses or /28s), ``ipv6`` (one IPv6 /80
    prefix, kept for the node's life, and no IPv4 pool), or ``dual`` (both). IPv6 needs a Nitro
    instance and a subnet with an IPv6 block (docs/aws.md "IPv6")."""
    disable_prefix_delegation: bool = False
    """Plain secondary addresses on this node even where /28 prefixes are enabled."""
    delete_on_termination: bool = True
    """Interfaces created for the node go with its instance."""

    @field_validator("pre_allocate")
    @classmethod
    def _default_for_zero(cls, value: int) -> int:
        return DEFAULT_PRE_ALLOCATE if value == 0 else value

    @field_validator("network_cards")
    @classmethod
    def _cards_once(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        seen: set[int] = set()
        for card in value:
            if card in seen:
                raise ValueError(f"network card {card} is listed twice: list each card once")
            seen.add(card)
        return value

    def under(self, defaults: NodeSpec) -> NodeSpec:
        """These fields, with ``defaults`` filling in what was not written here."""
        written = self.model_fields_set & set(SPEC_FIELDS)
        return defaults.replace(**{key: getattr(self, key) for key in written})

    def fields(self) -> NodeSpec:
        """The spec keys alone, as a plain :class:`NodeSpec` shared with equal specs (a subclass
        adding identity or usage, such as a scenario's node entry, drops them here)."""
        if type(self) is NodeSpec:
            return shared(self)
        values = tuple(getattr(self, key) for key in SPEC_FIELDS)
        found = _BY_VALUES.get(values)  # every pool read at a term's start comes here: no model made
        if found is not None:
            return found
        written = self.model_fields_set & set(SPEC_FIELDS)
        spec = shared(NodeSpec.model_construct(written, **dict(zip(SPEC_FIELDS, values, strict=True))))
        if len(_BY_VALUES) < _SHARED_MAX:
            _BY_VALUES[values] = spec
        return spec

    def as_pool_spec(self) -> dict[str, Any]:
        """The keys written here, as an ENIPool spec (camelCase, plain JSON values)."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True, include=set(SPEC_FIELDS))


SPEC_FIELDS = tuple(NodeSpec.model_fields)
"""Every spec key, in declaration order."""


def spec_problems(spec: NodeSpec, written: AbstractSet[str] | None = None) -> list[tuple[str, str]]:
    """``(field, message)`` for each pair of watermarks no pool can honour together: each value is
    in bounds, but the pool would silently stop short of what was asked. ``written``: the keys
    someone wrote (``spec.model_fields_set`` when None); a default is never blamed.

    * ``min_allocate`` above a set ``max_allocate``: the pool stops at the maximum and never holds
      the minimum.
    * a written ``pre_allocate`` above a set ``max_allocate``: the pool can never keep that many
      free (the default 8 under a small ``max_allocate`` is a small pool, not a contradiction).

    Run configurations refuse these at load. ENIPools are not checked: the CRD admits them, and a
    pool is reconciled as written (``max_allocate`` wins), as the reference operator does.
    """
    written = spec.model_fields_set if written is None else written
    problems: list[tuple[str, str]] = []
    top = spec.max_allocate
    if top and spec.min_allocate > top:
        problems.append(
            (
                "min_allocate",
                f"min_allocate {spec.min_allocate} is above max_allocate {top}: the pool stops at "
                f"{top} and never holds its minimum. Lower min_allocate to at most {top}, or raise "
                "max_allocate (0: the instance's maximum)",
            )
        )
    if top and "pre_allocate" in written and spec.pre_allocate > top:
        problems.append(
            (
                "pre_allocate",
                f"pre_allocate {spec.pre_allocate} is above max_allocate {top}: a pool of at most {top} "
                f"addresses can never keep {spec.pre_allocate} free. Lower pre_allocate to at most "
                f"{top}, or raise max_allocate (0: the instance's maximum)",
            )
        )
    return problems


DEFAULT_SPEC = NodeSpec()

_SHARED: dict[NodeSpec, NodeSpec] = {}
_BY_VALUES: dict[tuple[Any, ...], NodeSpec] = {}
_SHARED_MAX = 4096


def shared(spec: NodeSpec) -> NodeSpec:
    """One object for equal specs: a cluster's nodes mostly ask the same of their pools, so a
    100,000-node cluster holds a handful of specs, not one per node. Past :data:`_SHARED_MAX`
    distinct specs (a spec per node), specs are no longer shared, and memory stays bounded."""
    found = _SHARED.get(spec)
    if found is not None:
        return found
    if len(_SHARED) < _SHARED_MAX:
        _SHARED[spec] = spec
    return spec


class PoolSpec(NodeSpec):
    """An ENIPool's spec: the node spec in camelCase plus the instance it lives on. The CRD's spec
    schema is generated from this model. Keys the controller does not know (a newer CRD's) are
    ignored."""

    model_config = ConfigDict(extra="ignore")

    instance_id: CloudId
    """The cloud instance behind the node (EC2 instance id, Azure VM resource id), from the Node's
    providerID. Set by the controller from the Node; an edit is undone."""
    instance_type: Annotated[str, Field(max_length=64, pattern=PRINTABLE)] = ""
    """The Node's instance-type label, set by the controller (an edit is undone). Informational;
    limits are read from the cloud."""
    zone: Annotated[str, Field(max_length=64, pattern=PRINTABLE)] = ""
    """The Node's zone label, set by the controller (an edit is undone). Informational."""
    # Tag values are strings, as the CRD's schema says (files may write numbers; a pool may not).
    subnet_tags: PoolTags = Field(EMPTY_TAGS, description=NodeSpec.model_fields["subnet_tags"].description)
    security_group_tags: PoolTags = Field(
        EMPTY_TAGS, description=NodeSpec.model_fields["security_group_tags"].description
    )
    exclude_interface_tags: PoolTags = Field(
        EMPTY_TAGS, description=NodeSpec.model_fields["exclude_interface_tags"].description
    )


POOL_ONLY_FIELDS = ("instance_id", "instance_type", "zone")
"""The keys of an ENIPool's spec that are not node spec keys (the instance, from the Node)."""
CRD_DEFAULTS = frozenset({"delete_on_termination"})
"""Spec keys whose default the CRD publishes, so that the API server fills it in: only where an absent
key would read wrong to other clients (an absent boolean reads as false). Publishing the others would
have the API server write them into every pool, and a key it filled no longer takes a later
``node_defaults`` value (:func:`eni_ipam.kube.resources.defaults_patch`)."""


NO_ANSWERS: Mapping[str, ReleaseState] = MappingProxyType({})


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class NodeResource:
    """A node as its source (store, Kubernetes) reports it: its identity and spec, plus what the node
    side says."""

    name: str
    instance_id: str
    spec: NodeSpec = DEFAULT_SPEC
    used: int = 0
    """Addresses the node's workloads use (may exceed the pool: the node reports what it uses)."""
    in_use: AbstractSet[str] = EMPTY_ADDRESS_SET
    """The pool addresses among those in use; these are never released. Packed
    (:class:`~eni_ipam.core.packed.AddressSet`): any set of strings given is packed on construction,
    its IPv4 addresses only (a pool holds no other)."""
    pending_pods: int = 0
    """Pods scheduled to the node still waiting for an address (drives surge allocation)."""
    release_answers: Mapping[str, ReleaseState] = dataclasses.field(default_factory=lambda: NO_ANSWERS)
    """The node side's answers in the release handshake, by address."""

    def __post_init__(self) -> None:
        if not isinstance(self.in_use, AddressSet):
            object.__setattr__(self, "in_use", AddressSet.ipv4_of(self.in_use))
