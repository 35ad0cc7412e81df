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
import contextlib
import json
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from eni_ipam.testing.fake_kube import FakeKube
from tests.deploy.conftest import CHART

BIN = Path(sys.executable).parent
HELM, KUBECTL = BIN / "helm", BIN / "kubectl"
NAMESPACE = "kube-system"
RELEASE = "eni-ipam"

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.skipif(
        not (HELM.exists() and KUBECTL.exists()),
        reason=f"{HELM} or {KUBECTL} is missing (make kube-tools installs them)",
    ),
]

SIM_CLOUD = {
    "vpcs": [{"id": "vpc-1", "cidr": "10.0.0.0/16"}],
    "subnets": [{"id": "s-1", "vpc": "vpc-1", "zone": "us-east-1a", "cidr": "10.0.0.0/22"}],
    "security_groups": [{"id": "sg-1", "vpc": "vpc-1"}],
    "instances": [
        {"id": f"i-000{n}", "type": "m5.large", "subnet": "s-1", "security_groups": ["sg-1"]}
        for n in (1, 2, 3)
    ],
}


class Operator:
    """An operator's shell: helm and kubectl against the fake cluster, and the controller process."""

    def __init__(self, kube: FakeKube, home: Path) -> None:
        self.kube, self.home = kube, home
        self.kubeconfig = home / "admin.kubeconfig"
        kube.write_kubeconfig(self.kubeconfig)
        self.env = {
            "PATH": f"{BIN}:/usr/bin:/bin",
            "HOME": str(home),
            "KUBECONFIG": str(self.kubeconfig),
            # helm keeps its cache, configuration and data in the test's own directory.
            "HELM_CACHE_HOME": str(home / "helm-cache"),
            "HELM_CONFIG_HOME": str(home / "helm-config"),
            "HELM_DATA_HOME": str(home / "helm-data"),
        }
        self.controller: asyncio.subprocess.Process | None = None
        self.agents: list[asyncio.subprocess.Process] = []

    async def run(self, *command: str | Path, stdin: str | None = None, check: bool = True) -> str:
        """Run a command without blocking the loop (the fake API server answers on this loop)."""
        process = await asyncio.create_subprocess_exec(
            *map(str, command),
            env=self.env,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await process.communicate(stdin.encode() if stdin is not None else None)
        if check and process.returncode != 0:
            raise AssertionError(f"{command} exited {process.returncode}: {err.decode()}{out.decode()}")
        return out.decode()

    async def kubectl(self, *args: str, stdin: str | None = None) -> str:
        return await self.run(KUBECTL, *args, stdin=stdin)

    async def helm(self, *args: str, values: dict[str, Any] | None = None) -> str:
        extra: tuple[str, ...] = ()
        if values is not None:
            path = self.home / f"values-{len(list(self.home.glob('values-*')))}.yaml"
            path.write_text(yaml.safe_dump(values))
            extra = ("-f", str(path))
        return await self.run(HELM, *args, "--namespace", NAMESPACE, *extra)

    async def pools(self) -> dict[str, dict[str, Any]]:
        listing = json.loads(await self.kubectl("get", "enipools", "-o", "json"))
        return {item["metadata"]["name"]: item for item in listing["items"]}

    async def wait(self, what: str, ready: Callable[[], Any], limit: float = 60.0) -> None:
        async with asyncio.timeout(limit):
            while not await ready():
                await asyncio.sleep(0.2)

    async def start_controller(self, extra_env: dict[str, str] | None = None) -> None:
        """``eni-ipam run`` as the chart runs it: the ConfigMap's configuration, the chart's
        ServiceAccount token (so only the chart's RBAC applies), the pod's namespace and name."""
        config = await self.kubectl(
            "get", "configmap", RELEASE, "--namespace", NAMESPACE, "-o", "jsonpath={.data.config\\.yaml}"
        )
        (self.home / "config.yaml").write_text(config)
        account = self.home / "controller.kubeconfig"
        self.kube.write_kubeconfig(account, service_account=(NAMESPACE, RELEASE))
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("ENI_IPAM_", "AWS_"))},
            "POD_NAMESPACE": NAMESPACE,
            "POD_NAME": f"{RELEASE}-0",
            "ENI_IPAM_KUBERNETES__KUBECONFIG": str(account),
            "ENI_IPAM_SERVER__PORT": "0",
            **(extra_env or {}),
        }
        self.controller = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "eni_ipam.cli", "run", "--config", str(self.home / "config.yaml"), env=env
        )

    async def start_agent(self, node: str) -> Path:
        """``eni-ipam agent`` for ``node`` as the DaemonSet runs it: the agent ConfigMap's
        configuration (its paths moved into the test's directory, as a hostPath would hold them)
        and the chart's agent ServiceAccount. Returns the socket of its CNI API."""
        text = await self.kubectl(
            "get",
            "configmap",
            f"{RELEASE}-agent",
            "--namespace",
            NAMESPACE,
            "-o",
            "jsonpath={.data.config\\.yaml}",
        )
        config = yaml.safe_load(text)
        base = self.home / f"agent-{node}"
        base.mkdir()
        config.update(
            socket=str(base / "agent.sock"),
            state_dir=str(base / "state"),
            cni_cache_dir=str(base / "cni-cache"),
            server={"host": "127.0.0.1", "port": 0},
        )
        (base / "agent.yaml").write_text(yaml.safe_dump(config))
        account = base / "agent.kubeconfig"
        self.kube.write_kubeconfig(account, service_account=(NAMESPACE, f"{RELEASE}-agent"))
        config["kubernetes"] = {**(config.get("kubernetes") or {}), "kubeconfig": str(account)}
        (base / "agent.yaml").write_text(yaml.safe_dump(config))
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("ENI_IPAM_")}, "NODE_NAME": node}
        log = (base / "agent.log").open("w")
        self.agents.append(
            await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "eni_ipam.cli",
                "agent",
                "--config",
                str(base / "agent.yaml"),
                env=env,
                stdout=log,
                stderr=log,
            )
        )
        return base / "agent.sock"

    async def stop_controller(self) -> int:
        assert self.controller is not None
        self.controller.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(self.controller.wait(), 30)
        self.controller = None
        return code


