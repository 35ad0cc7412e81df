"""ENIPool custom resources ↔ the core model: pure functions, no I/O.

An ENIPool is named after its Node. Its spec is :class:`~eni_ipam.core.spec.PoolSpec`: the node
spec in camelCase (the model's aliases) plus the instance; its status has two writers that never touch
each other's fields:

* the controller: ``pool``, ``subnets``, ``release``, ``interfaces``, ``stats``, ``message``,
  ``conditions``, ``observedGeneration`` — written by :func:`status_patch` as a JSON merge patch;
* the node agent: ``used`` and ``releaseAnswers`` — read by :func:`resource_from_pool`.

The CRD (deploy/helm/eni-ipam/crds/) rejects bad values; this module still validates what it reads,
because a cluster may run without the CRD's schema (or an older one), and names the bad field.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import re
from collections.abc import Collection, Mapping
from typing import Any

from eni_ipam._infra.config import validate
from eni_ipam.core.model import Interface, NodeStatus, ReleaseState
from eni_ipam.core.records import NodeRecord
from eni_ipam.core.spec import NodeResource, NodeSpec, PoolSpec
from eni_ipam.errors import ConfigError
from eni_ipam.kube.api import ENIPOOLS, Obj

FINALIZER = "eni-ipam.io/pool"
"""Holds an ENIPool until the controller stopped maintaining its node (no address is handed out,
and so forgotten, after the pool's record is gone)."""

ZONE_LABEL = "topology.kubernetes.io/zone"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"

_AGENT_ANSWERS = (ReleaseState.READY, ReleaseState.DO_NOT_RELEASE)


SPEC_KEYS = {name: (field.alias or name) for name, field in PoolSpec.model_fields.items()}
"""Node spec field → ENIPool spec key, for every field the spec carries (``name`` is metadata.name)."""


# -- reading -------------------------------------------------------------------------------------


def spec_from_pool(obj: Mapping[str, Any]) -> PoolSpec:
    """The spec an ENIPool asks for: the node spec (defaults resolved) and its instance.

    Raises:
        ConfigError: a spec value is invalid; ``field`` is ``enipools/NAME.spec.key``.
    """
    name = obj["metadata"]["name"]
    raw = obj.get("spec") or {}
    where = f"enipools/{name}.spec"
    if isinstance(raw, Mapping):
        raw = {k: v for k, v in raw.items() if v is not None}  # a null is an absent key (merge patch)
    return validate(PoolSpec, raw, path=where, by_alias=True)


def resource_from_pool(obj: Mapping[str, Any], *, pending_pods: int = 0) -> NodeResource:
    """The node as the manager sees it: the spec plus what the node agent reports in status."""
    name = obj["metadata"]["name"]
    spec = spec_from_pool(obj)
    where = f"enipools/{name}.status"
    status = obj.get("status") or {}
    if not isinstance(status, Mapping):
        raise ConfigError(where, f"expected a mapping, got {type(status).__name__}")
    raw_used = status.get("used") or []
    if not isinstance(raw_used, list):
        raise ConfigError(f"{where}.used", f"expected a list of addresses, got {type(raw_used).__name__}")
    used = sorted({a for a in raw_used if isinstance(a, str)})  # the agent's report, once per address
    raw_answers = status.get("releaseAnswers") or {}
    if not isinstance(raw_answers, Mapping):
        raise ConfigError(
            f"{where}.releaseAnswers", f"expected a mapping of addresses, got {type(raw_answers).__name__}"
        )
    answers = {
        address: ReleaseState(answer)
        for address, answer in raw_answers.items()
        if isinstance(address, str) and answer in _AGENT_ANSWERS
    }
    return NodeResource(
        name=name,
        instance_id=spec.instance_id,
        spec=spec.fields(),
        used=len(used),
        in_use=frozenset(used),
        pending_pods=pending_pods,
        release_answers=answers,
    )


def release_marks(obj: Mapping[str, Any]) -> dict[str, ReleaseState]:
    """The controller's handshake entries as last written (a new leader picks them up)."""
    marks = (obj.get("status") or {}).get("release") or {}
    return {a: ReleaseState(s) for a, s in marks.items() if s in (ReleaseState.MARKED, ReleaseState.RELEASED)}


def being_deleted(obj: Mapping[str, Any]) -> bool:
    return bool(obj.get("metadata", {}).get("deletionTimestamp"))


# -- Nodes → ENIPools ------------------------------------------------------------------------------

_PROVIDER_ID = re.compile(r"^(?P<scheme>[a-z0-9-]+)://(?P<path>.+)$")


def instance_id_from_provider_id(provider_id: str) -> str:
    """The cloud instance of a Node's ``spec.providerID``.

    ``aws:///us-east-1a/i-0abc`` → ``i-0abc``; ``azure:///subscriptions/…/virtualMachines/vm-1``
    → the full resource id, lowercased (Azure names VMs by it); any other scheme → the path without leading
    slashes. Empty when the provider id is missing or malformed (the cloud controller has not
    initialised the Node yet).
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


def provider_id_scheme(node: Mapping[str, Any]) -> str:
    """The scheme of a Node's ``spec.providerID`` (``aws``, ``azure``, ``gce``), or ``""``."""
    match = _PROVIDER_ID.match((node.get("spec") or {}).get("providerID", "") or "")
    return match.group("scheme") if match else ""


def instance_id_of(node: Mapping[str, Any], instance_ids: str = "provider-id") -> str:
    """The instance a Node's pool names: from its provider id, or its name (``node-name``)."""
    if instance_ids == "node-name":
        return str(node.get("metadata", {}).get("name", ""))
    return instance_id_from_provider_id((node.get("spec") or {}).get("providerID", ""))


DEFAULTS_ANNOTATION = "eni-ipam.io/defaults"
"""The spec values the controller last wrote from ``node_defaults`` (JSON, ENIPool keys). A field
holding the value recorded here follows ``node_defaults``; a field someone set to another value is
theirs, and the controller leaves it alone (docs/configuration.md, ``node_defaults``)."""


def pool_for_node(
    node: Mapping[str, Any], defaults: NodeSpec | None, *, instance_ids: str = "provider-id"
) -> Obj | None:
    """The ENIPool to create for ``node`` (spec from ``defaults``, the keys written there, recorded in
    :data:`DEFAULTS_ANNOTATION`), or None while the Node has no instance id. Owned by the Node, so it
    goes when the Node goes."""
    metadata = node.get("metadata", {})
    instance_id = instance_id_of(node, instance_ids)
    if not instance_id:
        return None
    labels = metadata.get("labels") or {}
    spec: dict[str, Any] = {"instanceID": instance_id}
    if labels.get(INSTANCE_TYPE_LABEL):
        spec["instanceType"] = labels[INSTANCE_TYPE_LABEL]
    if labels.get(ZONE_LABEL):
        spec["zone"] = labels[ZONE_LABEL]
    written = defaults.as_pool_spec() if defaults is not None else {}
    spec.update(written)
    return {
        "apiVersion": ENIPOOLS.api_version,
        "kind": ENIPOOLS.kind,
        "metadata": {
            "name": metadata["name"],
            "labels": {"app.kubernetes.io/managed-by": "eni-ipam"},
            "annotations": {DEFAULTS_ANNOTATION: json.dumps(written, sort_keys=True)},
            "finalizers": [FINALIZER],
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": metadata["name"], "uid": metadata.get("uid", "")}
            ],
        },
        "spec": spec,
    }


