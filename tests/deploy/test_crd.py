"""The ENIPool CRD against the model: the spec and status schemas are generated from their models
(scripts/gen_crd.py), with a description for every field, stats are NodeStats', the release
handshake's states are ReleaseState's, split between the two writers of the status, and every list
and map of the status is bounded by what one node can hold."""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from typing import Annotated, Any

import pytest
import yaml
from pydantic import Field

from eni_ipam.core import devices
from eni_ipam.core.devices import MAC_PATTERN, MAX_NETWORK_CARD
from eni_ipam.core.model import (
    MAX_INTERFACE_PREFIXES,
    MAX_NODE_ADDRESSES,
    MAX_NODE_INTERFACES,
    PREFIX_SIZE,
    Interface,
    NodeStats,
    NodeStatus,
    ReleaseState,
)
from eni_ipam.core.pool_status import PoolStatus
from eni_ipam.core.spec import CRD_DEFAULTS, POOL_ONLY_FIELDS, SPEC_FIELDS, PoolSpec
from eni_ipam.kube.permissions import GROUP, KIND, PLURAL, VERSION
from eni_ipam.kube.projection import CONDITION_TYPES, CONTROLLER_FIELDS, PROFILE_LABEL
from eni_ipam.kube.resources import StatusTooLarge, agent_status_patch, desired_status
from scripts import gen_crd
from tests.deploy.conftest import CHART
from tests.deploy.schemas import KUBE_NEWEST, custom_resource_errors

CRD = yaml.safe_load((CHART / "crds" / "enipools.eni-ipam.io.yaml").read_text())
SPECIAL = {"instance_id": "instanceID", "subnet_ids": "subnetIDs"}
OPENAPI_TYPES = {"int": "integer", "bool": "boolean", "str": "string"}


def camel(name: str) -> str:
    if name in SPECIAL:
        return SPECIAL[name]
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


def schema() -> dict[str, Any]:
    (version,) = CRD["spec"]["versions"]
    return version["schema"]["openAPIV3Schema"]


def openapi_type(annotation: str) -> str:
    if annotation.startswith("tuple["):
        return "array"
    if annotation.startswith("Mapping["):
        return "object"
    return OPENAPI_TYPES[annotation]


def test_names_match_the_code():
    assert CRD["metadata"]["name"] == f"{PLURAL}.{GROUP}"
    assert CRD["spec"]["group"] == GROUP
    assert CRD["spec"]["names"]["kind"] == KIND and CRD["spec"]["names"]["plural"] == PLURAL
    assert CRD["spec"]["scope"] == "Cluster"
    (version,) = CRD["spec"]["versions"]
    assert version["name"] == VERSION and version["served"] and version["storage"]
    assert version["subresources"] == {"status": {}}


def test_the_spec_schema_is_generated_from_the_node_spec_model():
    text = (CHART / "crds" / "enipools.eni-ipam.io.yaml").read_text()
    assert gen_crd.render(text) == text, "the CRD differs from the node spec model: run make crd"
    assert gen_crd.main(["--check"]) == 0
    assert schema()["properties"]["spec"]["required"] == ["instanceID"]


def properties_of(node: dict[str, Any], path: str) -> dict[str, dict[str, Any]]:
    """Every named property under ``node``, by its path (``interfaces.macAddress``)."""
    found: dict[str, dict[str, Any]] = {}
    for name, child in (node.get("properties") or {}).items():
        found[f"{path}.{name}".lstrip(".")] = child
        found.update(properties_of(child, f"{path}.{name}".lstrip(".")))
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            found.update(properties_of(node[key], path))
    return found


def test_every_status_field_is_described_for_kubectl_explain():
    status = properties_of(schema()["properties"]["status"], "")
    assert {"message", "stats.needed", "interfaces.macAddress", "conditions.reason", "pool.subnet"} <= set(
        status
    )
    assert [path for path, node in status.items() if not node.get("description")] == []


def test_the_status_schema_is_generated_from_the_status_model():
    class Reworded(PoolStatus):
        message: str = ""
        """Another sentence."""

    text = (CHART / "crds" / "enipools.eni-ipam.io.yaml").read_text()
    changed = yaml.safe_load(gen_crd.render(text, status=Reworded))
    (version,) = changed["spec"]["versions"]
    described = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["message"]
    assert described["description"] == "Another sentence."
    assert set(PoolStatus.model_fields) >= {"pool", "used", "release_answers"}
    wanted = {"pool", "subnets", "used", "release", "releaseAnswers", "interfaces", "stats"}
    assert wanted | set(CONTROLLER_FIELDS) == set(schema()["properties"]["status"]["properties"])


