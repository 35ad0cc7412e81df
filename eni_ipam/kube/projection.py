"""What the controller keeps of the Kubernetes objects it follows: projections, never whole objects.

Role: the informers of :mod:`~eni_ipam.kube.source` hand every object of a list page or a watch
event to one of these functions and keep only the result (client-go's ``SetTransform``). A
kubelet's Node is 8–50 KB of JSON (its image cache, managedFields, labels, conditions) and several
times that as Python objects; an ENIPool carries an entry per pool address. At 100,000 nodes in one
process, only what the controller reads may stay.

* :class:`NodeInfo`: name, uid, resourceVersion, ``spec.providerID``, the two labels a pool is
  made from (zone, instance type), the labels the profiles' selectors name (those keys only, none
  without profiles), and what eni-ipam writes on it (the max-pods annotation, the keys of its own
  taints). Nothing else of a Node is read.
* :class:`PendingPod`: the Pod's ``namespace/name``, resourceVersion and the node it waits on (none
  for a host-network Pod, which needs no address).
* :class:`PoolInfo`: the metadata the controller acts on (generation, creation time, deletion,
  finalizers, the Node owners' uids, the defaults annotation, the profile label), the whole spec,
  the node agent's ``used`` and ``releaseAnswers``, the handshake's ``release`` marks, the
  prefixes the interfaces publish (the generic provider's records), the conditions' status and
  transition time, and a digest of the controller-owned status fields (:func:`status_digest`)
  instead of their content.

Invariants:

* A projection never raises for an object that has ``metadata.name``: malformed values are kept as
  they came (``used`` that is not a list, a spec that is not a mapping), so the conversion in
  :mod:`~eni_ipam.kube.resources` refuses them exactly as it refuses the whole object, naming the
  field.
* :func:`status_digest` gives equal digests for equal controller-owned fields, whether computed
  from an object read back from the API server or from the fields about to be written: a write
  whose digest equals the stored one changes nothing, and is not sent.
* Strings shared by many objects (label values, condition words, the finalizer, spec keys) are
  interned, so 100,000 objects hold one copy each.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
from collections.abc import Mapping
from typing import Any

from eni_ipam.core.packed import AddressSet

DEFAULTS_ANNOTATION = "eni-ipam.io/defaults"
"""The spec values the controller last wrote from ``node_defaults`` (JSON, ENIPool keys). A field
holding the value recorded here follows ``node_defaults``; a field someone set to another value is
theirs, and the controller leaves it alone (docs/configuration.md, ``node_defaults``)."""

PROFILE_LABEL = "eni-ipam.io/profile"
"""The profile a pool follows (:mod:`~eni_ipam.core.profiles`), on pools the controller keeps in
step with their defaults; absent when the pool follows ``node_defaults`` alone."""

MAX_PODS_ANNOTATION = "eni-ipam.io/max-pods"
"""The most pods the Node can run with an address each, plus the host-network ones, as the
controller publishes it (:mod:`~eni_ipam.kube.nodemarks`)."""

OWN_TAINT_PREFIX = "eni-ipam.io/"
"""eni-ipam's taints are under its own domain (:mod:`~eni_ipam.kube.nodemarks`)."""

ZONE_LABEL = "topology.kubernetes.io/zone"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"

CONTROLLER_FIELDS = (
    "pool",
    "release",
    "subnets",
    "interfaces",
    "stats",
    "message",
    "observedGeneration",
    "conditions",
)
"""The status fields the controller owns and writes whole; ``used`` and ``releaseAnswers`` are the
node agent's and never among them."""

CONDITION_TYPES = ("Ready", "AtCapacity", "SubnetPressure")
"""The conditions the controller writes; their transition times are kept to be carried over."""

_EMPTY: Mapping[str, Any] = {}
"""One shared empty mapping for the absent ``releaseAnswers`` and ``release`` of most pools (never
modified: projections are read-only)."""


