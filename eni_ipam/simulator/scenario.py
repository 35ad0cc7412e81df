"""Scenario files: parsing and strict validation (docs/scenarios.md is the user-facing spec).

The format is a stable interface: keys are only ever added. Every error is a
:class:`~eni_ipam.core.errors.ScenarioError` whose ``path`` names the offending key
(``steps[3].expect.node1.available``), raised before anything runs.
"""

from __future__ import annotations

import copy
import dataclasses
import ipaddress
import re
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from eni_ipam.core.config import (
    Settings,
    load_yaml_file,
    parse_duration,
    plain_data_problem,
    settings_from_mapping,
)
from eni_ipam.core.errors import ConfigError, ScenarioError
from eni_ipam.core.model import NodeSpec, frozen_tags
from providers.generic.settings import GenericSettings, generic_settings_from_mapping

NODE_SPEC_KEYS = {
    "pre_allocate": int,
    "min_allocate": int,
    "max_allocate": int,
    "max_above_watermark": int,
    "first_interface_index": int,
    "subnet_ids": list,
    "subnet_tags": dict,
    "security_groups": list,
    "security_group_tags": dict,
    "exclude_interface_tags": dict,
    "disable_prefix_delegation": bool,
    "delete_on_termination": bool,
}
NODE_STATE_KEYS = {"used": int, "pending_pods": int}
NODE_EXPECT_KEYS = {
    "available": int,
    "used": int,
    "needed": int,
    "excess": int,
    "interfaces": int,
    "prefixes": int,
    "running": bool,
    "addresses_by_index": dict,
    "subnet_by_index": dict,
    "security_groups_by_index": dict,
    "release_ips": int,
}
GENERIC = "generic"
"""Marks the (empty) cloud declaration of a generic-provider scenario."""
STEP_KINDS = ("converge", "advance", "expect", "set", "cloud", "add_node", "remove_node")


@dataclasses.dataclass(frozen=True)
class NodeEntry:
    spec: NodeSpec
    used: int = 0
    pending_pods: int = 0


@dataclasses.dataclass(frozen=True)
class Step:
    kind: str
    value: Any
    path: str


@dataclasses.dataclass(frozen=True)
class Scenario:
    settings: Settings
    cloud: Mapping[str, Any]
    nodes: tuple[NodeEntry, ...]
    steps: tuple[Step, ...]
    seed: int = 0
    generic: GenericSettings | None = None
    """Set for a generic-provider scenario (section ``generic:`` instead of ``cloud:``)."""


# --- small typed readers -------------------------------------------------------------------------


def _mapping(
    value: Any, path: str, *, allowed: set[str] | None = None, required: tuple[str, ...] = ()
) -> dict[Any, Any]:
    if not isinstance(value, Mapping):
        raise ScenarioError(path, f"expected a mapping, got {_kind(value)}")
    for key in value:
        if not isinstance(key, str | int):
            raise ScenarioError(path, f"invalid key {key!r}")
        if allowed is not None and key not in allowed:
            raise ScenarioError(_join(path, key), f"unknown key (allowed: {', '.join(sorted(allowed))})")
    for key in required:
        if key not in value:
            raise ScenarioError(_join(path, key), "required")
    return dict(value)


def _list(value: Any, path: str) -> list[Any]:
    if not isinstance(value, list):
        raise ScenarioError(path, f"expected a list, got {_kind(value)}")
    return value


