"""Upgrades from the first release, as an operator makes them: the real helm and kubectl, the chart of
0.1.0 as it was released (tests/deploy/charts/eni-ipam-0.1.0), today's chart, ``eni-ipam run`` and a
real node agent, against the fake API server.

Helm never upgrades a chart's ``crds/``: after ``helm upgrade`` the cluster still serves 0.1.0's
ENIPool CRD, which prunes ``status.subnets`` (the agent hands out no address without it). Each path
must end with an agent handing out addresses, and no step may leave a pruned status unnoticed:

* the steps of docs/deploy.md section 8 (the CRD applied first, then ``helm upgrade``);
* a plain ``helm upgrade``: the controller updates the CRD itself;
* a plain ``helm upgrade`` with ``update_crd: false``: the controller writes no pruned status, says
  so (``/readyz``, the metric, the pools' Ready condition, an Event), and carries on without a
  restart once the CRD is applied;
* ``helm upgrade --reuse-values``: the release's 0.1.0 values lack every key added since.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from eni_ipam.kube.crd import APPLY_COMMAND, REVISION_ANNOTATION, revision
from eni_ipam.kube.resources import DEFAULTS_ANNOTATION, HELD_REASON
from tests.deploy.conftest import CHART
from tests.operator_shell import (
    HELM,
    NEEDS_KUBE_TOOLS,
    RELEASE,
    Operator,
    available,
    cni_add,
    exists,
    nodes_manifest,
    operator,
    sim_values,
)

FIRST = Path(__file__).parent / "deploy" / "charts" / "eni-ipam-0.1.0"

pytestmark = [
    pytest.mark.system,
    pytest.mark.timeout(300),
    NEEDS_KUBE_TOOLS,
]


def first_values(pre_allocate: int = 4) -> dict[str, Any]:
    """What an operator gave 0.1.0's chart (it had no node agent)."""
    values = sim_values(pre_allocate)
    del values["agent"]
    return values


async def install_first_release(op: Operator) -> None:
    """0.1.0 installed, two Nodes, and their pools as 0.1.0's controller made them: the spec from
    ``node_defaults``, owned by the Node, with the finalizer and no record of the defaults."""
    await op.helm("install", RELEASE, str(FIRST), "--create-namespace", values=first_values())
    await op.kubectl("apply", "-f", "-", stdin=nodes_manifest({"n1": "i-0001", "n2": "i-0002"}))
    for name in ("n1", "n2"):
        node = json.loads(await op.kubectl("get", "node", name, "-o", "json"))
        pool = {
            "apiVersion": "eni-ipam.io/v1alpha1",
            "kind": "ENIPool",
            "metadata": {
                "name": name,
                "finalizers": ["eni-ipam.io/pool"],
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Node", "name": name, "uid": node["metadata"]["uid"]}
                ],
            },
            "spec": {
                "instanceID": f"i-000{name[1]}",
                "instanceType": "m5.large",
                "zone": "us-east-1a",
                "preAllocate": 4,
            },
        }
        await op.kubectl("create", "-f", "-", stdin=json.dumps(pool))
    assert revision(await crd(op)) == 1


async def crd(op: Operator) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(await op.kubectl("get", "crd", "enipools.eni-ipam.io", "-o", "json"))
    return found


async def subnets_of(op: Operator, name: str) -> dict[str, Any]:
    return dict(((await op.pools()).get(name, {}).get("status") or {}).get("subnets") or {})


async def filled_with_subnets(op: Operator, *names: str, count: int = 4) -> None:
    async def done() -> bool:
        pools = await op.pools()
        return all(
            available(pools.get(n, {})) == count and (pools[n].get("status") or {}).get("subnets")
            for n in names
        )

    await op.wait(f"{names} filled, with their subnets", done)


async def agent_hands_out(op: Operator, node: str) -> str:
    socket = await op.start_agent(node)
    await op.wait("the agent's socket", lambda: exists(socket))
    address = await cni_add(socket, "pod-1")
    assert address.startswith("10.0.")
    return address


async def endpoint(log: Path) -> str:
    """The controller's /metrics, /healthz and /readyz address, from its log."""
    for _ in range(150):
        for line in (await asyncio.to_thread(log.read_text)).splitlines():
            if '"service_started"' in line:
                return f"http://{json.loads(line)['endpoint']}"
        await asyncio.sleep(0.2)
    raise AssertionError(f"no service_started in {log}")