def nodes_manifest(instances: dict[str, str], zone: str = "us-east-1a") -> str:
    return yaml.safe_dump_all(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {
                    "topology.kubernetes.io/zone": zone,
                    "node.kubernetes.io/instance-type": "m5.large",
                },
            },
            "spec": {"providerID": f"aws:///{zone}/{instance}"},
        }
        for name, instance in instances.items()
    )


@contextlib.asynccontextmanager
async def operator(tmp_path: Path) -> AsyncIterator[Operator]:
    async with FakeKube() as kube:
        op = Operator(kube, tmp_path)
        try:
            yield op
        finally:
            for process in [op.controller, *op.agents]:
                if process is not None and process.returncode is None:
                    process.kill()
                    await process.wait()


def sim_values(pre_allocate: int) -> dict[str, Any]:
    return {
        "agent": {"enabled": True, "config": {"claims": False}},
        "config": {
            "provider": "sim",
            "aws": None,
            "sim": {"latency": 0, "cloud": SIM_CLOUD},
            "node_defaults": {"pre_allocate": pre_allocate},
            "shutdown_timeout": "5s",
            "kubernetes": {"lease_duration": "3s", "renew_deadline": "2s", "retry_period": "0.5s"},
        },
    }


def available(pool: dict[str, Any]) -> int:
    return int(((pool.get("status") or {}).get("stats") or {}).get("available", -1))


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
        await op.wait("the agent's socket", lambda: _exists(socket))
        address = await _cni_add(socket, "pod-1")
        await op.wait("n2 reports the address used", lambda: _used(op, "n2", address))

        # The printer columns, with real values.
        table = await op.kubectl("get", "enipools")
        header, *rows = table.splitlines()
        assert header.split() == ["NAME", "INSTANCE", "TYPE", "AVAILABLE", "USED", "NEEDED", "READY", "AGE"]
        assert rows[0].split()[:7] == ["n1", "i-0001", "m5.large", "4", "0", "0", "True"]

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


async def _exists(path: Path) -> bool:
    return await asyncio.to_thread(path.exists)


async def _cni_add(socket: Path, container: str) -> str:
    """What the CNI plugin asks the agent for a container's interface: its address."""
    connector = aiohttp.UnixConnector(path=str(socket))
    async with aiohttp.ClientSession(connector=connector) as session:
        for _ in range(100):  # the agent answers "try again" until it has read its pool
            async with session.post(
                "http://agent/v1/cni/add", json={"containerID": container, "ifname": "eth0"}
            ) as response:
                body = await response.json()
            if response.status == 200:
                return str(body["ips"][0]["address"]).split("/")[0]
            await asyncio.sleep(0.2)
    raise AssertionError(f"the agent refused the ADD: {body}")


async def _used(op: Operator, name: str, address: str) -> bool:
    return address in (((await op.pools()).get(name) or {}).get("status") or {}).get("used", [])


async def _available_is(op: Operator, name: str, count: int) -> bool:
    return available((await op.pools()).get(name, {})) == count


async def _gone(op: Operator, name: str) -> bool:
    return name not in await op.pools()


async def test_the_controller_fills_pools_on_moto_ec2_over_http(tmp_path: Path) -> None:
    pytest.importorskip("moto", reason="moto (the eni-ipam[moto] extra) is not installed")
    import boto3

    from eni_ipam.testing.moto_ec2 import MotoServer

    region, zone = "us-east-1", "us-east-1a"
    with MotoServer() as server:
        ec2 = boto3.client(
            "ec2",
            region_name=region,
            endpoint_url=server.endpoint_url,
            aws_access_key_id="e2e",
            aws_secret_access_key="e2e",
        )
        vpc = ec2.create_vpc(CidrBlock="10.1.0.0/16")["Vpc"]["VpcId"]
        subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.1.0.0/20", AvailabilityZone=zone)["Subnet"]
        image = ec2.register_image(Name="e2e", RootDeviceName="/dev/sda1")["ImageId"]
        instances = ec2.run_instances(
            ImageId=image, MinCount=2, MaxCount=2, InstanceType="m5.large", SubnetId=subnet["SubnetId"]
        )["Instances"]
        names = {f"ip-{n}": i["InstanceId"] for n, i in enumerate(instances)}
        async with operator(tmp_path) as op:
            values = {
                "config": {
                    "aws": {"region": region, "vpc_id": vpc, "endpoint_url": server.endpoint_url},
                    "node_defaults": {"pre_allocate": 4},
                    "shutdown_timeout": "5s",
                }
            }
            await op.helm("install", RELEASE, str(CHART), "--create-namespace", values=values)
            await op.start_controller({"AWS_ACCESS_KEY_ID": "e2e", "AWS_SECRET_ACCESS_KEY": "e2e"})
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