def _int(value: Any, path: str, *, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ScenarioError(path, f"expected an integer, got {_kind(value)} {value!r}")
    if minimum is not None and value < minimum:
        raise ScenarioError(path, f"must be at least {minimum}, got {value}")
    return value


def _str(value: Any, path: str) -> str:
    if not isinstance(value, str) or not value:
        raise ScenarioError(path, f"expected a non-empty string, got {_kind(value)} {value!r}")
    return value


def _bool(value: Any, path: str) -> bool:
    if not isinstance(value, bool):
        raise ScenarioError(path, f"expected true or false, got {value!r}")
    return value


def _tags(value: Any, path: str) -> dict[str, str]:
    tags = _mapping(value, path)
    for k, v in tags.items():
        if not isinstance(v, str | int | float) or isinstance(v, bool):
            raise ScenarioError(_join(path, k), f"expected a string, got {_kind(v)}")
    return {str(k): str(v) for k, v in tags.items()}


def _str_list(value: Any, path: str) -> list[str]:
    return [_str(v, f"{path}[{n}]") for n, v in enumerate(_list(value, path))]


def _duration(value: Any, path: str) -> float:
    try:
        return parse_duration(value, path)
    except ConfigError as exc:
        raise ScenarioError(path, exc.message) from None


def _cidr(value: Any, path: str) -> ipaddress.IPv4Network:
    try:
        return ipaddress.IPv4Network(_str(value, path))
    except ValueError as exc:
        raise ScenarioError(path, f"not an IPv4 CIDR: {exc}") from None


def _ref(value: Any, path: str, known: Collection[str], noun: str) -> str:
    """A string naming something that must already exist (a VPC, subnet, group, instance, node)."""
    name = _str(value, path)
    if name not in known:
        raise ScenarioError(path, f"unknown {noun} {name!r}")
    return name


def _new(value: Any, path: str, taken: Collection[str], noun: str) -> str:
    """A string naming something new: it must not clash with what already exists."""
    name = _str(value, path)
    if name in taken:
        raise ScenarioError(path, f"duplicate {noun} {name!r}")
    return name


def _kind(value: Any) -> str:
    return "nothing" if value is None else type(value).__name__


def _join(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


# --- sections --------------------------------------------------------------------------------------


def read_cloud(raw: Any) -> dict[str, Any]:
    """The ``cloud:`` section, validated (also the run configuration's ``sim.cloud``)."""
    cloud = _mapping(raw, "cloud", allowed={"vpcs", "subnets", "security_groups", "instances"})
    vpcs: dict[str, ipaddress.IPv4Network] = {}
    for n, v in enumerate(_list(cloud.get("vpcs", []), "cloud.vpcs")):
        p = f"cloud.vpcs[{n}]"
        v = _mapping(v, p, allowed={"id", "cidr"}, required=("id", "cidr"))
        vpcs[_new(v["id"], f"{p}.id", vpcs, "VPC")] = _cidr(v["cidr"], f"{p}.cidr")
    subnets: dict[str, dict[str, Any]] = {}
    for n, s in enumerate(_list(cloud.get("subnets", []), "cloud.subnets")):
        p = f"cloud.subnets[{n}]"
        s = _mapping(
            s,
            p,
            allowed={"id", "vpc", "zone", "cidr", "tags", "available"},
            required=("id", "vpc", "zone", "cidr"),
        )
        sid = _new(s["id"], f"{p}.id", subnets, "subnet")
        vpc = _ref(s["vpc"], f"{p}.vpc", vpcs, "VPC")
        cidr = _cidr(s["cidr"], f"{p}.cidr")
        if not cidr.subnet_of(vpcs[vpc]):
            raise ScenarioError(f"{p}.cidr", f"{cidr} is not inside VPC {vpc} ({vpcs[vpc]})")
        if cidr.prefixlen > 28:
            raise ScenarioError(f"{p}.cidr", "subnets must be /28 or larger")
        subnets[sid] = {
            "id": sid,
            "vpc": vpc,
            "zone": _str(s["zone"], f"{p}.zone"),
            "cidr": str(cidr),
            "tags": _tags(s.get("tags", {}), f"{p}.tags"),
            "available": _int(s["available"], f"{p}.available", minimum=0) if "available" in s else None,
        }
    groups: dict[str, dict[str, Any]] = {}
    for n, g in enumerate(_list(cloud.get("security_groups", []), "cloud.security_groups")):
        p = f"cloud.security_groups[{n}]"
        g = _mapping(g, p, allowed={"id", "vpc", "tags"}, required=("id", "vpc"))
        vpc = _ref(g["vpc"], f"{p}.vpc", vpcs, "VPC")
        gid = _new(g["id"], f"{p}.id", groups, "security group")
        groups[gid] = {"id": gid, "vpc": vpc, "tags": _tags(g.get("tags", {}), f"{p}.tags")}
    instances: dict[str, dict[str, Any]] = {}
    for n, i in enumerate(_list(cloud.get("instances", []), "cloud.instances")):
        p = f"cloud.instances[{n}]"
        i = _mapping(
            i,
            p,
            allowed={"id", "type", "subnet", "security_groups", "interfaces", "running"},
            required=("id", "type", "subnet"),
        )
        iid = _new(i["id"], f"{p}.id", instances, "instance")
        subnet = _ref(i["subnet"], f"{p}.subnet", subnets, "subnet")
        sgs = [
            _ref(sg, f"{p}.security_groups[{k}]", groups, "security group")
            for k, sg in enumerate(_list(i.get("security_groups", []), f"{p}.security_groups"))
        ]
        interfaces = []
        seen: set[int] = set()
        for k, f in enumerate(_list(i.get("interfaces", []), f"{p}.interfaces")):
            q = f"{p}.interfaces[{k}]"
            f = _mapping(
                f, q, allowed={"index", "subnet", "secondary_ips", "prefixes", "tags"}, required=("index",)
            )
            index = _int(f["index"], f"{q}.index", minimum=0)
            if index in seen:
                raise ScenarioError(f"{q}.index", f"device index {index} declared twice")
            seen.add(index)
            fsubnet = _ref(f.get("subnet", subnet), f"{q}.subnet", subnets, "subnet")
            interfaces.append(
                {
                    "index": index,
                    "subnet": fsubnet,
                    "secondary_ips": _int(f.get("secondary_ips", 0), f"{q}.secondary_ips", minimum=0),
                    "prefixes": _int(f.get("prefixes", 0), f"{q}.prefixes", minimum=0),
                    "tags": _tags(f.get("tags", {}), f"{q}.tags"),
                }
            )
        if interfaces and 0 not in seen:
            raise ScenarioError(f"{p}.interfaces", "the primary interface (index 0) must be declared")
        instances[iid] = {
            "id": iid,
            "type": _str(i["type"], f"{p}.type"),
            "subnet": subnet,
            "security_groups": sgs,
            "interfaces": interfaces,
            "running": _bool(i.get("running", True), f"{p}.running"),
        }
    return {"vpcs": vpcs, "subnets": subnets, "security_groups": groups, "instances": instances}


def spec_fields(values: Mapping[str, Any], path: str) -> dict[str, Any]:
    """The node spec keys among ``values``, validated, as :class:`NodeSpec` keyword arguments."""
    out: dict[str, Any] = {}
    for key, kind in NODE_SPEC_KEYS.items():
        if key not in values:
            continue
        p = _join(path, key)
        raw = values[key]
        if kind is int:
            out[key] = _int(raw, p, minimum=None if key == "pre_allocate" else 0)
        elif kind is bool:
            out[key] = _bool(raw, p)
        elif kind is list:
            out[key] = tuple(_str_list(raw, p))
        else:
            out[key] = frozen_tags(_tags(raw, p))
    return out


def _read_node(raw: Any, path: str, cloud: Mapping[str, Any]) -> NodeEntry:
    allowed = {"name", "instance", *NODE_SPEC_KEYS, *NODE_STATE_KEYS}
    generic = cloud.get(GENERIC, False)
    node = _mapping(raw, path, allowed=allowed, required=("name",) if generic else ("name", "instance"))
    name = _str(node["name"], f"{path}.name")
    if generic:  # a generic node is its own instance
        instance = _str(node.get("instance", name), f"{path}.instance")
    else:
        instance = _ref(node["instance"], f"{path}.instance", cloud["instances"], "instance")
    spec = NodeSpec(name=name, instance_id=instance, **spec_fields(node, path))
    return NodeEntry(
        spec=spec,
        used=_int(node.get("used", 0), f"{path}.used", minimum=0),
        pending_pods=_int(node.get("pending_pods", 0), f"{path}.pending_pods", minimum=0),
    )


def _read_step(raw: Any, path: str, names: set[str], cloud: Mapping[str, Any]) -> Step:
    step = _mapping(raw, path)
    if len(step) != 1:
        raise ScenarioError(path, f"a step has exactly one of: {', '.join(STEP_KINDS)}")
    kind, value = next(iter(step.items()))
    p = _join(path, kind)
    if kind in ("converge", "advance"):
        return Step(kind, _duration(value, p), p)
    if kind == "remove_node":
        name = _ref(value, p, names, "node")
        names.discard(name)
        return Step(kind, name, p)
    if kind == "add_node":
        entry = _read_node(value, p, cloud)
        names.add(_new(entry.spec.name, f"{p}.name", names, "node"))
        return Step(kind, entry, p)
    if kind == "set":
        changes = _mapping(value, p)
        for name, fields in changes.items():
            q = _join(p, _ref(name, _join(p, name), names, "node"))
            fields = _mapping(fields, q, allowed={*NODE_SPEC_KEYS, *NODE_STATE_KEYS})
            for key in NODE_STATE_KEYS:
                if key in fields:
                    _int(fields[key], _join(q, key), minimum=0)
            changes[name] = fields | spec_fields(fields, q)
        return Step(kind, changes, p)
    if kind == "cloud":
        if cloud.get(GENERIC):
            raise ScenarioError(p, "the generic provider has no cloud to change")
        return Step(kind, _read_cloud_change(value, p, cloud), p)
    if kind == "expect":
        return Step(kind, _read_expect(value, p, names), p)
    raise ScenarioError(p, f"unknown step (known: {', '.join(STEP_KINDS)})")


def _read_cloud_change(value: Any, path: str, cloud: Mapping[str, Any]) -> dict[str, Any]:
    change = _mapping(value, path, allowed={"subnets", "instances", "fail", "latency"})
    for sid, fields in _mapping(change.get("subnets", {}), f"{path}.subnets").items():
        q = f"{path}.subnets.{sid}"
        _ref(sid, q, cloud["subnets"], "subnet")
        fields = _mapping(fields, q, allowed={"available", "tags"})
        if "available" in fields:
            _int(fields["available"], f"{q}.available", minimum=0)
        if "tags" in fields:
            fields["tags"] = _tags(fields["tags"], f"{q}.tags")
        change["subnets"][sid] = fields
    for iid, fields in _mapping(change.get("instances", {}), f"{path}.instances").items():
        q = f"{path}.instances.{iid}"
        _ref(iid, q, cloud["instances"], "instance")
        fields = _mapping(fields, q, allowed={"state"}, required=("state",))
        if fields["state"] not in ("running", "stopped", "terminated"):
            raise ScenarioError(f"{q}.state", "expected running, stopped or terminated")
    for op, fields in _mapping(change.get("fail", {}), f"{path}.fail").items():
        q = f"{path}.fail.{op}"
        fields = _mapping(fields, q, allowed={"count", "code", "message"}, required=("code",))
        _int(fields.get("count", 1), f"{q}.count", minimum=1)
        _str(fields["code"], f"{q}.code")
    latency = _mapping(change.get("latency", {}), f"{path}.latency")
    change["latency"] = {op: _duration(v, f"{path}.latency.{op}") for op, v in latency.items()}
    return change


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"([^"]*)"\s*,?')


