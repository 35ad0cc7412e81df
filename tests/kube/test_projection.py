"""What the informers keep: a realistic Node, Pending Pod and ENIPool shrink to their projections,
the bytes are measured (per object, and per Node kept by a running informer), and everything the
controller reads gives the same answer from a projection as from the whole object."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

import pytest

from eni_ipam.adapters.metrics import Metrics
from eni_ipam.core.clock import LoopClock
from eni_ipam.core.spec import NodeSpec
from eni_ipam.errors import ConfigError
from eni_ipam.kube.api import ENIPOOLS, NODES, PODS, Kind, KubeApi
from eni_ipam.kube.informer import Informer
from eni_ipam.kube.projection import NodeInfo, project_node, project_pod, project_pool
from eni_ipam.kube.resources import (
    defaults_patch,
    instance_id_of,
    node_fields_patch,
    node_record,
    pool_for_node,
    provider_id_scheme,
    resource_from_pool,
)
from eni_ipam_testkit.fake_kube import FakeKube
from eni_ipam_testkit.fake_kube.realistic import realistic_enipool, realistic_node, realistic_pending_pod
from eni_ipam_testkit.sizes import deep_size

NAME = "ip-10-0-113-42.ec2.internal"


def as_read(obj: dict[str, Any], version: str = "48213377") -> dict[str, Any]:
    """``obj`` as a client decodes it from the API server (fresh strings, a resourceVersion)."""
    read: dict[str, Any] = json.loads(json.dumps(obj))
    read["metadata"]["resourceVersion"] = version
    return read


def test_a_kept_node_is_under_a_kilobyte() -> None:
    whole = as_read(realistic_node(NAME, "aws:///us-east-1a/i-0123456789abcdef0"))
    kept = project_node(whole)
    assert deep_size(whole) > 40_000  # what the informer used to keep
    assert deep_size(kept) <= 1024
    assert kept == NodeInfo(
        name=NAME,
        uid=whole["metadata"]["uid"],
        resource_version="48213377",
        provider_id="aws:///us-east-1a/i-0123456789abcdef0",
        zone="us-east-1a",
        instance_type="m5.large",
    )


def test_a_kept_pod_and_a_kept_pool_are_a_fraction_of_the_objects() -> None:
    pod = as_read(realistic_pending_pod("payments-7d9f8c6b5-x2x7k", "shop", NAME))
    assert deep_size(project_pod(pod)) <= 512 < 10_000 < deep_size(pod)
    pool = as_read(realistic_enipool(NAME, "i-0123456789abcdef0", addresses=40, used=12))
    kept = project_pool(pool)
    assert deep_size(kept) <= 4096 and deep_size(pool) > 6 * deep_size(kept)
    assert len(kept.used) == 12  # the agent's report stays: the manager needs it


async def _kept_per_object(api: KubeApi, kind: Kind, project: Any = None) -> float:
    """Bytes an informer's store holds per object once it has listed ``kind`` (keys included)."""
    common: dict[str, Any] = {"clock": LoopClock(), "metrics": Metrics()}
    informer: Informer[Any] = (
        Informer(api, kind, project=project, version=lambda kept: kept.resource_version, **common)
        if project is not None
        else Informer(api, kind, **common)
    )
    task = asyncio.create_task(informer.run())
    await asyncio.wait_for(informer.synced.wait(), 60)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return deep_size(informer.store) / len(informer.store)


@pytest.mark.timeout(120)
async def test_informers_keep_a_few_hundred_bytes_per_object(kube: FakeKube, api: KubeApi) -> None:
    # Through the real client and the fake API server, as the controller's informers run: what the
    # store holds per object, whole (an informer without projection) and projected. Shared strings
    # (zones, instance types, condition words) count once for the whole store, as they cost.
    count = 200
    for n in range(count):
        name = f"ip-10-1-{n // 250}-{n % 250}.ec2.internal"
        kube.add_object("nodes", realistic_node(name, f"aws:///us-east-1a/i-{n:017x}"))
        kube.add_object("pods", realistic_pending_pod(f"web-5f7d8-{n:05d}", "default", name))
        pool = realistic_enipool(name, f"i-{n:017x}")
        status = pool.pop("status")
        del pool["metadata"]["resourceVersion"]
        kube.add_object("enipools", pool)
        await api.patch(ENIPOOLS, name, {"status": status}, status=True)  # the status subresource's
    measured = {
        kind.plural: (await _kept_per_object(api, kind), await _kept_per_object(api, kind, project))
        for kind, project in ((NODES, project_node), (PODS, project_pod), (ENIPOOLS, project_pool))
    }
    print("bytes kept per object (whole, projected):", measured)
    whole, kept = measured["nodes"]
    assert kept <= 1024 and whole > 40 * kept, measured
    whole, kept = measured["pods"]
    assert kept <= 512 and whole > 10 * kept, measured
    whole, kept = measured["enipools"]
    assert kept <= 4096 and whole > 6 * kept, measured


# -- the same answers from a projection as from the whole object -----------------------------------