def test_changing_a_bound_in_the_model_changes_the_crd():
    class Narrower(PoolSpec):
        first_interface_index: Annotated[int, Field(ge=0, le=15)] = 0

    text = (CHART / "crds" / "enipools.eni-ipam.io.yaml").read_text()
    changed = yaml.safe_load(gen_crd.render(text, Narrower))
    (version,) = changed["spec"]["versions"]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert spec["firstInterfaceIndex"]["maximum"] == 15
    assert schema()["properties"]["spec"]["properties"]["firstInterfaceIndex"]["maximum"] == 31


def test_every_spec_key_is_a_crd_property_with_the_model_default_where_published():
    spec = schema()["properties"]["spec"]["properties"]
    assert set(spec) == {camel(name) for name in (*POOL_ONLY_FIELDS, *SPEC_FIELDS)}
    for name in SPEC_FIELDS:
        published = spec[camel(name)].get("default")
        assert (published is not None) == (name in CRD_DEFAULTS), name
        if published is not None:
            assert published == PoolSpec.model_fields[name].default, name


def test_stats_are_the_node_stats_fields():
    stats = schema()["properties"]["status"]["properties"]["stats"]["properties"]
    fields = {camel(f.name): f for f in dataclasses.fields(NodeStats)}
    assert set(stats) == set(fields)
    for name, field in fields.items():
        assert stats[name]["type"] == openapi_type(str(field.type)), name


def test_release_states_are_split_between_the_two_writers():
    status = schema()["properties"]["status"]["properties"]
    controller = status["release"]["additionalProperties"]["enum"]
    agent = status["releaseAnswers"]["additionalProperties"]["enum"]
    assert set(controller) == {ReleaseState.MARKED.value, ReleaseState.RELEASED.value}
    assert set(agent) == {ReleaseState.READY.value, ReleaseState.DO_NOT_RELEASE.value}
    assert set(controller) | set(agent) == {s.value for s in ReleaseState}


def test_printer_columns_point_at_existing_fields():
    (version,) = CRD["spec"]["versions"]
    for column in version["additionalPrinterColumns"]:
        path = column["jsonPath"]
        if path.startswith(".metadata."):
            continue
        node = schema()
        for part in re.sub(r"\[.*?\]", "", path).strip(".").split("."):
            if node.get("type") == "array":
                node = node["items"]
            node = node["properties"][part]
        assert node["type"] == column["type"], path


def test_wide_output_adds_where_the_pool_can_grow_and_why_it_is_not_ready():
    (version,) = CRD["spec"]["versions"]
    columns = {c["name"]: (c["jsonPath"], c.get("priority", 0)) for c in version["additionalPrinterColumns"]}
    default = [name for name, (_, priority) in columns.items() if priority == 0]
    assert default == ["Instance", "Type", "Profile", "Available", "Used", "Needed", "Ready", "Age"]
    assert columns["Profile"][0] == ".metadata.labels." + PROFILE_LABEL.replace(
        ".", "\\."
    )  # the label written
    wide = {name: path for name, (path, priority) in columns.items() if priority == 1}
    assert wide["Reason"] == '.status.conditions[?(@.type=="Ready")].reason'
    assert wide["Message"] == ".status.message"
    assert {"Zone", "Capacity"} <= set(wide)


BOUNDS = {
    "pool": ("maxProperties", MAX_NODE_ADDRESSES),
    "used": ("maxItems", MAX_NODE_ADDRESSES),
    "release": ("maxProperties", MAX_NODE_ADDRESSES),
    "releaseAnswers": ("maxProperties", MAX_NODE_ADDRESSES),
    "subnets": ("maxProperties", MAX_NODE_INTERFACES),
    "interfaces": ("maxItems", MAX_NODE_INTERFACES),
    "interfaces.securityGroups": ("maxItems", MAX_NODE_INTERFACES),
    "interfaces.prefixes": ("maxItems", MAX_INTERFACE_PREFIXES),
    "interfaces.ipv6Prefixes": ("maxItems", MAX_INTERFACE_PREFIXES),
    "conditions": ("maxItems", 8),
}
"""Every list and map of the status, with its bound: an unbounded one lets a writer (a compromised
agent) store an object the size of etcd's limit, which every informer then holds and decodes."""


