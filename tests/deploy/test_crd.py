"""The ENIPool CRD against the model: the spec schema is generated from the node spec model
(scripts/gen_crd.py), stats are NodeStats', and the release handshake's states are ReleaseState's,
split between the two writers of the status."""

from __future__ import annotations

import dataclasses
import re
from typing import Annotated, Any

import yaml
from pydantic import Field

from eni_ipam.core.model import NodeStats, ReleaseState
from eni_ipam.core.spec import CRD_DEFAULTS, POOL_ONLY_FIELDS, SPEC_FIELDS, PoolSpec
from eni_ipam.kube.permissions import GROUP, KIND, PLURAL, VERSION
from scripts import gen_crd
from tests.deploy.conftest import CHART

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
