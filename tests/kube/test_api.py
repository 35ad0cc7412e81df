"""The adapter: plain dicts, one error tree, declared permissions only, metrics per request."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from lightkube.types import PatchType

from eni_ipam.adapters.metrics import Metrics
from eni_ipam.errors import ConfigError
from eni_ipam.kube import errors
from eni_ipam.kube.api import ENIPOOLS, EVENTS, LEASES, NODES, PODS, KubeApi, client_from_kubeconfig
from eni_ipam.kube.permissions import STATUS_PERMISSIONS
from eni_ipam_testkit.fake_kube import FakeKube, Fault
from tests.kube.conftest import make_api, node


async def test_list_returns_dicts_and_the_list_version(kube: FakeKube, api: KubeApi) -> None:
    for n in range(3):
        kube.add_object("nodes", node(f"n{n}", f"i-{n}"))
    items, version = await api.list(NODES, chunk_size=2)
    assert sorted(i["metadata"]["name"] for i in items) == ["n0", "n1", "n2"]
    assert isinstance(items[0], dict) and version == kube.resource_version
    assert [r.params.get("limit") for r in kube.requests if r.verb == "list"] == ["2", "2"]


async def test_pods_are_listed_in_every_namespace_by_field(kube: FakeKube, api: KubeApi) -> None:
    for ns in ("a", "b"):
        kube.add_object("namespaces", {"metadata": {"name": ns}})
    for ns, phase in (("a", "Pending"), ("b", "Pending"), ("b", "Running")):
        name = f"p-{ns}-{phase.lower()}"
        kube.add_object(
            "pods",
            {
                "metadata": {"name": name, "namespace": ns},
                "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "busybox:1"}]},
            },
        )
        # Status is the kubelet's to write (through the status subresource), as in a cluster.
        await api.client.patch(
            PODS.resource().Status,
            name,
            {"status": {"phase": phase}},
            namespace=ns,
            patch_type=PatchType.MERGE,
        )
    items, _ = await api.list(PODS, fields={"status.phase": "Pending"})
    assert sorted(i["metadata"]["name"] for i in items) == ["p-a-pending", "p-b-pending"]


async def test_a_namespaced_kind_is_listed_in_one_namespace_when_asked(kube: FakeKube, api: KubeApi) -> None:
    for namespace in ("default", "kube-system"):
        event = {"metadata": {"name": f"e-{namespace}", "namespace": namespace}, "involvedObject": {}}
        kube.add_object("events", event)
    api.allowed = STATUS_PERMISSIONS  # `eni-ipam status` lists Events; the controller does not
    everywhere, _ = await api.list(EVENTS)
    there, _ = await api.list(EVENTS, namespace="default")
    assert sorted(e["metadata"]["name"] for e in everywhere) == ["e-default", "e-kube-system"]
    assert [e["metadata"]["name"] for e in there] == ["e-default"]


async def test_a_kubeconfigs_context_is_chosen_by_name_and_an_unknown_one_names_the_option(
    kube: FakeKube, tmp_path: Path
) -> None:
    config = kube.kubeconfig()
    config["contexts"].append(
        {"name": "other", "context": {"cluster": "fake-kube", "user": config["users"][0]["name"]}}
    )
    config["current-context"] = "missing-on-purpose"
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    api = KubeApi(client_from_kubeconfig(str(path), context="other"), metrics=Metrics())
    assert api.server == kube.url
    assert (await api.list(NODES))[0] == []  # the server answers, through "other"
    await api.close()
    with pytest.raises(ConfigError, match="Context 'prod' not found") as caught:
        client_from_kubeconfig(str(path), context="prod", field="--kubeconfig")
    assert caught.value.field == "--kubeconfig"


async def test_errors_are_translated(kube: FakeKube, api: KubeApi) -> None:
    with pytest.raises(errors.KubeNotFound):
        await api.get(ENIPOOLS, "missing")
    body = {"metadata": {"name": "n1"}, "spec": {"instanceID": "i-1"}}
    created = await api.create(ENIPOOLS, body)
    with pytest.raises(errors.KubeConflict):
        await api.create(ENIPOOLS, body)
    stale = created["metadata"]["resourceVersion"]
    await api.patch(ENIPOOLS, "n1", {"spec": {"preAllocate": 2}})
    with pytest.raises(errors.KubeConflict):
        await api.patch(ENIPOOLS, "n1", {"metadata": {"resourceVersion": stale}, "spec": {"preAllocate": 3}})
    with pytest.raises(errors.KubeInvalid, match=r"spec\.minAllocate"):
        await api.patch(ENIPOOLS, "n1", {"spec": {"minAllocate": -1}})
    kube.faults.append(Fault(verb="get", plural="enipools", status=429, retry_after=3))
    with pytest.raises(errors.KubeThrottled) as info:
        await api.get(ENIPOOLS, "n1")
    assert info.value.retry_after == 3
    kube.faults.append(Fault(verb="get", plural="enipools", status=503))
    with pytest.raises(errors.KubeUnavailable):
        await api.get(ENIPOOLS, "n1")
    assert (await api.get(ENIPOOLS, "n1"))["metadata"]["uid"] == created["metadata"]["uid"]


async def test_unreachable_server_is_unavailable(kube: FakeKube) -> None:
    api = make_api(kube)
    await kube.close()
    with pytest.raises(errors.KubeUnavailable):
        await api.get(NODES, "n1")
    await api.close()


async def test_a_request_outside_the_declared_permissions_is_refused_before_it_is_sent(
    kube: FakeKube, api: KubeApi
) -> None:
    with pytest.raises(errors.KubeForbidden, match="create nodes"):
        await api.create(NODES, node("n1", "i-1"))
    with pytest.raises(errors.KubeForbidden, match="patch leases"):
        await api.patch(LEASES, "l", {}, namespace="kube-system")
    assert kube.requests == []


async def test_requests_are_counted_by_verb_resource_and_code(kube: FakeKube) -> None:
    metrics = Metrics()
    api = make_api(kube, metrics)
    await api.list(NODES)
    with pytest.raises(errors.KubeNotFound):
        await api.get(NODES, "nope")
    await api.close()
    sample = metrics.sample
    assert sample("eni_ipam_kube_requests_total", {"verb": "list", "resource": "nodes", "code": "200"}) == 1
    assert sample("eni_ipam_kube_requests_total", {"verb": "get", "resource": "nodes", "code": "404"}) == 1


@pytest.mark.parametrize(
    "tags",
    [{"k" * 513: "v"}, {"": "v"}],
    ids=["key-too-long", "empty-key"],
)
async def test_the_api_server_refuses_a_pool_whose_tag_keys_the_crd_bounds(api: KubeApi, tags: dict) -> None:
    body = {
        "apiVersion": "eni-ipam.io/v1alpha1",
        "kind": "ENIPool",
        "metadata": {"name": "tags"},
        "spec": {"instanceID": "i-1", "subnetTags": tags},
    }
    with pytest.raises(errors.KubeInvalid) as refused:
        await api.create(ENIPOOLS, body)
    assert refused.value.code == 422 and "a tag key must have 1 to 512 characters" in str(refused.value)
    body["spec"]["subnetTags"] = {"k" * 512: "v"}
    await api.create(ENIPOOLS, body)  # at the bound