def parse_sample(text: str) -> tuple[str, dict[str, str]]:
    """``eni_ipam_nodes{category="total"}`` → (``eni_ipam_nodes``, {category: total})."""
    m = _SAMPLE.match(text.strip())
    if not m:
        raise ValueError(f"not a metric sample name: {text!r}")
    return m.group(1), dict(_LABEL.findall(m.group(2) or ""))


def _index_value(field: str, value: Any, path: str) -> None:
    """A ``*_by_index`` expectation: a count, a subnet id, or security group ids."""
    if field == "addresses_by_index":
        _int(value, path, minimum=0)
    elif field == "subnet_by_index":
        _str(value, path)
    elif isinstance(value, list):
        for n, group in enumerate(value):
            _str(group, f"{path}[{n}]")
    else:
        _str(value, path)


def _read_expect(value: Any, path: str, names: set[str]) -> dict[str, Any]:
    expect = _mapping(value, path)
    for key, fields in expect.items():
        q = _join(path, key)
        if key == "api_calls":
            for op, count in _mapping(fields, q).items():
                _int(count, _join(q, op), minimum=0)
        elif key == "metrics":
            for sample, number in _mapping(fields, q).items():
                try:
                    parse_sample(str(sample))
                except ValueError as exc:
                    raise ScenarioError(_join(q, sample), str(exc)) from None
                if isinstance(number, bool) or not isinstance(number, int | float):
                    raise ScenarioError(_join(q, sample), f"expected a number, got {_kind(number)}")
        elif key in names:
            fields = _mapping(fields, q, allowed=set(NODE_EXPECT_KEYS))
            for field, kind in NODE_EXPECT_KEYS.items():
                if field not in fields:
                    continue
                r = _join(q, field)
                if kind is int:
                    _int(fields[field], r, minimum=0)
                elif kind is bool:
                    _bool(fields[field], r)
                else:
                    for idx, wanted in _mapping(fields[field], r).items():
                        _int(idx, _join(r, idx), minimum=0)
                        _index_value(field, wanted, _join(r, idx))
        else:
            raise ScenarioError(q, "not a node of the scenario at this step, nor api_calls / metrics")
    return expect


