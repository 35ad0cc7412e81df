"""Cluster API address claims served from a node's pool: finalizers, owner references, pausing,
and deletion order — against the fake API server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from eni_ipam.agent.allocator import Allocator
from eni_ipam.agent.claims import NODE_LABEL, PROTECT_FINALIZER, RELEASE_FINALIZER, ClaimReconciler
from eni_ipam.agent.metrics import AgentMetrics
from eni_ipam.agent.types import PoolAddress
from eni_ipam.core.clock import LoopClock
from eni_ipam.kube.api import IPADDRESSCLAIMS, IPADDRESSES, KubeApi
from eni_ipam.kube.permissions import AGENT_PERMISSIONS
from eni_ipam_testkit.fake_kube import FakeKube
from tests.kube.conftest import make_api
from tests.waiting import until

pytestmark = pytest.mark.timeout(30)
NS = "capi"


def claim(name: str, *, node: str = "n1", **annotations: str) -> dict[str, Any]:
    return {
        "apiVersion": "ipam.cluster.x-k8s.io/v1beta1",
        "kind": "IPAddressClaim",
        "metadata": {"name": name, "namespace": NS, "annotations": annotations},
        "spec": {"poolRef": {"apiGroup": "eni-ipam.io", "kind": "ENIPool", "name": node}},
    }


class Served:
    def __init__(self, kube: FakeKube, addresses: int) -> None:
        self.kube = kube
        self.allocator = Allocator(clock=LoopClock())
        self.allocator.set_pool(
            "default",
            [
                PoolAddress(address=f"10.0.0.{10 + n}", prefix_length=24, gateway="10.0.0.1")
                for n in range(addresses)
            ],
        )
        self.api: KubeApi = make_api(kube)
        self.api.allowed = AGENT_PERMISSIONS
        self.reconciler = ClaimReconciler(
            self.api, self.allocator, node="n1", clock=LoopClock(), metrics=AgentMetrics()
        )

    def claim(self, name: str) -> dict[str, Any] | None:
        return self.kube.get_object("ipaddressclaims", name, namespace=NS)

    def address(self, name: str) -> dict[str, Any] | None:
        return self.kube.get_object("ipaddresses", name, namespace=NS)


@pytest.fixture(autouse=True)
def claims_namespace(kube: FakeKube) -> None:
    """Claims and their addresses live in a namespace that exists, as on a cluster."""
    kube.add_object("namespaces", {"metadata": {"name": NS}})


@pytest.fixture
async def served(kube: FakeKube) -> AsyncIterator[Served]:
    s = Served(kube, addresses=2)
    task = asyncio.create_task(s.reconciler.run())
    yield s
    task.cancel()
    await s.api.close()


@pytest.fixture
async def people(kube: FakeKube) -> AsyncIterator[KubeApi]:
    """Someone with every right (kubectl): creates and deletes claims and addresses."""
    api = make_api(kube)
    api.allowed = (
        api.allowed
        | AGENT_PERMISSIONS
        | {
            ("ipam.cluster.x-k8s.io", "ipaddressclaims", "create"),
            ("ipam.cluster.x-k8s.io", "ipaddressclaims", "delete"),
        }
    )
    yield api
    await api.close()


async def test_claim_gets_an_address_protected_and_owned_by_it(served: Served, people: KubeApi) -> None:
    await people.create(IPADDRESSCLAIMS, claim("c1"))
    await until(lambda: served.address("c1") is not None and (served.claim("c1") or {}).get("status"))
    address = served.address("c1")
    assert address["spec"]["address"] == "10.0.0.10"
    assert (address["spec"]["prefix"], address["spec"]["gateway"]) == (24, "10.0.0.1")
    assert address["spec"]["claimRef"] == {"name": "c1"}
    assert address["metadata"]["finalizers"] == [PROTECT_FINALIZER]
    assert address["metadata"]["labels"] == {NODE_LABEL: "n1"}  # what the admission policy checks
    (owner,) = address["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("IPAddressClaim", "c1", True)
    assert owner["uid"] == served.claim("c1")["metadata"]["uid"]
    c1 = served.claim("c1")
    assert RELEASE_FINALIZER in c1["metadata"]["finalizers"]
    assert c1["status"]["addressRef"] == {"name": "c1"}
    assert c1["status"]["conditions"][0]["status"] == "True"
    assert [(a.address, a.owner) for a in served.allocator.allocations()] == [("10.0.0.10", "claim:capi/c1")]


async def test_an_address_cannot_go_while_its_claim_exists(served: Served, people: KubeApi) -> None:
    await people.create(IPADDRESSCLAIMS, claim("c1"))
    await until(lambda: served.address("c1") is not None)
    await people.delete(IPADDRESSES, "c1", namespace=NS)
    await asyncio.sleep(0.3)
    kept = served.address("c1")
    assert kept is not None and kept["metadata"].get("deletionTimestamp")
    assert served.allocator.used() == {"10.0.0.10"}


async def test_deleting_the_claim_releases_the_address_before_the_claim_goes(
    served: Served, people: KubeApi
) -> None:
    await people.create(IPADDRESSCLAIMS, claim("c1"))
    await until(lambda: served.address("c1") is not None)
    await people.delete(IPADDRESSCLAIMS, "c1", namespace=NS)
    await until(lambda: served.claim("c1") is None)
    assert served.address("c1") is None
    assert served.allocator.used() == set()
    # the order: the address was released (protect finalizer removed, address deleted), then the claim
    writes = [
        (r.verb, r.plural) for r in served.kube.requests if r.verb in ("patch", "delete") and r.name == "c1"
    ]
    assert writes.index(("delete", "ipaddresses")) < len(writes) - 1
    assert writes[-1] == ("patch", "ipaddressclaims")


async def test_paused_claims_and_other_nodes_claims_are_left_alone(served: Served, people: KubeApi) -> None:
    await people.create(IPADDRESSCLAIMS, claim("paused", **{"cluster.x-k8s.io/paused": ""}))
    await people.create(IPADDRESSCLAIMS, claim("elsewhere", node="n2"))
    await people.create(IPADDRESSCLAIMS, claim("mine"))
    await until(lambda: served.address("mine") is not None)
    await asyncio.sleep(0.2)
    assert served.address("paused") is None and served.address("elsewhere") is None
    assert not served.claim("paused")["metadata"].get("finalizers")
    assert served.allocator.used() == {"10.0.0.10"}


@pytest.mark.looptime(start=1_000_000.0)
async def test_exhausted_pool_says_so_and_the_claim_is_served_once_an_address_frees(
    served: Served, people: KubeApi
) -> None:
    for name in ("c1", "c2", "c3"):
        await people.create(IPADDRESSCLAIMS, claim(name))
    await until(lambda: ((served.claim("c3") or {}).get("status") or {}).get("conditions"))
    (condition,) = served.claim("c3")["status"]["conditions"]
    assert (condition["status"], condition["reason"]) == ("False", "PoolExhausted")
    assert served.address("c3") is None
    await people.delete(IPADDRESSCLAIMS, "c1", namespace=NS)
    await until(lambda: served.address("c3") is not None, limit=30)  # at the next retry
    assert served.address("c3")["spec"]["address"] == "10.0.0.10"


async def test_a_claim_whose_allocation_was_lost_takes_back_its_advertised_address(
    served: Served, people: KubeApi
) -> None:
    await people.create(IPADDRESSCLAIMS, claim("c1"))
    await people.create(IPADDRESSCLAIMS, claim("c2"))
    await until(lambda: served.address("c1") is not None and served.address("c2") is not None)
    served.allocator.release_owner("claim:capi/c2")  # as after a lost state file
    await people.patch(IPADDRESSCLAIMS, "c2", {"metadata": {"labels": {"touch": "1"}}}, namespace=NS)
    await until(lambda: served.allocator.allocations(owner="claim:capi/c2") != [])
    assert [a.address for a in served.allocator.allocations(owner="claim:capi/c2")] == ["10.0.0.11"]


async def test_a_claim_never_gets_a_second_address_while_its_first_is_advertised(
    served: Served, people: KubeApi
) -> None:
    await people.create(IPADDRESSCLAIMS, claim("c1"))
    await until(lambda: served.address("c1") is not None)
    served.allocator.release_owner("claim:capi/c1")  # lost, and meanwhile a pod took the address
    served.allocator.allocate("10.0.0.10", "cni:pod:eth0")
    await people.patch(IPADDRESSCLAIMS, "c1", {"metadata": {"labels": {"touch": "1"}}}, namespace=NS)
    await until(
        lambda: any(
            c["reason"] == "AlreadyAllocated"
            for c in (served.claim("c1").get("status") or {}).get("conditions", ())
        )
    )
    assert served.allocator.allocations(owner="claim:capi/c1") == []
    assert served.address("c1")["spec"]["address"] == "10.0.0.10"


async def test_an_address_made_before_the_node_label_is_labelled_before_it_is_deleted(
    served: Served, people: KubeApi
) -> None:
    """After an upgrade the admission policy lets an agent delete only IPAddresses labelled with its
    node: the write that lifts the protect finalizer labels an old one first."""
    await people.create(IPADDRESSCLAIMS, claim("c1"))
    await until(lambda: served.address("c1") is not None)
    await people.patch(IPADDRESSES, "c1", {"metadata": {"labels": None}}, namespace=NS)
    await until(lambda: not (served.address("c1") or {}).get("metadata", {}).get("labels"))
    patches: list[tuple[str, dict[str, Any]]] = []
    patch = served.api.patch

    async def recorded(kind: Any, name: str, body: dict[str, Any], **kwargs: Any) -> Any:
        patches.append((kind.plural, body))
        return await patch(kind, name, body, **kwargs)

    served.api.patch = recorded  # type: ignore[method-assign]
    await people.delete(IPADDRESSCLAIMS, "c1", namespace=NS)
    await until(lambda: served.claim("c1") is None)
    lifted = [body for plural, body in patches if plural == "ipaddresses"]
    assert lifted and lifted[-1]["metadata"]["labels"] == {NODE_LABEL: "n1"}
    assert served.address("c1") is None and served.allocator.used() == set()
