"""ENIPool custom resources ↔ the core model: pure functions, no I/O.

An ENIPool is named after its Node. Its spec is :class:`~eni_ipam.core.spec.PoolSpec`: the node
spec in camelCase (the model's aliases) plus the instance; its status has two writers that never touch
each other's fields:

* the controller: ``pool``, ``subnets``, ``release``, ``interfaces``, ``stats``, ``message``,
  ``conditions``, ``observedGeneration`` (:data:`~eni_ipam.kube.projection.CONTROLLER_FIELDS`) —
  written by :func:`status_ops` as a JSON patch that replaces each of them whole;
* the node agent: ``used`` and ``releaseAnswers`` — read by :func:`resource_from_pool`.

The node agent reads the controller's fields through the functions at the end of this module:
:func:`pool_members` (the IPv4 pool), :func:`ipv6_members`, :func:`pool_interfaces` (each
interface's device: MAC address, device index, network card, subnet).

The functions reading an object take either the whole object or what the informers keep of it
(:mod:`~eni_ipam.kube.projection`), so the conversion is one code path for both.

The CRD (deploy/helm/eni-ipam/crds/) rejects bad values; this module still validates what it reads,
because a cluster may run without the CRD's schema (or an older one), and names the bad field.
"""

from __future__ import annotations

import dataclasses
import datetime
import ipaddress
import json
import re
import sys
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, TypeGuard

from eni_ipam.config.schema import validate
from eni_ipam.core.devices import FILLABLE, MAC_PATTERN, MAX_NETWORK_CARD, Kind
from eni_ipam.core.model import (
    MAX_NODE_ADDRESSES,
    Interface,
    NodeStatus,
    PoolEntries,
    PoolEntry,
    ReleaseState,
)
from eni_ipam.core.packed import AddressSet
from eni_ipam.core.records import NodeRecord
from eni_ipam.core.spec import NO_ANSWERS, NodeResource, NodeSpec, PoolSpec
from eni_ipam.errors import ConfigError
from eni_ipam.kube.api import ENIPOOLS, Obj
from eni_ipam.kube.projection import (
    DEFAULTS_ANNOTATION,
    PROFILE_LABEL,
    NodeInfo,
    PoolInfo,
    as_node,
    as_pool,
    interface_prefixes,
    status_digest,
)

FILLABLE_TYPES = frozenset(kind.label for kind in FILLABLE)
"""The ``interfaceType`` values of interfaces a pool fills: the only ones the node side configures."""

FINALIZER = "eni-ipam.io/pool"
"""Holds an ENIPool until the controller stopped maintaining its node (no address is handed out,
and so forgotten, after the pool's record is gone)."""

_AGENT_ANSWERS = (ReleaseState.READY, ReleaseState.DO_NOT_RELEASE)


NODE_FIELDS = ("instanceID", "instanceType", "zone")
"""The ENIPool spec keys that follow the Node (its provider id, its instance-type and zone labels):
the controller's, put back from the Node whenever they differ (:func:`node_fields_patch`)."""

SPEC_KEYS = {name: (field.alias or name) for name, field in PoolSpec.model_fields.items()}
"""Node spec field → ENIPool spec key, for every field the spec carries (``name`` is metadata.name)."""


# -- reading -------------------------------------------------------------------------------------


def spec_from_pool(obj: PoolInfo | Mapping[str, Any]) -> PoolSpec:
    """The spec an ENIPool asks for: the node spec (defaults resolved) and its instance.

    Raises:
        ConfigError: a spec value is invalid; ``field`` is ``enipools/NAME.spec.key``.
    """
    pool = as_pool(obj)
    raw = pool.spec or {}
    where = f"enipools/{pool.name}.spec"
    if isinstance(raw, Mapping):
        raw = {k: v for k, v in raw.items() if v is not None}  # a null is an absent key (merge patch)
    return validate(PoolSpec, raw, path=where, by_alias=True)


