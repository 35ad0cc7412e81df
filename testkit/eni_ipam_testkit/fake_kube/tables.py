"""``meta.k8s.io/v1`` ``Table`` answers: what ``kubectl get`` prints, computed by the server.

A client asks for a Table with ``Accept: application/json;as=Table;v=v1;g=meta.k8s.io``. Each row
has the cells of the type's columns and, by ``includeObject`` (``Metadata`` by default, ``Object``
or ``None``), the object as ``PartialObjectMetadata`` or whole.

* Built-in kinds get the real printers' columns, computed from the object the same way for the
  fields the fake can hold: Nodes ``Name``, ``Status`` (the Ready condition, ``SchedulingDisabled``),
  ``Roles`` (``node-role.kubernetes.io/*`` labels), ``Age``, ``Version`` and, at priority 1 (``-o
  wide``), addresses and node info; Pods, Namespaces, ConfigMaps, Secrets, ServiceAccounts,
  Services, Deployments, DaemonSets, Leases, PodDisruptionBudgets, RBAC objects, Events and
  CustomResourceDefinitions likewise. Any other kind gets ``Name`` and ``Age``.
* Custom resources get ``Name`` and their CRD version's ``additionalPrinterColumns``, each evaluated
  by its JSONPath, with the first result converted by the column's type as the real server does
  (``integer``, ``number``, ``boolean``, ``date`` as an age such as ``5m``, ``string`` as printed).
  The JSONPath subset: ``.a.b``, ``.a\\.b`` (an escaped dot in a name, as in a label key),
  ``['a.b']``, ``[0]``, ``[*]`` and filters ``[?(@.type=="Ready")]`` (``==`` and ``!=`` against a
  quoted string or a number).

Ages are durations from ``creationTimestamp`` to the server's now, printed like apimachinery's
``HumanDuration`` (``59s``, ``5m3s``, ``3h``, ``2d4h``, ``3y``).
"""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from eni_ipam_testkit.fake_kube.resources import JSON, ResourceType, StatusError

_NAME_DESCRIPTION: Final = (
    "Name must be unique within a namespace. Is required when creating resources, although some resources "
    "may allow a client to request the generation of an appropriate name automatically."
)
_AGE_DESCRIPTION: Final = (
    "CreationTimestamp is a timestamp representing the server time when this object was created."
)


def parse_time(text: Any) -> datetime.datetime | None:
    if not isinstance(text, str):
        return None
    try:
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def human_duration(seconds: float) -> str:
    """apimachinery's ``duration.HumanDuration``."""
    whole = int(seconds)
    if whole < -1:
        return "<invalid>"
    if whole < 0:
        return "0s"
    if whole < 120:
        return f"{whole}s"
    minutes = whole // 60
    if minutes < 10:
        rest = whole % 60
        return f"{minutes}m" if rest == 0 else f"{minutes}m{rest}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = whole // 3600
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h" if rest == 0 else f"{hours}h{rest}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        rest = hours % 24
        return f"{hours // 24}d" if rest == 0 else f"{hours // 24}d{rest}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        rest = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if rest == 0 else f"{hours // 24 // 365}y{rest}d"
    return f"{hours // 24 // 365}y"


def _age(value: Any, now: datetime.datetime) -> str:
    when = parse_time(value)
    return "<unknown>" if when is None else human_duration((now - when).total_seconds())


# -- a small JSONPath ------------------------------------------------------------------------------

_TOKEN: Final = re.compile(
    r"""\.(?P<name>(?:[^.\[\]\\]|\\.)+)"""
    r"""|\[(?P<index>-?\d+|\*)\]"""
    r"""|\[['"](?P<quoted>[^'"]+)['"]\]"""
    r"""|\[\?\((?P<filter>[^)]*)\)\]"""
)
_FILTER: Final = re.compile(
    r"""^@(?P<path>(?:\.[^.=!\s]+)+)\s*(?P<op>==|!=)\s*(?P<value>"[^"]*"|'[^']*'|[-\d.]+)$"""
)


def jsonpath(obj: Any, path: str) -> list[Any]:
    """Every value ``path`` selects in ``obj``; raises ValueError for what the subset cannot parse."""
    text = path.strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1]
    text = text.removeprefix("$")
    values: list[Any] = [obj]
    position = 0
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None:
            raise ValueError(f"unsupported JSONPath {path!r} at {text[position:]!r}")
        position = match.end()
        values = [v for value in values for v in _step(value, match)]
    return values