async def get(url: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return response.status, await response.text()


async def events(op: Operator) -> list[tuple[str, str]]:
    listing = json.loads(await op.kubectl("get", "events", "-n", "default", "-o", "json"))
    return [
        (e["type"], e["reason"])
        for e in listing["items"]
        if e["involvedObject"].get("kind") == "CustomResourceDefinition"
    ]


async def test_the_documented_upgrade_from_0_1_0(tmp_path: Path) -> None:
    """docs/deploy.md section 8: the CRD first, then helm upgrade (the controller may not update it
    here, so only the documented step can have brought it)."""
    async with operator(tmp_path) as op:
        await install_first_release(op)
        await op.run(*APPLY_COMMAND.replace("deploy/helm/eni-ipam/crds/", str(CHART / "crds")).split())
        assert revision(await crd(op)) > 1
        values = {**sim_values(4), "config": {**sim_values(4)["config"], "kubernetes": {"update_crd": False}}}
        await op.helm("upgrade", RELEASE, str(CHART), values=values)
        await op.start_controller()
        await filled_with_subnets(op, "n1", "n2")
        await agent_hands_out(op, "n1")

        # node_defaults changed: a pool 0.1.0 made has no record of its defaults and keeps its
        # values; a pool made since follows; annotating the old pool as section 8 says makes it follow.
        await op.kubectl("apply", "-f", "-", stdin=nodes_manifest({"n3": "i-0003"}))
        await filled_with_subnets(op, "n3")
        assert await op.stop_controller() == 0
        values["config"]["node_defaults"] = {"pre_allocate": 5}
        await op.helm("upgrade", RELEASE, str(CHART), values=values)
        await op.start_controller()
        await filled_with_subnets(op, "n3", count=5)
        await asyncio.sleep(3)
        assert available((await op.pools())["n2"]) == 4
        spec = (await op.pools())["n2"]["spec"]
        own = {k: v for k, v in spec.items() if k not in ("instanceID", "instanceType", "zone")}
        await op.kubectl("annotate", "enipool", "n2", f"{DEFAULTS_ANNOTATION}={json.dumps(own)}")
        assert await op.stop_controller() == 0  # the defaults are applied when a term begins
        await op.start_controller()
        await filled_with_subnets(op, "n2", count=5)


async def test_a_plain_helm_upgrade_from_0_1_0_gets_the_crd_updated_by_the_controller(tmp_path: Path) -> None:
    async with operator(tmp_path) as op:
        await install_first_release(op)
        await op.helm("upgrade", RELEASE, str(CHART), values=sim_values(4))
        assert revision(await crd(op)) == 1  # helm left the CRD as it was
        await op.start_controller()
        await filled_with_subnets(op, "n1", "n2")
        updated = await crd(op)
        assert updated["metadata"]["annotations"][REVISION_ANNOTATION] == str(
            revision(yaml.safe_load((CHART / "crds" / "enipools.eni-ipam.io.yaml").read_text()))
        )
        await op.wait("the update told on the CRD", lambda: _has(op, ("Normal", "CRDUpdated")))
        await agent_hands_out(op, "n2")


async def test_a_plain_helm_upgrade_the_controller_may_not_follow_is_said_and_then_followed(
    tmp_path: Path,
) -> None:
    async with operator(tmp_path) as op:
        await install_first_release(op)
        values = {**sim_values(4), "config": {**sim_values(4)["config"], "kubernetes": {"update_crd": False}}}
        await op.helm("upgrade", RELEASE, str(CHART), values=values)
        log = tmp_path / "run.log"
        await op.start_controller(log=log)
        url = await endpoint(log)

        async def said() -> bool:
            pools = await op.pools()
            conditions = [(p.get("status") or {}).get("conditions") or [] for p in pools.values()]
            return all(
                any(c["type"] == "Ready" and c["reason"] == HELD_REASON for c in cs) for cs in conditions
            )

        await op.wait("every pool says why it has no status", said)
        for name in ("n1", "n2"):
            assert await subnets_of(op, name) == {}
            ready = next(c for c in (await op.pools())[name]["status"]["conditions"] if c["type"] == "Ready")
            assert ready["status"] == "False" and "kubectl apply" in ready["message"]

        async def readyz_names_the_crd() -> bool:
            # Polled: the replica's view of its caches is refreshed every half second, and until
            # then /readyz may name them instead.
            code, body = await get(f"{url}/readyz")
            return code == 503 and "status.subnets" in body and "kubectl apply" in body

        await op.wait("/readyz says why and how to fix it", readyz_names_the_crd, limit=10)
        _, metrics = await get(f"{url}/metrics")
        assert 'eni_ipam_crd_state{state="outdated"} 1.0' in metrics
        assert 'eni_ipam_status_writes_total{outcome="held"}' in metrics
        await op.wait("the Event on the CRD", lambda: _has(op, ("Warning", "CRDOutdated")))
        assert '"crd_not_current"' in await asyncio.to_thread(log.read_text)
        assert revision(await crd(op)) == 1  # not allowed to update it

        # The operator runs the command the controller named: followed without a restart.
        await op.run(*APPLY_COMMAND.replace("deploy/helm/eni-ipam/crds/", str(CHART / "crds")).split())
        await filled_with_subnets(op, "n1", "n2")

        async def ready() -> bool:
            return (await get(f"{url}/readyz"))[0] == 200

        await op.wait("/readyz is 200 again", ready, limit=10)
        assert op.controller is not None and op.controller.returncode is None  # the same process
        await agent_hands_out(op, "n1")


async def test_helm_upgrade_reuse_values_from_0_1_0(tmp_path: Path) -> None:
    """The 0.1.0 release's values lack every key added since (networkPolicy, agent, ...): the
    templates take them from today's defaults, and the controller runs on the release's config."""
    async with operator(tmp_path) as op:
        await install_first_release(op)
        await op.helm("upgrade", RELEASE, str(CHART), "--reuse-values")
        manifest = await op.run(HELM, "get", "manifest", RELEASE, "--namespace", "kube-system")
        kinds = {d["kind"] for d in yaml.safe_load_all(manifest) if d}
        assert "NetworkPolicy" not in kinds and "DaemonSet" not in kinds  # off, as by default
        role = json.loads(await op.kubectl("get", "clusterrole", RELEASE, "-o", "json"))
        assert any("customresourcedefinitions" in r["resources"] for r in role["rules"])
        config = yaml.safe_load(
            await op.kubectl(
                "get", "configmap", RELEASE, "-n", "kube-system", "-o", "jsonpath={.data.config\\.yaml}"
            )
        )
        assert config["provider"] == "sim" and config["node_defaults"]["pre_allocate"] == 4
        await op.start_controller()
        await filled_with_subnets(op, "n1", "n2")


async def _has(op: Operator, event: tuple[str, str]) -> bool:
    return event in await events(op)