def collections_of(node: dict[str, Any], path: str = "") -> dict[str, dict[str, Any]]:
    """Every array, and every object keyed freely (``additionalProperties``), under ``node``."""
    found: dict[str, dict[str, Any]] = {}
    if node.get("type") == "array":
        found[path] = node
        found.update(collections_of(node["items"], path))
    if node.get("type") == "object" and isinstance(node.get("additionalProperties"), dict):
        found[path] = node
    for name, child in (node.get("properties") or {}).items():
        found.update(collections_of(child, f"{path}.{name}".lstrip(".")))
    return found


def test_every_list_and_map_of_the_status_is_bounded_by_what_a_node_holds():
    status = schema()["properties"]["status"]
    found = collections_of(status)
    assert set(found) == set(BOUNDS)
    for path, (keyword, bound) in BOUNDS.items():
        assert found[path].get(keyword) == bound, (path, keyword, found[path].get(keyword))
    assert len(CONDITION_TYPES) <= BOUNDS["conditions"][1]


def test_no_shipped_instance_type_holds_more_than_the_bound():
    from providers.azure.limits import load_table
    from providers.ec2.limits import load_limits

    for name, limits in load_limits().items():
        prefixed = limits.adapters * limits.slots_per_interface * PREFIX_SIZE
        assert prefixed <= MAX_NODE_ADDRESSES and limits.adapters <= MAX_NODE_INTERFACES, name
        # On every network card: the interfaces fit a status; the addresses are capped (max_allocatable).
        assert sum(limits.cards) <= MAX_NODE_INTERFACES, name
        assert limits.slots_per_interface <= MAX_INTERFACE_PREFIXES, name
    nics = max(load_table().values())
    assert nics * 255 <= MAX_NODE_ADDRESSES and nics <= MAX_NODE_INTERFACES


def pool(status: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": {"name": "node-1"},
        "spec": {"instanceID": "i-0123456789abcdef0"},
        "status": status,
    }


def addresses(count: int) -> list[str]:
    return [str(ipaddress.IPv4Address("10.0.0.0") + n) for n in range(count)]


def test_a_status_over_the_bound_is_refused_by_the_schema():
    at_bound = addresses(MAX_NODE_ADDRESSES)
    over = addresses(MAX_NODE_ADDRESSES + 1)
    assert custom_resource_errors(pool({"used": at_bound}), KUBE_NEWEST) == []
    (used,) = custom_resource_errors(pool({"used": over}), KUBE_NEWEST)
    assert used.startswith("status.used:") and "too long" in used, used
    answers = dict.fromkeys(over, "ready-for-release")
    (refused,) = custom_resource_errors(pool({"releaseAnswers": answers}), KUBE_NEWEST)
    assert refused.startswith("status.releaseAnswers:") and "too many properties" in refused, refused
    interfaces = [{"id": f"eni-{n}", "deviceIndex": n, "subnet": "s"} for n in range(MAX_NODE_INTERFACES + 1)]
    assert custom_resource_errors(pool({"interfaces": interfaces}), KUBE_NEWEST)


def test_the_agent_never_writes_more_than_the_crd_admits():
    obj = {"metadata": {"resourceVersion": "7"}, "status": {}}
    patch = agent_status_patch(obj, used=addresses(MAX_NODE_ADDRESSES), answers={})
    assert patch is not None and len(patch["status"]["used"]) == MAX_NODE_ADDRESSES
    with pytest.raises(StatusTooLarge) as refused:
        agent_status_patch(obj, used=addresses(MAX_NODE_ADDRESSES + 1), answers={})
    assert refused.value.field == "used" and refused.value.count == MAX_NODE_ADDRESSES + 1
    answers = dict.fromkeys(addresses(MAX_NODE_ADDRESSES + 1), ReleaseState.READY)
    with pytest.raises(StatusTooLarge, match=r"status\.releaseAnswers would hold 32769 entries"):
        agent_status_patch(obj, used=[], answers=answers)


def interface_schema() -> dict[str, Any]:
    return schema()["properties"]["status"]["properties"]["interfaces"]["items"]["properties"]