def _step(value: Any, match: re.Match[str]) -> list[Any]:
    name = match["quoted"] if match["name"] is None else re.sub(r"\\(.)", r"\1", match["name"])
    if name is not None:
        return [value[name]] if isinstance(value, dict) and name in value else []
    if match["index"] is not None:
        if not isinstance(value, list):
            return []
        if match["index"] == "*":
            return list(value)
        index = int(match["index"])
        return [value[index]] if -len(value) <= index < len(value) else []
    condition = _FILTER.match(match["filter"].strip())
    if condition is None:
        raise ValueError(f"unsupported JSONPath filter {match['filter']!r}")
    raw = condition["value"]
    wanted: Any = raw[1:-1] if raw[0] in "'\"" else json.loads(raw)
    items = value if isinstance(value, list) else []
    selected = []
    for item in items:
        found = jsonpath(item, condition["path"])
        equal = bool(found) and found[0] == wanted
        if equal == (condition["op"] == "=="):
            selected.append(item)
    return selected


def _printed(value: Any) -> str:
    """A value as kubectl's JSONPath printer writes it (strings bare, the rest as JSON)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value, separators=(",", ":"))


def _custom_cell(column: Mapping[str, Any], obj: JSON, now: datetime.datetime) -> Any:
    try:
        results = jsonpath(obj, str(column.get("jsonPath", "")))
    except ValueError:
        return None
    if not results or results[0] is None:
        return None
    value, kind = results[0], column.get("type", "string")
    if kind == "string":
        return _printed(value)
    if kind == "integer" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(value)
    if kind == "number" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    if kind == "boolean" and isinstance(value, bool):
        return value
    if kind == "date" and isinstance(value, str):
        return "<invalid>" if parse_time(value) is None else _age(value, now)
    return None


# -- built-in printers ----------------------------------------------------------------------------

Column = tuple[str, str, int, Callable[[JSON, datetime.datetime], Any]]
"""(name, type, priority, cell)."""


def _get(obj: Any, *path: str) -> Any:
    for key in path:
        obj = obj.get(key) if isinstance(obj, dict) else None
    return obj


def _none(value: Any) -> Any:
    return "<none>" if value in (None, "", []) else value


def _age_column() -> Column:
    return ("Age", "string", 0, lambda o, now: _age(_get(o, "metadata", "creationTimestamp"), now))


def _node_status(node: JSON, _: datetime.datetime) -> str:
    ready = next((c for c in _get(node, "status", "conditions") or () if c.get("type") == "Ready"), None)
    status = {"True": "Ready", "False": "NotReady"}.get(str((ready or {}).get("status")), "Unknown")
    return status + (",SchedulingDisabled" if _get(node, "spec", "unschedulable") else "")


def _node_roles(node: JSON, _: datetime.datetime) -> str:
    roles = set()
    for key, value in (_get(node, "metadata", "labels") or {}).items():
        if key.startswith("node-role.kubernetes.io/") and key != "node-role.kubernetes.io/":
            roles.add(key.removeprefix("node-role.kubernetes.io/"))
        elif key in ("node-role.kubernetes.io", "kubernetes.io/role") and value:
            roles.add(value)
    return ",".join(sorted(roles)) or "<none>"


def _node_address(kind: str) -> Callable[[JSON, datetime.datetime], Any]:
    def cell(node: JSON, _: datetime.datetime) -> Any:
        addresses = _get(node, "status", "addresses") or ()
        return next((a.get("address") for a in addresses if a.get("type") == kind), "<none>")

    return cell


def _node_info(field: str) -> Callable[[JSON, datetime.datetime], Any]:
    return lambda node, _: _get(node, "status", "nodeInfo", field) or "<unknown>"


def _pod_ready(pod: JSON, _: datetime.datetime) -> str:
    containers = _get(pod, "spec", "containers") or ()
    ready = sum(1 for c in _get(pod, "status", "containerStatuses") or () if c.get("ready"))
    return f"{ready}/{len(containers)}"


def _pod_status(pod: JSON, _: datetime.datetime) -> str:
    if _get(pod, "metadata", "deletionTimestamp"):
        return "Terminating"
    return str(_get(pod, "status", "reason") or _get(pod, "status", "phase") or "Unknown")


def _restarts(pod: JSON, _: datetime.datetime) -> int:
    return sum(int(c.get("restartCount") or 0) for c in _get(pod, "status", "containerStatuses") or ())


def _count(*fields: str) -> Callable[[JSON, datetime.datetime], int]:
    return lambda obj, _: sum(len(obj.get(f) or ()) for f in fields)


def _field(*path: str, default: Any = "<none>") -> Callable[[JSON, datetime.datetime], Any]:
    def cell(obj: JSON, _: datetime.datetime) -> Any:
        value = _get(obj, *path)
        return default if value in (None, "") else value

    return cell


def _number(*path: str) -> Callable[[JSON, datetime.datetime], int]:
    return lambda obj, _: int(_get(obj, *path) or 0)


def _ports(service: JSON, _: datetime.datetime) -> str:
    ports = [f"{p.get('port')}/{p.get('protocol', 'TCP')}" for p in _get(service, "spec", "ports") or ()]
    return ",".join(ports) or "<none>"


def _selector(obj: JSON, _: datetime.datetime) -> str:
    selector = _get(obj, "spec", "template", "spec", "nodeSelector") or {}
    return ",".join(f"{k}={v}" for k, v in sorted(selector.items())) or "<none>"


def _role_ref(binding: JSON, _: datetime.datetime) -> str:
    ref = binding.get("roleRef") or {}
    return f"{ref.get('kind', '')}/{ref.get('name', '')}"


def _event_object(event: JSON, _: datetime.datetime) -> str:
    involved = event.get("involvedObject") or {}
    return f"{str(involved.get('kind', '')).lower()}/{involved.get('name', '')}"


def _last_seen(event: JSON, now: datetime.datetime) -> str:
    when = (
        event.get("lastTimestamp") or event.get("eventTime") or _get(event, "metadata", "creationTimestamp")
    )
    return _age(when, now)


def _created_at(obj: JSON, _: datetime.datetime) -> Any:
    return _get(obj, "metadata", "creationTimestamp")


_AGE: Final = _age_column()
_BUILTIN: Final[Mapping[str, tuple[Column, ...]]] = {
    "nodes": (
        ("Status", "string", 0, _node_status),
        ("Roles", "string", 0, _node_roles),
        _AGE,
        ("Version", "string", 0, _node_info("kubeletVersion")),
        ("Internal-IP", "string", 1, _node_address("InternalIP")),
        ("External-IP", "string", 1, _node_address("ExternalIP")),
        ("OS-Image", "string", 1, _node_info("osImage")),
        ("Kernel-Version", "string", 1, _node_info("kernelVersion")),
        ("Container-Runtime", "string", 1, _node_info("containerRuntimeVersion")),
    ),
    "pods": (
        ("Ready", "string", 0, _pod_ready),
        ("Status", "string", 0, _pod_status),
        ("Restarts", "string", 0, _restarts),
        _AGE,
        ("IP", "string", 1, _field("status", "podIP")),
        ("Node", "string", 1, _field("spec", "nodeName")),
        ("Nominated Node", "string", 1, _field("status", "nominatedNodeName")),
        ("Readiness Gates", "string", 1, lambda o, _: "<none>"),
    ),
    "namespaces": (("Status", "string", 0, _field("status", "phase", default="")), _AGE),
    "configmaps": (("Data", "integer", 0, _count("data", "binaryData")), _AGE),
    "secrets": (
        ("Type", "string", 0, _field("type", default="")),
        ("Data", "integer", 0, _count("data")),
        _AGE,
    ),
    "serviceaccounts": (("Secrets", "integer", 0, _count("secrets")), _AGE),
    "services": (
        ("Type", "string", 0, _field("spec", "type", default="ClusterIP")),
        ("Cluster-IP", "string", 0, _field("spec", "clusterIP")),
        ("External-IP", "string", 0, lambda o, _: "<none>"),
        ("Port(s)", "string", 0, _ports),
        _AGE,
    ),
    "deployments.apps": (
        (
            "Ready",
            "string",
            0,
            lambda o, _: f"{_number('status', 'readyReplicas')(o, _)}/{_number('spec', 'replicas')(o, _)}",
        ),
        ("Up-to-date", "integer", 0, _number("status", "updatedReplicas")),
        ("Available", "integer", 0, _number("status", "availableReplicas")),
        _AGE,
    ),
    "daemonsets.apps": (
        ("Desired", "integer", 0, _number("status", "desiredNumberScheduled")),
        ("Current", "integer", 0, _number("status", "currentNumberScheduled")),
        ("Ready", "integer", 0, _number("status", "numberReady")),
        ("Up-to-date", "integer", 0, _number("status", "updatedNumberScheduled")),
        ("Available", "integer", 0, _number("status", "numberAvailable")),
        ("Node Selector", "string", 0, _selector),
        _AGE,
    ),
    "leases.coordination.k8s.io": (
        ("Holder", "string", 0, _field("spec", "holderIdentity", default="")),
        _AGE,
    ),
    "poddisruptionbudgets.policy": (
        ("Min Available", "string", 0, _field("spec", "minAvailable", default="N/A")),
        ("Max Unavailable", "string", 0, _field("spec", "maxUnavailable", default="N/A")),
        ("Allowed Disruptions", "integer", 0, _number("status", "disruptionsAllowed")),
        _AGE,
    ),
    "roles.rbac.authorization.k8s.io": (("Created At", "string", 0, _created_at),),
    "clusterroles.rbac.authorization.k8s.io": (("Created At", "string", 0, _created_at),),
    "rolebindings.rbac.authorization.k8s.io": (("Role", "string", 0, _role_ref), _AGE),
    "clusterrolebindings.rbac.authorization.k8s.io": (("Role", "string", 0, _role_ref), _AGE),
    "customresourcedefinitions.apiextensions.k8s.io": (("Created At", "date", 0, _created_at),),
}
_EVENT_COLUMNS: Final[tuple[Column, ...]] = (
    ("Last Seen", "string", 0, _last_seen),
    ("Type", "string", 0, _field("type", default="")),
    ("Reason", "string", 0, _field("reason", default="")),
    ("Object", "string", 0, _event_object),
    ("Message", "string", 0, _field("message", default="")),
)


def accepts_table(accept: str) -> bool:
    """Whether the first acceptable form in an ``Accept`` header is a ``meta.k8s.io/v1`` Table."""
    for entry in accept.split(","):
        params = dict(part.strip().split("=", 1) for part in entry.split(";")[1:] if "=" in part)
        if params.get("as") == "Table" and params.get("g") == "meta.k8s.io":
            if params.get("v") == "v1":
                return True
            continue
        return False
    return False


def _definitions(rtype: ResourceType) -> list[JSON]:
    def column(name: str, kind: str, priority: int, description: str = "", fmt: str = "") -> JSON:
        return {"name": name, "type": kind, "format": fmt, "description": description, "priority": priority}

    columns = [column("Name", "string", 0, _NAME_DESCRIPTION, "name")]
    if rtype.custom:
        for spec in rtype.printer_columns:
            columns.append(
                column(
                    str(spec.get("name", "")),
                    str(spec.get("type", "string")),
                    int(spec.get("priority", 0)),
                    str(spec.get("description", "")),
                    str(spec.get("format", "")),
                )
            )
        return columns
    if rtype.resource == "events":
        return [column(name, kind, priority) for name, kind, priority, _ in _EVENT_COLUMNS]
    for name, kind, priority, _ in _BUILTIN.get(rtype.resource, (_AGE,)):
        columns.append(column(name, kind, priority, _AGE_DESCRIPTION if name == "Age" else ""))
    return columns


def _cells(rtype: ResourceType, obj: JSON, now: datetime.datetime) -> list[Any]:
    name = _get(obj, "metadata", "name")
    if rtype.custom:
        return [name, *(_custom_cell(c, obj, now) for c in rtype.printer_columns)]
    if rtype.resource == "events":
        return [cell(obj, now) for _, _, _, cell in _EVENT_COLUMNS]
    return [name, *(cell(obj, now) for _, _, _, cell in _BUILTIN.get(rtype.resource, (_AGE,)))]


def _row_object(obj: JSON, include: str) -> JSON | None:
    if include == "Object":
        return obj
    if include == "None":
        return None
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata", {}),
    }


def table(
    rtype: ResourceType,
    objects: Sequence[JSON],
    now: datetime.datetime,
    *,
    include_object: str = "Metadata",
    list_metadata: JSON | None = None,
) -> JSON:
    """The ``Table`` of ``objects`` (already rendered at ``rtype``'s version)."""
    if include_object not in ("Metadata", "Object", "None"):
        raise StatusError(400, f'includeObject: Unsupported value: "{include_object}"')
    rows = []
    for obj in objects:
        row: JSON = {"cells": _cells(rtype, obj, now)}
        included = _row_object(obj, include_object)
        if included is not None:
            row["object"] = included
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_metadata or {},
        "columnDefinitions": _definitions(rtype),
        "rows": rows,
    }