def instance_and_spec(obj: PoolInfo | Mapping[str, Any]) -> tuple[str, NodeSpec]:
    """The instance an ENIPool names and its node spec (one object for equal specs), validated.

    Raises:
        ConfigError: a spec value is invalid, as :func:`spec_from_pool`.
    """
    spec = spec_from_pool(obj)
    return spec.instance_id, spec.fields()


def resource_from_pool(
    obj: PoolInfo | Mapping[str, Any],
    *,
    pending_pods: int = 0,
    read_spec: Callable[[PoolInfo], tuple[str, NodeSpec]] = instance_and_spec,
) -> NodeResource:
    """The node as the manager sees it: the spec plus what the node agent reports in status.
    ``read_spec``: the pool's instance and node spec (:func:`instance_and_spec`, or a memory of the
    specs already validated)."""
    pool = as_pool(obj)
    name = pool.name
    instance_id, spec = read_spec(pool)
    where = f"enipools/{name}.status"
    if pool.bad_status:
        raise ConfigError(where, f"expected a mapping, got {pool.bad_status}")
    raw_used = pool.used  # a list arrives packed or as a tuple (projection.py)
    if isinstance(raw_used, AddressSet):
        used: Collection[str] = raw_used
    elif isinstance(raw_used, tuple):
        used = {a for a in raw_used if isinstance(a, str)}  # the agent's report, once per address
    else:
        raise ConfigError(f"{where}.used", f"expected a list of addresses, got {type(raw_used).__name__}")
    raw_answers = pool.answers
    if not isinstance(raw_answers, Mapping):
        raise ConfigError(
            f"{where}.releaseAnswers", f"expected a mapping of addresses, got {type(raw_answers).__name__}"
        )
    # No answers (nearly every pool, nearly always): the one empty mapping, not a dict a node.
    answers: Mapping[str, ReleaseState] = {
        address: ReleaseState(answer)
        for address, answer in raw_answers.items()
        if isinstance(address, str) and answer in _AGENT_ANSWERS
    } or NO_ANSWERS
    return NodeResource(
        name=name,
        # Interned, as the cloud listing's instance ids are: one string per instance in the manager
        # however many tables name it (the pool's and the cloud view's; 68 bytes a node).
        instance_id=sys.intern(instance_id),
        spec=spec,
        used=len(used),
        in_use=used if isinstance(used, AddressSet) else AddressSet.ipv4_of(used),
        pending_pods=pending_pods,
        release_answers=answers,
    )


def release_marks(obj: PoolInfo | Mapping[str, Any]) -> dict[str, ReleaseState]:
    """The controller's handshake entries as last written (a new leader picks them up)."""
    marks = as_pool(obj).release
    if not isinstance(marks, Mapping):
        return {}
    return {a: ReleaseState(s) for a, s in marks.items() if s in (ReleaseState.MARKED, ReleaseState.RELEASED)}


# -- Nodes → ENIPools ------------------------------------------------------------------------------

_PROVIDER_ID = re.compile(r"^(?P<scheme>[a-z0-9-]+)://(?P<path>[!-~]+)$")
"""A provider id: its path printable ASCII, no space or control character (what would be copied into
the pool's ``spec.instanceID``, and from there to an operator's terminal, is refused here)."""


def instance_id_from_provider_id(provider_id: str) -> str:
    """The cloud instance of a Node's ``spec.providerID``.

    ``aws:///us-east-1a/i-0abc`` → ``i-0abc``; ``azure:///subscriptions/…/virtualMachines/vm-1``
    → the full resource id, lowercased (Azure names VMs by it); any other scheme → the path without leading
    slashes. Empty when the provider id is missing or malformed (the cloud controller has not
    initialised the Node yet, or it holds a space or a control character).
    """
    match = _PROVIDER_ID.match(provider_id or "")
    if not match:
        return ""
    path = match.group("path")
    if match.group("scheme") == "aws":
        return path.rstrip("/").rsplit("/", 1)[-1]
    if match.group("scheme") == "azure":  # ARM ids are case-insensitive; the provider keys them lowercased
        return (path if path.startswith("/") else "/" + path).lower()
    return path.lstrip("/")


