"""The ENIPool CRD against the model: spec fields are NodeSpec's, stats are NodeStats', and the
release handshake's states are ReleaseState's, split between the two writers of the status."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import yaml

from eni_ipam.core.model import NodeSpec, NodeStats, ReleaseState
from eni_ipam.kube.permissions import GROUP, KIND, PLURAL, VERSION
from tests.deploy.conftest import CHART

CRD = yaml.safe_load((CHART / "crds" / "enipools.eni-ipam.io.yaml").read_text())
SPECIAL = {"instance_id": "instanceID", "subnet_ids": "subnetIDs"}
INFORMATIONAL = {"instanceType", "zone"}  # written from the Node's labels; no NodeSpec field
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


def test_spec_properties_are_the_node_spec_fields():
    spec = schema()["properties"]["spec"]["properties"]
    fields = {camel(f.name): f for f in dataclasses.fields(NodeSpec) if f.name != "name"}
    assert set(spec) == set(fields) | INFORMATIONAL
    for name, field in fields.items():
        assert spec[name]["type"] == openapi_type(str(field.type)), name
        if "default" in spec[name]:
            assert spec[name]["default"] == field.default, name
        if "minimum" in spec[name]:
            assert spec[name]["minimum"] <= field.default <= spec[name]["maximum"], name
    assert schema()["properties"]["spec"]["required"] == ["instanceID"]


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