NODES_READ = [
    as_read(realistic_node(NAME, "aws:///us-east-1a/i-0123456789abcdef0")),
    as_read(
        realistic_node("vm-3", "azure:///subscriptions/s/resourceGroups/g/providers/x/virtualMachines/vm-3")
    ),
    {"metadata": {"name": "late", "uid": "u-1"}, "spec": {}},  # no provider id yet
    {"metadata": {"name": "bare"}},
]

POOLS_READ = [
    as_read(realistic_enipool(NAME, "i-0123456789abcdef0")),
    {"metadata": {"name": "made-by-hand"}, "spec": {"instanceID": "i-1", "subnetIDs": ["s-1"]}},
    {"metadata": {"name": "no-instance"}, "spec": {"preAllocate": 3}},
    {
        "metadata": {"name": "v6", "annotations": {"eni-ipam.io/defaults": '{"preAllocate": 2}'}},
        "spec": {"instanceID": "i-6", "preAllocate": 2},
        "status": {"interfaces": [{"id": "e", "prefixes": ["10.0.0.16/28"], "ipv6Prefixes": ["2600::/80"]}]},
    },
]


@pytest.mark.parametrize("node", NODES_READ, ids=lambda n: n["metadata"]["name"])
@pytest.mark.parametrize("instance_ids", ["provider-id", "node-name"])
def test_a_kept_node_gives_the_answers_of_the_node(node: dict, instance_ids: str) -> None:
    kept = project_node(node)
    defaults = NodeSpec(pre_allocate=4)
    assert pool_for_node(kept, defaults, instance_ids=instance_ids) == pool_for_node(
        node, defaults, instance_ids=instance_ids
    )
    assert provider_id_scheme(kept) == provider_id_scheme(node)
    assert instance_id_of(kept, instance_ids) == instance_id_of(node, instance_ids)
    for pool in POOLS_READ:
        assert node_fields_patch(project_pool(pool), kept, instance_ids=instance_ids) == node_fields_patch(
            pool, node, instance_ids=instance_ids
        )


@pytest.mark.parametrize("pool", POOLS_READ, ids=lambda p: p["metadata"]["name"])
def test_a_kept_pool_gives_the_answers_of_the_pool(pool: dict) -> None:
    kept = project_pool(pool)
    assert node_record(kept) == node_record(pool)
    assert defaults_patch(kept, NodeSpec(pre_allocate=5)) == defaults_patch(pool, NodeSpec(pre_allocate=5))
    try:
        expected: Any = resource_from_pool(pool, pending_pods=3)
    except ConfigError as exc:
        expected = exc.field
    try:
        got: Any = resource_from_pool(kept, pending_pods=3)
    except ConfigError as exc:
        got = exc.field
    assert got == expected


@pytest.mark.parametrize(
    ("status", "field"),
    [
        ("not a mapping", "enipools/p.status"),
        ({"used": "10.0.0.5"}, "enipools/p.status.used"),
        ({"used": [1, "10.0.0.5"]}, None),  # only the strings count
        ({"releaseAnswers": ["10.0.0.5"]}, "enipools/p.status.releaseAnswers"),
        ({"conditions": "Ready", "interfaces": 7, "pool": []}, None),  # not read by the conversion
    ],
)
def test_a_malformed_pool_is_projected_and_refused_by_the_conversion_naming_the_field(
    status: Any, field: str | None
) -> None:
    obj = {
        "metadata": {"name": "p", "ownerReferences": "junk", "finalizers": [3]},
        "spec": {"instanceID": "i-1"},
    }
    kept = project_pool({**obj, "status": status})  # never raises
    if field is None:
        assert resource_from_pool(kept).instance_id == "i-1"
    else:
        with pytest.raises(ConfigError) as caught:
            resource_from_pool(kept)
        assert caught.value.field == field


@pytest.mark.parametrize(
    ("status", "listed"),
    [
        ({"stats": {"available": 12}}, 12),
        ({"stats": {"available": 0}}, 0),
        ({"stats": {}}, None),
        ({"stats": {"available": -3}}, None),
        ({"stats": {"available": True}}, None),
        ({"stats": {"available": "12"}}, None),
        ({"stats": "junk"}, None),
        (None, None),
    ],
)
def test_a_kept_pool_hints_at_the_addresses_its_status_last_listed_only_from_a_count(
    status: Any, listed: int | None
) -> None:
    obj: dict[str, Any] = {"metadata": {"name": "p"}, "spec": {"instanceID": "i-1"}}
    if status is not None:
        obj["status"] = status
    assert project_pool(obj).listed == listed


def test_a_kept_node_holds_only_the_labels_the_profiles_name_one_tuple_a_group() -> None:
    keys = frozenset({"node-group", "topology.kubernetes.io/zone", "absent.example.com/key"})
    kept = []
    for n in range(2):
        whole = as_read(realistic_node(f"{NAME}-{n}", f"aws:///us-east-1a/i-0{n}"))
        whole["metadata"]["labels"]["node-group"] = "batch"
        kept.append(project_node(whole, label_keys=keys))
    assert kept[0].labels == (("node-group", "batch"), ("topology.kubernetes.io/zone", "us-east-1a"))
    assert kept[0].labels is kept[1].labels  # one tuple for the group's Nodes
    assert deep_size(kept[0]) <= 1024
    assert project_node(whole).labels == ()  # no profiles: no label kept