def provider_id_scheme(node: NodeInfo | Mapping[str, Any]) -> str:
    """The scheme of a Node's ``spec.providerID`` (``aws``, ``azure``, ``gce``), or ``""``."""
    match = _PROVIDER_ID.match(as_node(node).provider_id)
    return match.group("scheme") if match else ""


def instance_id_of(node: NodeInfo | Mapping[str, Any], instance_ids: str = "provider-id") -> str:
    """The instance a Node's pool names: from its provider id, or its name (``node-name``)."""
    info = as_node(node)
    if instance_ids == "node-name":
        return info.name
    return instance_id_from_provider_id(info.provider_id)


def owned_by(pool: PoolInfo, node: NodeInfo) -> bool:
    """Whether ``pool`` belongs to this incarnation of ``node`` (a Node re-created under the same
    name has a new uid). Pools without a Node owner (made by hand) belong to the Node of their name."""
    uid = node.uid
    return not pool.node_owners or not uid or uid in pool.node_owners


def node_fields(node: NodeInfo | Mapping[str, Any], instance_ids: str = "provider-id") -> dict[str, str]:
    """The spec fields of a Node's pool that are the Node's (:data:`NODE_FIELDS`): its instance and,
    where the Node's labels give them, its type and zone. Empty while the Node has no instance id."""
    info = as_node(node)
    instance_id = instance_id_of(info, instance_ids)
    if not instance_id:
        return {}
    fields = {"instanceID": instance_id}
    if info.instance_type:
        fields["instanceType"] = info.instance_type
    if info.zone:
        fields["zone"] = info.zone
    return fields


def differs_from_node(pool: PoolInfo, wanted: Mapping[str, str]) -> bool:
    """Whether ``pool``'s spec differs from ``wanted`` (:func:`node_fields`) in a Node's field."""
    spec = pool.spec
    if not isinstance(spec, Mapping):
        return False  # not a spec at all: refused where it is read, naming the field
    return any(spec.get(key) != value for key, value in wanted.items())


def pool_for_node(
    node: NodeInfo | Mapping[str, Any],
    defaults: NodeSpec | None,
    *,
    instance_ids: str = "provider-id",
    profile: str = "",
) -> Obj | None:
    """The ENIPool to create for ``node`` (spec from ``defaults``, the keys written there, recorded in
    :data:`DEFAULTS_ANNOTATION`), or None while the Node has no instance id. Owned by the Node, so it
    goes when the Node goes. ``profile``: the profile ``defaults`` come from (:data:`PROFILE_LABEL`;
    ``""``: ``node_defaults`` alone)."""
    info = as_node(node)
    spec: dict[str, Any] = node_fields(info, instance_ids)
    if not spec:
        return None
    written = defaults.as_pool_spec() if defaults is not None else {}
    spec.update(written)
    return {
        "apiVersion": ENIPOOLS.api_version,
        "kind": ENIPOOLS.kind,
        "metadata": {
            "name": info.name,
            "labels": {
                "app.kubernetes.io/managed-by": "eni-ipam",
                **({PROFILE_LABEL: profile} if profile else {}),
            },
            "annotations": {DEFAULTS_ANNOTATION: json.dumps(written, sort_keys=True)},
            "finalizers": [FINALIZER],
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": info.name, "uid": info.uid}],
        },
        "spec": spec,
    }


def recorded_defaults(pool: PoolInfo | Mapping[str, Any]) -> dict[str, Any] | None:
    """The defaults the controller last wrote into ``pool``, or None when it recorded none (a pool
    made by hand, or by a version that did not record them: every field of it is people's)."""
    text = as_pool(pool).defaults
    if not isinstance(text, str):
        return None
    try:
        recorded = json.loads(text)
    except ValueError:
        return None
    return recorded if isinstance(recorded, dict) else None


