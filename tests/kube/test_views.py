"""Nodes decoded into their view project exactly as the whole Node does, whatever it carries."""

from __future__ import annotations

import json

import pytest
from lightkube.core.decoders import decode_list, decode_object

from eni_ipam.kube.projection import project_node
from eni_ipam.kube.views import NodeView, as_data
from eni_ipam_testkit.fake_kube.realistic import realistic_node


def _page(items: list[dict[str, object]]) -> bytes:
    return json.dumps({"kind": "NodeList", "metadata": {"resourceVersion": "7"}, "items": items}).encode()


def test_a_realistic_node_projects_alike_from_its_view_and_from_itself() -> None:
    nodes = [
        realistic_node(f"n{i}", f"aws:///us-east-1b/i-{i:017x}", zone="us-east-1b", instance_type="m5.large")
        for i in range(20)
    ]
    _, version, views = decode_list(_page(nodes), NodeView)
    assert version == "7"
    assert [project_node(as_data(v)) for v in views] == [project_node(n) for n in nodes]
    assert len(json.dumps(as_data(views[0]))) < len(json.dumps(nodes[0])) / 5


@pytest.mark.parametrize(
    "node",
    [
        {"metadata": {"name": "bare"}},  # no spec, no labels, no uid yet
        {
            "metadata": {"name": "odd", "labels": {"topology.kubernetes.io/zone": 7}},
            "spec": {"providerID": 5},
        },
        {"metadata": {"name": "x", "resourceVersion": "3"}, "spec": None, "status": {"images": ["a"] * 3}},
    ],
)
def test_an_unusual_node_decodes_into_its_view_as_it_came(node: dict[str, object]) -> None:
    view = decode_object(json.dumps(node).encode(), NodeView)
    assert project_node(as_data(view)) == project_node(node)
