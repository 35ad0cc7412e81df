"""End to end, as an operator would: the real helm and kubectl, the chart, ``eni-ipam run``.

The fake API server (TLS, discovery, OpenAPI, RBAC) stands in for a cluster. helm installs the
chart (the CRD through the API, RBAC, the ConfigMap); ``eni-ipam run`` runs as a subprocess with the
configuration helm rendered into the ConfigMap and the token of the chart's ServiceAccount, so the
chart's RBAC is what it gets; so does a node agent, under the agent's ServiceAccount, whose
allocation is reported back in its pool's status. Nodes are created, pools edited and Nodes deleted
with kubectl; a ``helm upgrade`` changes a default; ``helm uninstall`` leaves only what
docs/deploy.md says stays.
It runs against the in-memory cloud and, in a second test, against moto's EC2 over HTTP.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.conftest import CHART
from tests.operator_shell import (
    MOTO_CREDENTIALS,
    NEEDS_KUBE_TOOLS,
    RELEASE,
    Operator,
    available,
    cni_add,
    exists,
    moto_fleet,
    nodes_manifest,
    operator,
    sim_values,
)

pytestmark = [
    pytest.mark.system,
    pytest.mark.timeout(300),
    NEEDS_KUBE_TOOLS,
]


async def test_an_operator_installs_runs_edits_upgrades_and_uninstalls_on_the_in_memory_cloud(
    tmp_path: Path,
) -> None:
    async with operator(tmp_path) as op:
        await op.helm("install", RELEASE, str(CHART), "--create-namespace", values=sim_values(4))
        await op.start_controller()
        await op.kubectl(
            "apply", "-f", "-", stdin=nodes_manifest({"n1": "i-0001", "n2": "i-0002", "n3": "i-0003"})
        )

        async def filled() -> bool:
            pools = await op.pools()
            return len(pools) == 3 and all(available(p) == 4 for p in pools.values())

        await op.wait("every node's pool filled", filled)

        # The node agent of n2, under the chart's agent RBAC: an ADD it answers from the pool is
        # reported back in the pool's status (a patch of enipools/status as the agent).
        socket = await op.start_agent("n2")
        await op.wait("the agent's socket", lambda: exists(socket))
        address = await cni_add(socket, "pod-1")
        await op.wait("n2 reports the address used", lambda: _used(op, "n2", address))

        # The printer columns, with real values.
        table = await op.kubectl("get", "enipools")
        header, *rows = table.splitlines()
        assert header.split() == [
            "NAME",
            "INSTANCE",
            "TYPE",
            "PROFILE",
            "AVAILABLE",
            "USED",
            "NEEDED",
            "READY",
            "AGE",
        ]
        first = _cells(header, rows[0])
        assert [first[k] for k in header.split()[:8]] == [
            "n1",
            "i-0001",
            "m5.large",
            "",
            "4",
            "0",
            "0",
            "True",
        ]

        # An edit to a pool's spec is acted on (a merge patch, as a cluster needs for a custom resource).
        await op.kubectl("patch", "enipool", "n1", "--type", "merge", "-p", '{"spec":{"preAllocate":6}}')
        await op.wait("n1 grown", lambda: _available_is(op, "n1", 6))

        # A deleted Node's pool goes (the garbage collector, then the controller's finalizer).
        await op.kubectl("delete", "node", "n2")
        await op.wait("n2's pool gone", lambda: _gone(op, "n2"))

        # helm upgrade changes a default: the controller restarts with it (as the Deployment's
        # config checksum makes it), and the pools that did not override it follow.
        assert await op.stop_controller() == 0
        await op.helm("upgrade", RELEASE, str(CHART), values=sim_values(5))
        await op.start_controller()
        await op.wait("n3 follows the new default", lambda: _available_is(op, "n3", 5))
        assert available((await op.pools())["n1"]) == 6  # n1's own value stays
        assert await op.stop_controller() == 0

        # helm uninstall: nothing of the release's stays but what docs/deploy.md says does.
        await op.helm("uninstall", RELEASE)
        left = await op.kubectl(
            "get",
            "all,configmaps,secrets,serviceaccounts,roles,rolebindings,clusterroles,clusterrolebindings",
            "--all-namespaces",
            "-l",
            f"app.kubernetes.io/instance={RELEASE}",
            "-o",
            "name",
        )
        assert left.strip() == ""
        stays = await op.kubectl("get", "crd", "-o", "name")
        assert "customresourcedefinition.apiextensions.k8s.io/enipools.eni-ipam.io" in stays.split()


async def test_a_node_shows_its_max_pods_and_loses_its_startup_taint_once_its_agent_serves(
    tmp_path: Path,
) -> None:
    columns = (
        "custom-columns=NODE:.metadata.name,MAXPODS:.metadata.annotations.eni-ipam\\.io/max-pods,"
        "TAINTS:.spec.taints[*].key"
    )

    async def row(name: str) -> list[str]:
        table = await op.kubectl("get", "node", name, "-o", columns)
        return table.splitlines()[1].split()

    async with operator(tmp_path) as op:
        await op.helm("install", RELEASE, str(CHART), "--create-namespace", values=sim_values(4))
        await op.start_controller()
        startup = {"key": "eni-ipam.io/not-ready", "effect": "NoSchedule"}
        await op.kubectl("apply", "-f", "-", stdin=nodes_manifest({"n1": "i-0001"}, taints=(startup,)))
        await op.wait("n1's pool filled", lambda: _available_is(op, "n1", 4))
        await op.wait("n1's max pods published", lambda: _row_is(row, ["n1", "29", "eni-ipam.io/not-ready"]))
        # The pool is ready, but no agent serves on the node: the taint stays.
        await asyncio.sleep(3)
        assert await row("n1") == ["n1", "29", "eni-ipam.io/not-ready"]

        await op.start_agent("n1")  # under the agent's RBAC and admission policy
        await op.wait("the startup taint lifted", lambda: _row_is(row, ["n1", "29", "<none>"]))
        log = (tmp_path / "agent-n1" / "agent.log").read_text()
        assert log.index("agent_serving") < log.index("startup_taint_lifted")


async def test_a_relabelled_node_moves_its_pool_to_its_profile_as_kubectl_shows(tmp_path: Path) -> None:
    values = sim_values(4)
    values["config"]["profiles"] = [
        {"name": "big", "node_selector": {"match_labels": {"node-group": "big"}}, "spec": {"pre_allocate": 6}}
    ]

    async def profile_column() -> str:
        header, row = (await op.kubectl("get", "enipool", "n1")).splitlines()
        return _cells(header, row)["PROFILE"]

    async with operator(tmp_path) as op:
        await op.helm("install", RELEASE, str(CHART), "--create-namespace", values=values)
        await op.start_controller()
        await op.kubectl("apply", "-f", "-", stdin=nodes_manifest({"n1": "i-0001"}))
        await op.wait("n1's pool filled from node_defaults", lambda: _available_is(op, "n1", 4))
        assert await profile_column() == ""  # node_defaults alone

        await op.kubectl("label", "node", "n1", "node-group=big")
        await op.wait("n1's pool follows profile big", lambda: _available_is(op, "n1", 6))
        assert await profile_column() == "big"
        listed = await op.kubectl("get", "enipools", "-l", "eni-ipam.io/profile=big", "-o", "name")
        assert listed.split() == ["enipool.eni-ipam.io/n1"]


def _cells(header: str, row: str) -> dict[str, str]:
    """A row of kubectl's table by column, cut where the header's columns start (an empty cell
    leaves no word to split on)."""
    starts = [m.start() for m in re.finditer(r"\S+", header)]
    names = header.split()
    ends = [*starts[1:], None]
    return {name: row[a:b].strip() for name, a, b in zip(names, starts, ends, strict=True)}


async def _row_is(row: Any, expected: list[str]) -> bool:
    return bool(await row("n1") == expected)


async def _used(op: Operator, name: str, address: str) -> bool:
    return address in (((await op.pools()).get(name) or {}).get("status") or {}).get("used", [])


async def _available_is(op: Operator, name: str, count: int) -> bool:
    return available((await op.pools()).get(name, {})) == count


async def _gone(op: Operator, name: str) -> bool:
    return name not in await op.pools()


async def test_the_controller_fills_pools_on_moto_ec2_over_http(tmp_path: Path) -> None:
    pytest.importorskip("moto", reason="moto (with the test kit, eni-ipam-testkit) is not installed")
    from eni_ipam_testkit.moto_ec2 import MotoServer

    region, zone = "us-east-1", "us-east-1a"
    with MotoServer() as server:
        fleet = moto_fleet(server.endpoint_url, 2, region=region, zone=zone)
        ec2, vpc, names = fleet.ec2, fleet.vpc, fleet.names
        async with operator(tmp_path) as op:
            values = {
                "config": {
                    "aws": {
                        "region": region,
                        "vpc_id": vpc,
                        "endpoint_url": server.endpoint_url,
                        "allow_plain_http": True,
                    },
                    "node_defaults": {"pre_allocate": 4},
                    "shutdown_timeout": "5s",
                }
            }
            await op.helm("install", RELEASE, str(CHART), "--create-namespace", values=values)
            await op.start_controller(MOTO_CREDENTIALS)
            await op.kubectl("apply", "-f", "-", stdin=nodes_manifest(names, zone))

            async def filled() -> bool:
                pools = await op.pools()
                return len(pools) == 2 and all(available(p) == 4 for p in pools.values())

            await op.wait("every node's pool filled on EC2", filled)
            for name, instance in names.items():
                described = ec2.describe_network_interfaces(
                    Filters=[{"Name": "attachment.instance-id", "Values": [instance]}]
                )["NetworkInterfaces"]
                held = {
                    a["PrivateIpAddress"]
                    for i in described
                    for a in i["PrivateIpAddresses"]
                    if not a["Primary"]
                }
                assert set((await op.pools())[name]["status"]["pool"]) == held
            assert await op.stop_controller() == 0