def defaults_patch(pool: PoolInfo | Mapping[str, Any], defaults: NodeSpec | None) -> Obj | None:
    """A merge patch bringing the fields that follow ``node_defaults`` to today's defaults, or None.

    A field follows the defaults while it holds the value the controller last wrote (recorded in
    :data:`DEFAULTS_ANNOTATION`); one that someone changed or removed is theirs and is left alone,
    as is one set before its default existed. A new default is written where the field is unset; a
    default that is no longer set is removed from the fields that still hold it. A pool with no
    record is left alone entirely."""
    info = as_pool(pool)
    recorded = recorded_defaults(info)
    if recorded is None:
        return None
    current: Mapping[str, Any] = info.spec if isinstance(info.spec, Mapping) else {}
    wanted = defaults.as_pool_spec() if defaults is not None else {}
    changes: dict[str, Any] = {}
    for key in set(recorded) | set(wanted):
        follows = key in recorded and key in current and current[key] == recorded[key]
        new_default = key not in recorded and key not in current
        if key in wanted and (follows or new_default) and current.get(key) != wanted[key]:
            changes[key] = wanted[key]
        elif key not in wanted and follows:
            changes[key] = None  # the default went: the field falls back to the code's default
        # Otherwise the field is people's: changed, set before the default existed, or removed.
    annotation = json.dumps(wanted, sort_keys=True)
    if not changes and annotation == json.dumps(recorded, sort_keys=True):
        return None
    patch: Obj = {"metadata": {"annotations": {DEFAULTS_ANNOTATION: annotation}}}
    if changes:
        patch["spec"] = changes
    return patch


def profile_patch(pool: PoolInfo | Mapping[str, Any], profile: str) -> Obj | None:
    """A merge patch recording that ``pool`` follows ``profile`` (``""``: ``node_defaults`` alone,
    the label removed), or None when it says so already, or when the pool follows no defaults at
    all (no :data:`DEFAULTS_ANNOTATION`: every field of it is people's)."""
    info = as_pool(pool)
    if info.profile == profile or recorded_defaults(info) is None:
        return None
    return {"metadata": {"labels": {PROFILE_LABEL: profile or None}}}


def merge_patches(*patches: Obj | None) -> Obj:
    """Merge patches as one: mappings merged key by key (``metadata.labels`` of one and
    ``metadata.annotations`` of another both kept), other values the later patch's."""
    out: Obj = {}
    for patch in patches:
        for key, value in (patch or {}).items():
            old = out.get(key)
            out[key] = (
                merge_patches(old, value) if isinstance(old, dict) and isinstance(value, dict) else value
            )
    return out


def node_fields_patch(
    pool: PoolInfo | Mapping[str, Any],
    node: NodeInfo | Mapping[str, Any],
    *,
    instance_ids: str = "provider-id",
) -> Obj | None:
    """A merge patch bringing the pool's Node-derived fields (instance, type, zone) up to date, or
    None. These are the controller's: an edit of them is undone. People's edits to the rest of the
    spec are never overwritten."""
    wanted = node_fields(node, instance_ids)
    spec = as_pool(pool).spec
    current: Mapping[str, Any] = spec if isinstance(spec, Mapping) else {}
    changes = {k: v for k, v in wanted.items() if current.get(k) != v}
    return {"spec": changes} if changes else None


# -- status ---------------------------------------------------------------------------------------


def _interface(iface: Interface) -> dict[str, Any]:
    # The MAC address, the network card and the type, as the IPv6 prefixes, only where there is one
    # (another card, a type other than plain): a pool
    # whose interfaces have none (the generic provider's) reads as it did before they were
    # published, and its status is not rewritten for them.
    return {
        "id": iface.id,
        "deviceIndex": iface.device_index,
        "subnet": iface.subnet_id,
        "primaryIP": iface.primary_ip,
        "securityGroups": list(iface.security_groups),
        "addresses": len(iface.addresses),
        "prefixes": list(iface.prefixes),
        **({"ipv6Prefixes": list(iface.ipv6_prefixes)} if iface.ipv6_prefixes else {}),
        **({"macAddress": mac} if (mac := iface.mac_address) else {}),
        **({"networkCard": iface.network_card} if iface.network_card else {}),
        **({"interfaceType": iface.kind.label} if iface.kind is not Kind.PLAIN else {}),
    }