def _shared(value: object) -> str:
    """``value`` as an interned string: one copy however many objects carry it."""
    return sys.intern(value) if isinstance(value, str) else sys.intern(str(value or ""))


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else _EMPTY


def _metadata(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return _mapping(obj.get("metadata"))


# -- Nodes ------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class NodeInfo:
    """What the controller reads of a Node."""

    name: str
    uid: str
    resource_version: str
    provider_id: str
    """``spec.providerID``; empty until the cloud controller has set it."""
    zone: str
    instance_type: str
    max_pods: str = ""
    """The ``eni-ipam.io/max-pods`` annotation as it stands (:mod:`~eni_ipam.kube.nodemarks`)."""
    taints: tuple[str, ...] = ()
    """The keys of eni-ipam's own taints the Node carries (no other taint is kept)."""
    labels: tuple[tuple[str, str], ...] = ()
    """``(key, value)`` of the labels the profiles' selectors name, sorted (no other label is kept).
    Nodes of one group share one tuple."""


def _own_taints(spec: Mapping[str, Any]) -> tuple[str, ...]:
    taints = spec.get("taints")
    if not isinstance(taints, list):
        return ()
    keys = (t.get("key") for t in taints if isinstance(t, Mapping))
    return tuple(sorted({_shared(k) for k in keys if isinstance(k, str) and k.startswith(OWN_TAINT_PREFIX)}))


_LABEL_SETS: dict[tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]] = {}
_LABEL_SETS_MAX = 65536


def _selected_labels(labels: Mapping[str, Any], keys: frozenset[str]) -> tuple[tuple[str, str], ...]:
    """The labels of ``keys`` a Node carries, as one tuple shared by the Nodes that carry the same
    (a node group's Nodes: 8 bytes a Node rather than a tuple each; the table is bounded as
    :func:`_transitions`'s)."""
    if not keys:
        return ()
    found = tuple(
        sorted((_shared(k), _shared(v)) for k, v in labels.items() if k in keys and isinstance(v, str))
    )
    if not found:
        return ()
    if len(_LABEL_SETS) >= _LABEL_SETS_MAX:
        _LABEL_SETS.clear()
    return _LABEL_SETS.setdefault(found, found)


def project_node(obj: Mapping[str, Any], label_keys: frozenset[str] = frozenset()) -> NodeInfo:
    """What is kept of a Node; ``label_keys``: the labels kept besides zone and instance type (the
    profiles' selectors' keys)."""
    meta = _metadata(obj)
    labels = _mapping(meta.get("labels"))
    spec = _mapping(obj.get("spec"))
    max_pods = _mapping(meta.get("annotations")).get(MAX_PODS_ANNOTATION)
    return NodeInfo(
        name=str(meta["name"]),
        uid=str(meta.get("uid") or ""),
        resource_version=str(meta.get("resourceVersion") or ""),
        provider_id=str(spec.get("providerID") or ""),
        zone=_shared(labels.get(ZONE_LABEL)),
        instance_type=_shared(labels.get(INSTANCE_TYPE_LABEL)),
        max_pods=_shared(max_pods) if isinstance(max_pods, str) else "",
        taints=_own_taints(spec),
        labels=_selected_labels(labels, label_keys),
    )


def as_node(node: NodeInfo | Mapping[str, Any]) -> NodeInfo:
    """A Node's projection, from the projection itself or the whole object."""
    return node if isinstance(node, NodeInfo) else project_node(node)


# -- Pods -------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class PendingPod:
    """What the controller reads of a Pending Pod."""

    key: str
    """``namespace/name``."""
    resource_version: str
    node: str
    """The node it is bound to and waits on for an address; empty for a host-network Pod (it needs
    none) and for one not scheduled yet."""