def recorded_defaults(pool: Mapping[str, Any]) -> dict[str, Any] | None:
    """The defaults the controller last wrote into ``pool``, or None when it recorded none (a pool
    made by hand, or by a version that did not record them: every field of it is people's)."""
    text = ((pool.get("metadata") or {}).get("annotations") or {}).get(DEFAULTS_ANNOTATION)
    if not isinstance(text, str):
        return None
    try:
        recorded = json.loads(text)
    except ValueError:
        return None
    return recorded if isinstance(recorded, dict) else None


def defaults_patch(pool: Mapping[str, Any], defaults: NodeSpec | None) -> Obj | None:
    """A merge patch bringing the fields that follow ``node_defaults`` to today's defaults, or None.

    A field follows the defaults while it holds the value the controller last wrote (recorded in
    :data:`DEFAULTS_ANNOTATION`); one that someone changed or removed is theirs and is left alone,
    as is one set before its default existed. A new default is written where the field is unset; a
    default that is no longer set is removed from the fields that still hold it. A pool with no
    record is left alone entirely."""
    recorded = recorded_defaults(pool)
    if recorded is None:
        return None
    current: Mapping[str, Any] = pool.get("spec") or {}
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


def node_fields_patch(
    pool: Mapping[str, Any], node: Mapping[str, Any], *, instance_ids: str = "provider-id"
) -> Obj | None:
    """A merge patch bringing the pool's Node-derived fields (instance, type, zone) up to date, or
    None. People's edits to the rest of the spec are never overwritten."""
    wanted = pool_for_node(node, None, instance_ids=instance_ids)
    if wanted is None:
        return None
    current = pool.get("spec") or {}
    changes = {k: v for k, v in wanted["spec"].items() if current.get(k) != v}
    return {"spec": changes} if changes else None