def _conditions(status: NodeStatus) -> list[tuple[str, bool, str, str]]:
    s = status.stats
    if status.problem:
        ready = (False, status.problem, status.message)
    elif not s.running:
        ready = (False, "InstanceNotRunning", status.message or "the instance is not running")
    elif not s.limits_known:
        ready = (False, "LimitsUnknown", status.message or "the instance type's limits are unknown")
    elif s.needed > 0:
        reason = "AtCapacity" if s.at_capacity else "Deficit"
        ready = (False, reason, status.message or f"{s.needed} addresses needed")
    else:
        ready = (True, "PoolReady", "the pool is within its watermarks")
    capacity = (
        (True, "NoFreeSlot", "no adapter slot or address room is left")
        if s.at_capacity
        else (False, "RoomLeft", "the instance can take more addresses")
    )
    conditions = [("Ready", *ready), ("AtCapacity", *capacity)]
    if status.pressure is not None:  # written only while subnet pressure is enabled
        conditions.append(("SubnetPressure", *_pressure(status.pressure)))
    return conditions


def _pressure(subnets: tuple[str, ...]) -> tuple[bool, str, str]:
    """The ``SubnetPressure`` condition: whether a subnet of the pool is under pressure (decision
    0054), and what that does to the pool."""
    if not subnets:
        return (False, "NoPressure", "no subnet of the pool is under pressure")
    named = ("subnets " if len(subnets) > 1 else "subnet ") + ", ".join(subnets)
    return (
        True,
        "SubnetPressure",
        f"{named} {'are' if len(subnets) > 1 else 'is'} short of free addresses: the pool keeps only "
        "what its pods use or wait for and gives its spare addresses back (settings.subnet_pressure_*)",
    )


def _pool(pool: Sequence[PoolEntry]) -> dict[str, Any]:
    """The ``pool`` status field: address → where it lives. The entries of one interface (or one
    prefix) share one value, made once: a pool is rendered after every pass of every node."""
    if isinstance(pool, PoolEntries):
        out: dict[str, Any] = {}
        for iface, prefix, addresses in pool.by_interface():
            where = {
                "interface": iface.id,
                "subnet": iface.subnet_id,
                **({"prefix": prefix} if prefix else {}),
            }
            out.update(dict.fromkeys(addresses, where))
        return out
    return {
        e.address: {
            "interface": e.interface_id,
            "subnet": e.subnet_id,
            **({"prefix": e.prefix} if e.prefix else {}),
        }
        for e in pool
    }


def desired_status(status: NodeStatus, *, generation: int) -> dict[str, Any]:
    """The controller-owned status fields for ``status`` (conditions without their times)."""
    s = status.stats
    return {
        "pool": _pool(status.pool),
        "release": {address: str(state) for address, state in status.release.items()},
        "subnets": {subnet: {"cidr": cidr} for subnet, cidr in status.subnets.items()},
        "interfaces": [_interface(i) for i in status.interfaces],
        "stats": {
            "available": s.available,
            "used": s.used,
            "needed": s.needed,
            "excess": s.excess,
            "capacity": s.capacity,
            "remainingInterfaces": s.remaining_interfaces,
            "atCapacity": s.at_capacity,
            "limitsKnown": s.limits_known,
            "running": s.running,
            "prefixDelegated": s.prefix_delegated,
        },
        "message": status.message,
        "observedGeneration": generation,
    }