def project_pod(obj: Mapping[str, Any]) -> PendingPod:
    meta = _metadata(obj)
    spec = _mapping(obj.get("spec"))
    node = "" if spec.get("hostNetwork") else spec.get("nodeName")
    return PendingPod(
        key=f"{meta.get('namespace') or ''}/{meta['name']}",
        resource_version=str(meta.get("resourceVersion") or ""),
        node=_shared(node) if isinstance(node, str) else "",  # a node's Pods share its name
    )


# -- ENIPools ---------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class PoolInfo:
    """What the controller reads of an ENIPool. Field values that come from the object unchecked
    (``spec``, ``used``, ``answers``, ``release``) are validated where they are read."""

    name: str
    resource_version: str
    generation: int
    created: str
    """``metadata.creationTimestamp``: the oldest pool naming an instance holds it."""
    deleting: bool
    """``metadata.deletionTimestamp`` is set."""
    finalizers: tuple[str, ...]
    node_owners: tuple[object, ...]
    """The uids of the pool's Node owner references (empty: a pool made by hand)."""
    defaults: object
    """The :data:`DEFAULTS_ANNOTATION` as written (None when absent)."""
    spec: object
    """The whole spec as it came (normally a mapping; read-only)."""
    used: object
    """``status.used``: packed (:class:`~eni_ipam.core.packed.AddressSet`) or a tuple when it is a
    list, else the value as it came."""
    answers: object
    """``status.releaseAnswers`` as it came."""
    release: object
    """``status.release`` as it came: the controller's handshake marks."""
    bad_status: str
    """The type of ``status`` when it is set but not a mapping (then nothing else of it is read)."""
    has_status: bool
    """``status`` is present (a status write may then address its fields one by one)."""
    prefixes: tuple[str, ...]
    ipv6_prefixes: tuple[str, ...]
    """IPv4 and IPv6 prefixes the status's interfaces publish (the generic provider's state)."""
    transitions: tuple[tuple[str, str, str], ...]
    """``(type, status, lastTransitionTime)`` of the controller's conditions."""
    digest: bytes
    """:func:`status_digest` of the status as stored."""
    profile: str = ""
    """The :data:`PROFILE_LABEL` as written (``""`` when absent)."""
    listed: int | None = None
    """``status.stats.available``: the addresses the pool held when its status was last written
    (None when absent or not a count). A hint of which pools are short when a term begins, never
    planned on."""

    @property
    def instance_id(self) -> object:
        return self.spec.get("instanceID") if isinstance(self.spec, Mapping) else None


def _canonical(fields: Mapping[str, Any]) -> bytes:
    return json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str).encode()


def status_digest(status: Mapping[str, Any]) -> bytes:
    """A digest of the controller-owned fields of ``status`` (a fields' absence counts), the
    conditions without their ``lastTransitionTime`` (a time kept from an earlier write is not a
    change). 16 bytes of BLAKE2b over canonical JSON (sorted keys, no spaces)."""
    fields = {key: status[key] for key in CONTROLLER_FIELDS if key in status}
    conditions = fields.get("conditions")
    if isinstance(conditions, list):
        fields["conditions"] = [
            {k: v for k, v in c.items() if k != "lastTransitionTime"} if isinstance(c, Mapping) else c
            for c in conditions
        ]
    return hashlib.blake2b(_canonical(fields), digest_size=16).digest()


def interface_prefixes(interfaces: object, key: str) -> tuple[str, ...]:
    """The ``key`` (``prefixes``, ``ipv6Prefixes``) of every interface a status lists, in order."""
    if not isinstance(interfaces, list):
        return ()
    found: list[str] = []
    for iface in interfaces:
        if isinstance(iface, Mapping) and isinstance(iface.get(key), list):
            found.extend(p for p in iface[key] if isinstance(p, str))
    return tuple(found)


_TRANSITIONS: dict[tuple[tuple[str, str, str], ...], tuple[tuple[str, str, str], ...]] = {}
_TRANSITIONS_MAX = 65536


