"""Objects at production size: the realistic Node, Pod and ENIPool, and the deep size that measures
what keeping one costs."""

from __future__ import annotations

import dataclasses
import gc
import json

from eni_ipam_testkit.fake_kube import FakeKube
from eni_ipam_testkit.fake_kube.realistic import realistic_enipool, realistic_node, realistic_pending_pod
from eni_ipam_testkit.sizes import deep_size, deep_sizes

NAME = "ip-10-0-113-42.ec2.internal"


def test_a_realistic_node_is_what_an_eks_kubelet_leaves() -> None:
    node = realistic_node(
        NAME, "aws:///us-east-1a/i-0123456789abcdef0", zone="us-east-1b", instance_type="c5.xlarge"
    )
    assert 11_000 <= len(json.dumps(node, separators=(",", ":"))) <= 15_000
    assert len(node["status"]["images"]) == 50 and len(node["metadata"]["labels"]) == 20
    assert {m["manager"] for m in node["metadata"]["managedFields"]} >= {
        "kubelet",
        "aws-cloud-controller-manager",
    }
    assert node["metadata"]["labels"]["topology.kubernetes.io/zone"] == "us-east-1b"
    assert node["metadata"]["labels"]["node.kubernetes.io/instance-type"] == "c5.xlarge"
    assert node["spec"]["providerID"] == "aws:///us-east-1a/i-0123456789abcdef0"
    assert node == realistic_node(
        NAME, "aws:///us-east-1a/i-0123456789abcdef0", zone="us-east-1b", instance_type="c5.xlarge"
    )
    assert node["metadata"]["uid"] != realistic_node("other", "aws:///us-east-1a/i-1")["metadata"]["uid"]
    assert len(realistic_node(NAME, "aws:///x/i-1", images=5)["status"]["images"]) == 5


def test_a_realistic_pool_and_pod_have_their_shapes() -> None:
    pool = realistic_enipool(NAME, "i-0123456789abcdef0", addresses=40, used=12)
    status = pool["status"]
    assert len(status["pool"]) == 40 and len(status["used"]) == 12
    assert set(status["used"]) <= set(status["pool"])
    assert sum(i["addresses"] for i in status["interfaces"]) == 40
    assert {e["subnet"] for e in status["pool"].values()} == set(status["subnets"])
    macs = [i["macAddress"] for i in status["interfaces"]]
    assert len(set(macs)) == len(macs) == len(status["interfaces"]) and all(m.startswith("02:") for m in macs)
    pod = realistic_pending_pod("web-5f7d8-abcde", "shop", NAME)
    assert pod["spec"]["nodeName"] == NAME and pod["status"]["phase"] == "Pending"


async def test_realistic_objects_are_accepted_by_the_fake_api_server(kube: FakeKube) -> None:
    kube.add_object("nodes", realistic_node(NAME, "aws:///us-east-1a/i-0123456789abcdef0"))
    kube.add_object("pods", realistic_pending_pod("web-5f7d8-abcde", "default", NAME))
    pool = realistic_enipool(NAME, "i-0123456789abcdef0")
    del pool["metadata"]["resourceVersion"]
    kube.add_object("enipools", pool)
    assert len(kube.get_object("nodes", NAME)["status"]["images"]) == 50


def test_deep_size_counts_what_is_referenced_once() -> None:
    text = "x" * 1000
    one = deep_size([text])
    assert one >= 1000
    assert deep_size([text, text]) == one + 8  # one more reference, not another string

    @dataclasses.dataclass(slots=True)
    class Slotted:
        payload: str

    assert deep_size(Slotted(text)) >= 1000  # through __slots__

    class Plain:
        def __init__(self) -> None:
            self.payload = text

    assert deep_size(Plain()) >= 1000  # through __dict__
    assert deep_size(None) == 0  # singletons belong to nobody


def test_deep_size_neither_makes_nor_counts_a_dict_a_slotted_object_does_not_have() -> None:
    class Open:
        __slots__ = ("__dict__", "payload")

        def __init__(self) -> None:
            self.payload = "p" * 100

    bare, patched = Open(), Open()
    patched.extra = "x" * 1000  # type: ignore[attr-defined]
    size = deep_size(bare)
    assert not any(isinstance(r, dict) for r in gc.get_referents(bare))  # still no dict after the walk
    assert size < 1000 < deep_size(patched)  # a dict that exists is followed


def test_deep_sizes_count_what_roots_share_with_the_first() -> None:
    shared, own = "s" * 1000, "o" * 500
    first, second = deep_sizes([shared], [shared, own])
    assert first == deep_size([shared])
    assert second == deep_size([shared, own]) - deep_size(shared)  # the shared string counted once


def test_deep_sizes_do_not_follow_skipped_objects_unless_they_are_a_root() -> None:
    service = ["s" * 1000]
    part = ["p" * 500, service]
    alone, skipped_service = deep_sizes(part, service, skip=[service])
    assert alone == deep_size(part) - deep_size(service)
    assert skipped_service == deep_size(service)