def status_ops(
    status: NodeStatus,
    current: PoolInfo,
    *,
    now: datetime.datetime,
    stored_as: tuple[bytes, bytes] | None = None,
) -> list[Obj] | None:
    """The JSON patch (RFC 6902) writing ``status`` into the pool ``current`` describes, or None when
    the controller's fields already say so (their digest equals the stored one), or when
    ``stored_as`` says that the API server stores these fields as the pool now holds them:
    ``(digest written, digest stored)`` of the last write, when they differed (a CRD older than the
    controller prunes the fields its schema lacks: writing them again would change nothing).

    Each controller-owned field is replaced whole by an ``add`` of ``/status/<field>`` (``add``
    replaces a member that exists), so the write needs nothing of the old content and never names
    the node agent's fields: the API server applies the operations to the object as it is when the
    write lands, the agent's latest ``used`` and ``releaseAnswers`` included, and the write needs no
    resourceVersion. Only a pool with no status at all gets ``/status`` added whole; that write is
    conditional on the resourceVersion it was computed from (an agent's first report meanwhile makes
    it a 409, and the status is re-read). A condition keeps its ``lastTransitionTime`` unless its
    status changed."""
    generation = current.generation
    desired = desired_status(status, generation=generation)
    conditions: list[dict[str, Any]] = [
        {
            "type": kind,
            "status": "True" if ok else "False",
            "reason": reason,
            "message": message,
            "lastTransitionTime": "",  # set below, once a write is known to be needed
            "observedGeneration": generation,
        }
        for kind, ok, reason, message in _conditions(status)
    ]
    digest = status_digest({**desired, "conditions": conditions})  # times are not hashed
    if digest == current.digest or (digest, current.digest) == stored_as:
        return None
    stamp = now.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    previous = {kind: (text, since) for kind, text, since in current.transitions}
    for condition in conditions:
        was, since = previous.get(condition["type"], ("", ""))
        condition["lastTransitionTime"] = since if was == condition["status"] and since else stamp
    desired["conditions"] = conditions
    if current.has_status:
        return [{"op": "add", "path": f"/status/{key}", "value": value} for key, value in desired.items()]
    return [
        {"op": "add", "path": "/metadata/resourceVersion", "value": current.resource_version},
        {"op": "add", "path": "/status", "value": desired},
    ]


HELD_REASON = "CRDOutdated"
"""The ``Ready`` condition's reason while the pool's status is held (:mod:`~eni_ipam.kube.crd`)."""


def held_ops(status: NodeStatus, current: PoolInfo, *, now: datetime.datetime, message: str) -> list[Obj]:
    """The JSON patch that writes only the conditions of ``status``, its ``Ready`` condition false
    with reason :data:`HELD_REASON` and ``message``: what a pool says while its status is held
    because the ENIPool CRD in the cluster would prune it (the conditions are in every revision)."""
    generation = current.generation
    stamp = now.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    previous = {kind: (text, since) for kind, text, since in current.transitions}
    conditions: list[dict[str, Any]] = []
    for kind, ok, reason, text in _conditions(status):
        if kind == "Ready":
            ok, reason, text = False, HELD_REASON, message
        flag = "True" if ok else "False"
        was, since = previous.get(kind, ("", ""))
        conditions.append(
            {
                "type": kind,
                "status": flag,
                "reason": reason,
                "message": text,
                "lastTransitionTime": since if was == flag and since else stamp,
                "observedGeneration": generation,
            }
        )
    if current.has_status:
        return [{"op": "add", "path": "/status/conditions", "value": conditions}]
    return [
        {"op": "add", "path": "/metadata/resourceVersion", "value": current.resource_version},
        {"op": "add", "path": "/status", "value": {"conditions": conditions}},
    ]


def written_digest(ops: Sequence[Obj]) -> bytes:
    """The :func:`~eni_ipam.kube.projection.status_digest` of the controller's fields a patch of
    :func:`status_ops` writes: what the pool's digest is once it is stored as written."""
    fields: dict[str, Any] = {}
    for op in ops:
        path = op["path"]
        if path == "/status":
            fields.update(op["value"])
        elif path.startswith("/status/"):
            fields[path.removeprefix("/status/")] = op["value"]
    return status_digest(fields)


# -- the node agent's side ------------------------------------------------------------------------