def _transitions(conditions: object) -> tuple[tuple[str, str, str], ...]:
    if not isinstance(conditions, list):
        return ()
    found = tuple(
        (_shared(c.get("type")), _shared(c.get("status")), _shared(c.get("lastTransitionTime")))
        for c in conditions
        if isinstance(c, Mapping) and c.get("type") in CONDITION_TYPES
    )
    # Pools that became ready in the same second hold the same tuple (200 bytes a pool otherwise);
    # the table is bounded: past its size it starts afresh, and what was handed out stays shared.
    if len(_TRANSITIONS) >= _TRANSITIONS_MAX:
        _TRANSITIONS.clear()
    return _TRANSITIONS.setdefault(found, found)


def _spec(raw: object) -> object:
    # Spec keys and the values many pools share (zone, instance type) are interned; the spec is
    # otherwise kept as it came, for the conversion to validate.
    if not isinstance(raw, Mapping):
        return raw
    return {
        _shared(k): (_shared(v) if k in ("zone", "instanceType") and isinstance(v, str) else v)
        for k, v in raw.items()
    }


def _defaults(text: object) -> object:
    # Pools made from the same node_defaults carry the same annotation: one copy for all of them.
    return sys.intern(text) if isinstance(text, str) else text


def _used(used: object) -> object:
    """``status.used`` as kept: packed when it is a list of IPv4 addresses only (the usual case: a
    hundred thousand pools of dozens of addresses), a tuple when it is another list (the conversion
    reads its strings), else as it came (the conversion refuses it)."""
    if not isinstance(used, list):
        return used
    packed = AddressSet.ipv4_of(used)
    return packed if len(packed) == len(used) else tuple(used)


def project_pool(obj: Mapping[str, Any]) -> PoolInfo:
    meta = _metadata(obj)
    raw_status = obj.get("status")
    has_status = isinstance(raw_status, Mapping)
    status: Mapping[str, Any] = raw_status if isinstance(raw_status, Mapping) else _EMPTY
    used = status.get("used") or ()
    try:
        generation = int(meta.get("generation") or 0)
    except (TypeError, ValueError):
        generation = 0
    owners = meta.get("ownerReferences")
    return PoolInfo(
        name=str(meta["name"]),
        resource_version=str(meta.get("resourceVersion") or ""),
        generation=generation,
        created=str(meta.get("creationTimestamp") or ""),
        deleting=bool(meta.get("deletionTimestamp")),
        finalizers=tuple(_shared(f) for f in meta.get("finalizers") or () if isinstance(f, str)),
        node_owners=tuple(
            o.get("uid") for o in owners or () if isinstance(o, Mapping) and o.get("kind") == "Node"
        )
        if isinstance(owners, list)
        else (),
        defaults=_defaults(_mapping(meta.get("annotations")).get(DEFAULTS_ANNOTATION)),
        spec=_spec(obj.get("spec")),
        used=_used(used),
        answers=status.get("releaseAnswers") or _EMPTY,
        release=status.get("release") or _EMPTY,
        bad_status="" if not raw_status or has_status else type(raw_status).__name__,
        has_status=has_status,
        prefixes=interface_prefixes(status.get("interfaces"), "prefixes"),
        ipv6_prefixes=interface_prefixes(status.get("interfaces"), "ipv6Prefixes"),
        transitions=_transitions(status.get("conditions")),
        digest=status_digest(status),
        listed=_count(_mapping(status.get("stats")).get("available")),
        profile=_profile(_mapping(meta.get("labels")).get(PROFILE_LABEL)),
    )


def _profile(value: object) -> str:
    return _shared(value) if isinstance(value, str) else ""


def _count(value: object) -> int | None:
    """A count as the status holds it: a non-negative int (a bool is not one), else None."""
    return value if type(value) is int and value >= 0 else None


def as_pool(pool: PoolInfo | Mapping[str, Any]) -> PoolInfo:
    """An ENIPool's projection, from the projection itself or the whole object."""
    return pool if isinstance(pool, PoolInfo) else project_pool(pool)