# -- status ---------------------------------------------------------------------------------------


def _interface(iface: Interface) -> dict[str, Any]:
    return {
        "id": iface.id,
        "deviceIndex": iface.device_index,
        "subnet": iface.subnet_id,
        "primaryIP": iface.primary_ip,
        "securityGroups": list(iface.security_groups),
        "addresses": len(iface.addresses),
        "prefixes": list(iface.prefixes),
        **({"ipv6Prefixes": list(iface.ipv6_prefixes)} if iface.ipv6_prefixes else {}),
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
    return [("Ready", *ready), ("AtCapacity", *capacity)]


def desired_status(status: NodeStatus, *, generation: int) -> dict[str, Any]:
    """The controller-owned status fields for ``status`` (conditions without their times)."""
    s = status.stats
    return {
        "pool": {
            e.address: {
                "interface": e.interface_id,
                "subnet": e.subnet_id,
                **({"prefix": e.prefix} if e.prefix else {}),
            }
            for e in status.pool
        },
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


def status_patch(status: NodeStatus, current: Mapping[str, Any], *, now: datetime.datetime) -> Obj | None:
    """The JSON merge patch taking ``current`` (the ENIPool as last read) to ``status``, or None
    when the controller's fields already say so. Maps drop vanished keys with explicit nulls; a
    condition keeps its ``lastTransitionTime`` unless its status changed. The patch carries the
    object's resourceVersion, so it applies only to the version it was computed from."""
    generation = int(current.get("metadata", {}).get("generation") or 0)
    old: Mapping[str, Any] = current.get("status") or {}
    desired = desired_status(status, generation=generation)
    patch: dict[str, Any] = {}
    for key, value in desired.items():
        before = old.get(key)
        if key in ("pool", "release", "subnets"):
            before = before or {}
            diff = {}
            for k, v in value.items():
                was = before.get(k)
                if was == v:
                    continue
                if isinstance(v, dict) and isinstance(
                    was, dict
                ):  # merge patch merges entries: null what went
                    v = {**dict.fromkeys(set(was) - set(v)), **v}
                diff[k] = v
            diff.update({k: None for k in before if k not in value})
            if diff:
                patch[key] = diff
        elif before != value:
            patch[key] = value
    stamp = now.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    previous = {c.get("type"): c for c in old.get("conditions") or ()}
    conditions = []
    for kind, ok, reason, message in _conditions(status):
        text = "True" if ok else "False"
        was = previous.get(kind) or {}
        same = was.get("status") == text
        conditions.append(
            {
                "type": kind,
                "status": text,
                "reason": reason,
                "message": message,
                "lastTransitionTime": was.get("lastTransitionTime", stamp) if same else stamp,
                "observedGeneration": generation,
            }
        )
    if conditions != list(old.get("conditions") or ()):
        patch["conditions"] = conditions
    if not patch:
        return None
    version = current.get("metadata", {}).get("resourceVersion")
    return {"metadata": {"resourceVersion": version}, "status": patch}


# -- the node agent's side ------------------------------------------------------------------------


def node_record(obj: Mapping[str, Any]) -> NodeRecord | None:
    """What a pool's status publishes of its interfaces (the generic provider's durable state), or
    None for a pool naming no instance."""
    spec = obj.get("spec") or {}
    instance_id = spec.get("instanceID")
    if not isinstance(instance_id, str) or not instance_id:
        return None
    prefixes: list[str] = []
    ipv6: list[str] = []
    for iface in (obj.get("status") or {}).get("interfaces") or []:
        if isinstance(iface, Mapping):
            prefixes.extend(p for p in iface.get("prefixes") or [] if isinstance(p, str))
            ipv6.extend(p for p in iface.get("ipv6Prefixes") or [] if isinstance(p, str))
    subnets = spec.get("subnetIDs") or []
    return NodeRecord(
        name=str(obj.get("metadata", {}).get("name", "")),
        instance_id=instance_id,
        subnet_ids=tuple(s for s in subnets if isinstance(s, str)),
        prefixes=tuple(prefixes),
        ipv6_prefixes=tuple(ipv6),
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


def agent_status_patch(
    obj: Mapping[str, Any], *, used: Collection[str], answers: Mapping[str, ReleaseState]
) -> Obj | None:
    """The merge patch of the agent's own status fields (``used``, ``releaseAnswers``) taking
    ``obj`` to what the agent knows, conditional on its resourceVersion; None when nothing changes."""
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