def parse_scenario(data: Any) -> Scenario:
    """Validate plain data (a loaded YAML document) into a :class:`Scenario`. The document is never
    changed."""
    problem = plain_data_problem(data)
    if problem:
        raise ScenarioError("", f"the scenario {problem}")
    data = copy.deepcopy(data)  # validation normalises values in place; the caller's stays as given
    top = _mapping(data, "", allowed={"settings", "cloud", "generic", "nodes", "steps", "seed"})
    if ("cloud" in top) == ("generic" in top):
        raise ScenarioError("cloud", "required: exactly one of cloud (the in-memory EC2) and generic")
    try:
        settings = settings_from_mapping(top.get("settings"), path="settings")
        generic = generic_settings_from_mapping(top["generic"]) if "generic" in top else None
    except ConfigError as exc:
        raise ScenarioError(exc.field, exc.message) from None
    cloud = read_cloud(top["cloud"]) if generic is None else {**read_cloud({}), GENERIC: True}
    nodes: list[NodeEntry] = []
    names: set[str] = set()
    for n, raw in enumerate(_list(top.get("nodes", []), "nodes")):
        entry = _read_node(raw, f"nodes[{n}]", cloud)
        names.add(_new(entry.spec.name, f"nodes[{n}].name", names, "node"))
        nodes.append(entry)
    steps = tuple(
        _read_step(raw, f"steps[{n}]", names, cloud)
        for n, raw in enumerate(_list(top.get("steps", []), "steps"))
    )
    seed = _int(top.get("seed", 0), "seed", minimum=0)
    return Scenario(
        settings=settings, cloud=cloud, nodes=tuple(nodes), steps=steps, seed=seed, generic=generic
    )


def load_scenario(path: str | Path) -> Scenario:
    try:
        data = load_yaml_file(path)
    except ValueError as exc:
        raise ScenarioError("", str(exc)) from None
    return parse_scenario(data)