def node_record(obj: PoolInfo | Mapping[str, Any]) -> NodeRecord | None:
    """What a pool's status publishes of its interfaces (the generic provider's durable state), or
    None for a pool naming no instance. A whole object is read directly (the list made at the start
    of a term keeps only this), without projecting it first."""
    if isinstance(obj, PoolInfo):
        name, spec, prefixes, ipv6 = obj.name, obj.spec, obj.prefixes, obj.ipv6_prefixes
    else:
        status = obj.get("status")
        interfaces = status.get("interfaces") if isinstance(status, Mapping) else None
        name, spec = str(obj.get("metadata", {}).get("name", "")), obj.get("spec")
        prefixes = interface_prefixes(interfaces, "prefixes")
        ipv6 = interface_prefixes(interfaces, "ipv6Prefixes")
    spec = spec if isinstance(spec, Mapping) else {}
    instance_id = spec.get("instanceID")
    if not isinstance(instance_id, str) or not instance_id:
        return None
    subnets = spec.get("subnetIDs") or []
    return NodeRecord(
        name=name,
        instance_id=instance_id,
        subnet_ids=tuple(s for s in subnets if isinstance(s, str)),
        prefixes=prefixes,
        ipv6_prefixes=ipv6,
    )


def ipv6_members(obj: Mapping[str, Any], count: int) -> list[tuple[str, str, str, str]]:
    """``(address, block, interface, block)`` for the first ``count`` addresses after the gateway of
    every IPv6 block an ENIPool's interfaces publish (``ipv6Prefixes``), in the status's order.
    Blocks that do not parse are skipped (the schema already refuses them)."""
    out: list[tuple[str, str, str, str]] = []
    for iface in (obj.get("status") or {}).get("interfaces") or []:
        if not isinstance(iface, Mapping):
            continue
        for text in iface.get("ipv6Prefixes") or []:
            try:
                block = ipaddress.IPv6Network(str(text))
            except ValueError:
                continue
            last = min(count, block.num_addresses - 2)
            base = block.network_address
            out.extend(
                (str(base + k), str(block), str(iface.get("id", "")), str(block)) for k in range(2, last + 2)
            )
    return out


@dataclasses.dataclass(frozen=True, slots=True)
class PoolInterface:
    """One interface of a node's pool as its ENIPool status publishes it, for the node side: what
    finds it as a device (the MAC address), what its route table derives from (device index and
    network card), and its subnet's CIDR (the subnet's route and router)."""

    id: str
    device_index: int
    network_card: int
    """0 when the status does not say (card 0, or a status written before cards were published)."""
    mac_address: str
    """The written form (``0a:1b:2c:3d:4e:5f``); ``""`` when the interface is no device, or the
    status was written before MAC addresses were published (the controller rewrites it once)."""
    subnet_id: str
    cidr: str
    """The subnet's CIDR from ``status.subnets``; ``""`` when the status does not give it."""
    primary_ip: str
    ipv6_prefixes: tuple[str, ...] = ()
    """The IPv6 prefixes delegated to it (``ipv6Prefixes``), those that parse."""


def pool_interfaces(obj: Mapping[str, Any]) -> list[PoolInterface]:
    """Every interface an ENIPool's status lists, in its order (device index order).

    An entry the CRD's schema would refuse (no id, a device index or card that is not an integer
    in bounds, a MAC address not in the written form of a device's) is left out whole: a status
    that bypassed the schema never gives the node side a device or a route table to act on. So is
    an interface of a type no pool fills (``efa-only``, ``trunk``, …): its device belongs to
    whatever made it, and the node side never configures it."""
    status = obj.get("status")
    status = status if isinstance(status, Mapping) else {}
    subnets = status.get("subnets")
    subnets = subnets if isinstance(subnets, Mapping) else {}
    out: list[PoolInterface] = []
    for entry in status.get("interfaces") or ():
        if not isinstance(entry, Mapping):
            continue
        iid, index, card = entry.get("id"), entry.get("deviceIndex"), entry.get("networkCard", 0)
        mac, subnet = entry.get("macAddress", ""), entry.get("subnet", "")
        if not (isinstance(iid, str) and iid and _integer(index) and _integer(card)):
            continue
        if not (0 <= card <= MAX_NETWORK_CARD and isinstance(mac, str) and isinstance(subnet, str)):
            continue
        if mac and not re.fullmatch(MAC_PATTERN, mac):
            continue
        if entry.get("interfaceType", "interface") not in FILLABLE_TYPES:
            continue
        where = subnets.get(subnet)
        cidr = where.get("cidr", "") if isinstance(where, Mapping) else ""
        primary = entry.get("primaryIP", "")
        out.append(
            PoolInterface(
                ipv6_prefixes=_ipv6_prefixes(entry.get("ipv6Prefixes")),
                id=iid,
                device_index=index,
                network_card=card,
                mac_address=mac,
                subnet_id=subnet,
                cidr=cidr if isinstance(cidr, str) else "",
                primary_ip=primary if isinstance(primary, str) else "",
            )
        )
    return out