def test_the_mac_address_and_network_card_are_the_models() -> None:
    """The schema admits exactly what the model publishes: the written form of a device's MAC
    address (devices.MAC_PATTERN) and cards 0 to MAX_NETWORK_CARD."""
    mac, card = interface_schema()["macAddress"], interface_schema()["networkCard"]
    assert mac == {"type": "string", "pattern": MAC_PATTERN, "description": mac["description"]}
    assert (card["type"], card["minimum"], card["maximum"]) == ("integer", 0, MAX_NETWORK_CARD)


def test_a_status_the_controller_writes_passes_the_schema_and_bad_devices_do_not() -> None:
    iface = Interface(
        id="eni-1",
        device_index=1,
        subnet_id="subnet-1",
        primary_ip="10.0.0.4",
        addresses=("10.0.0.5",),
        link=devices.pack("0a:1b:2c:3d:4e:5f", MAX_NETWORK_CARD),
    )
    plain = Interface(id="eni-0", device_index=0, subnet_id="subnet-1", primary_ip="10.0.0.3")
    status = NodeStatus(interfaces=(plain, iface), subnets={"subnet-1": "10.0.0.0/24"})
    written = desired_status(status, generation=1)
    assert written["interfaces"][1]["macAddress"] == "0a:1b:2c:3d:4e:5f"
    assert "macAddress" not in written["interfaces"][0] and "networkCard" not in written["interfaces"][0]
    assert custom_resource_errors(pool(written), KUBE_NEWEST) == []
    for field, bad in (
        ("macAddress", "0A:1B:2C:3D:4E:5F"),
        ("macAddress", "01:00:5e:00:00:01"),
        ("macAddress", "0a-1b-2c-3d-4e-5f"),
        ("macAddress", ""),
        ("networkCard", -1),
        ("networkCard", MAX_NETWORK_CARD + 1),
    ):
        entry = {"id": "eni-1", "deviceIndex": 1, "subnet": "subnet-1", field: bad}
        (refused,) = custom_resource_errors(pool({"interfaces": [entry]}), KUBE_NEWEST)
        assert refused.startswith(f"status.interfaces.0.{field}:"), refused


@pytest.mark.parametrize(
    ("spec", "where"),
    [
        ({"instanceID": "i-0123\x1b]8;;https://evil\x07x"}, "spec.instanceID"),  # OSC 8, BEL
        ({"instanceID": "i-0123 456"}, "spec.instanceID"),
        ({"instanceID": "i-1", "zone": "us-east-1a\x1b[2J"}, "spec.zone"),
        ({"instanceID": "i-1", "instanceType": "m5.large\r"}, "spec.instanceType"),
        ({"instanceID": "i-1", "subnetIDs": ["subnet-1\x1b[31m"]}, "spec.subnetIDs.0"),
        ({"instanceID": "i-1", "subnetTags": {f"k{n}": "v" for n in range(51)}}, "spec.subnetTags"),
    ],
)
def test_identifiers_that_could_drive_a_terminal_and_unbounded_tag_maps_are_refused(
    spec: dict[str, Any], where: str
) -> None:
    obj = {**pool({}), "spec": spec}
    refused = custom_resource_errors(obj, KUBE_NEWEST)
    assert refused and all(error.startswith(where) for error in refused), refused
    at_bound = {
        "instanceID": "i-0123456789abcdef0",
        "zone": "us-east-1a",
        "subnetTags": {f"k{n}": "v" * 256 for n in range(50)},
    }
    assert custom_resource_errors({**pool({}), "spec": at_bound}, KUBE_NEWEST) == []


@pytest.mark.parametrize(
    "spec",
    [
        {"instance_id": "i-1\x1b[0m"},
        {"instance_id": "i-1", "subnet_tags": {f"k{n}": "v" for n in range(51)}},
        {"instance_id": "i-1", "subnet_tags": {"k" * 513: "v"}},
        {"instance_id": "i-1", "subnet_tags": {"": "v"}},
    ],
)
def test_the_model_refuses_what_the_crd_refuses(spec: dict[str, Any]) -> None:
    from pydantic import ValidationError

    from eni_ipam.core.spec import PoolSpec

    with pytest.raises(ValidationError):
        PoolSpec.model_validate(spec)