def _ipv6_prefixes(value: object) -> tuple[str, ...]:
    """The IPv6 networks of a status list, in their canonical form; what does not parse is left out."""
    if not isinstance(value, list):
        return ()
    found = []
    for text in value:
        try:
            found.append(str(ipaddress.IPv6Network(text)))
        except (TypeError, ValueError):
            continue
    return tuple(found)


def _integer(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def pool_members(obj: Mapping[str, Any]) -> list[tuple[str, str, str, str]]:
    """``(address, cidr, interface, subnet)`` for every pool address of an ENIPool whose subnet's
    CIDR is known (the agent derives prefix length and gateway from it), in the status's order."""
    status = obj.get("status") or {}
    cidrs = {sid: (entry or {}).get("cidr", "") for sid, entry in (status.get("subnets") or {}).items()}
    out = []
    for address, entry in (status.get("pool") or {}).items():
        subnet = (entry or {}).get("subnet", "")
        if cidrs.get(subnet):
            out.append((address, cidrs[subnet], (entry or {}).get("interface", ""), subnet))
    return out


class StatusTooLarge(ValueError):
    """A status field would hold more entries than the CRD admits (``MAX_NODE_ADDRESSES``): no node
    has that many addresses, so the writer's state is wrong, and nothing is written."""

    def __init__(self, field: str, count: int, limit: int) -> None:
        super().__init__(f"status.{field} would hold {count} entries; the ENIPool CRD admits {limit}")
        self.field = field
        self.count = count
        self.limit = limit


def agent_status_patch(
    obj: Mapping[str, Any], *, used: Collection[str], answers: Mapping[str, ReleaseState]
) -> Obj | None:
    """The merge patch of the agent's own status fields (``used``, ``releaseAnswers``) taking
    ``obj`` to what the agent knows, conditional on its resourceVersion; None when nothing changes.

    Raises:
        StatusTooLarge: ``used`` or ``answers`` holds more than :data:`MAX_NODE_ADDRESSES`. Neither is
            truncated: a ``used`` cut short would let the controller release addresses in use.
    """
    for field, entries in (("used", used), ("releaseAnswers", answers)):
        if len(entries) > MAX_NODE_ADDRESSES:
            raise StatusTooLarge(field, len(entries), MAX_NODE_ADDRESSES)
    status = obj.get("status") or {}
    patch: dict[str, Any] = {}
    wanted_used = sorted(used, key=_address_order)
    if sorted(status.get("used") or (), key=_address_order) != wanted_used:
        patch["used"] = wanted_used
    before = status.get("releaseAnswers") or {}
    diff: dict[str, Any] = {a: str(s) for a, s in answers.items() if before.get(a) != str(s)}
    diff.update({a: None for a in before if a not in answers})
    if diff:
        patch["releaseAnswers"] = diff
    if not patch:
        return None
    return {"metadata": {"resourceVersion": obj.get("metadata", {}).get("resourceVersion")}, "status": patch}


def _address_order(address: str) -> tuple[int, int]:
    try:
        parsed = ipaddress.ip_address(address)
    except ValueError:
        return (9, 0)
    return (parsed.version, int(parsed))
