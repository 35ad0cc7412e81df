"""An operator's shell against a Kubernetes API server: the real helm and kubectl, the chart,
``eni-ipam run`` and ``eni-ipam agent`` as subprocesses under the chart's ServiceAccounts.

Shared by tests/test_operator_e2e.py (the in-process fake API server) and tests/e2e/ (the
``eni-ipam dev-cluster`` subprocess): anything with FakeKube's ``write_kubeconfig`` serves.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, Protocol

import aiohttp
import pytest
import yaml

from eni_ipam_testkit.fake_kube import FakeKube

BIN = Path(sys.executable).parent
HELM, KUBECTL = BIN / "helm", BIN / "kubectl"
NEEDS_KUBE_TOOLS = pytest.mark.skipif(
    not (HELM.exists() and KUBECTL.exists()),
    reason=f"{HELM} or {KUBECTL} is missing (make kube-tools installs them)",
)
"""The mark of a test that drives the real helm and kubectl."""
NAMESPACE = "kube-system"
RELEASE = "eni-ipam"

SIM_CLOUD = {
    "vpcs": [{"id": "vpc-1", "cidr": "10.0.0.0/16"}],
    "subnets": [{"id": "s-1", "vpc": "vpc-1", "zone": "us-east-1a", "cidr": "10.0.0.0/22"}],
    "security_groups": [{"id": "sg-1", "vpc": "vpc-1"}],
    "instances": [
        {"id": f"i-000{n}", "type": "m5.large", "subnet": "s-1", "security_groups": ["sg-1"]}
        for n in (1, 2, 3)
    ],
}


class Cluster(Protocol):
    """What the shell needs of an API server: kubeconfigs, for the admin or for a ServiceAccount."""

    def write_kubeconfig(
        self, path: str | os.PathLike[str], *, service_account: tuple[str, str] | None = None
    ) -> None: ...


class Operator:
    """An operator's shell: helm and kubectl against the fake cluster, and the controller process."""

    def __init__(self, kube: Cluster, home: Path) -> None:
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
        """The controller started last."""
        self.replicas: list[asyncio.subprocess.Process] = []
        """Every controller started (replicas of one Deployment)."""
        self.agents: list[asyncio.subprocess.Process] = []

    async def run(self, *command: str | Path, stdin: str | None = None, check: bool = True) -> str:
        """Run a command without blocking the loop (the fake API server may answer on this loop)."""
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
        try:
            async with asyncio.timeout(limit):
                while not await ready():
                    await asyncio.sleep(0.2)
        except TimeoutError:
            raise AssertionError(f"not within {limit:g}s: {what}") from None

    async def start_controller(
        self, extra_env: dict[str, str] | None = None, log: Path | None = None
    ) -> asyncio.subprocess.Process:
        """``eni-ipam run`` as the chart runs it: the ConfigMap's configuration, the chart's
        ServiceAccount token (so only the chart's RBAC applies), the pod's namespace and name
        (``POD_NAME`` in ``extra_env`` names another replica). Its output goes to ``log`` when
        given (otherwise to the test's own)."""
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
            "ENI_IPAM_SERVER__PROBE_PORT": "0",
            **(extra_env or {}),
        }
        output = log.open("w") if log is not None else None
        try:
            self.controller = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "eni_ipam.cli",
                "run",
                "--config",
                str(self.home / "config.yaml"),
                env=env,
                stdout=output,
                stderr=output,
            )
            self.replicas.append(self.controller)
        finally:
            if output is not None:
                output.close()  # the child holds its own descriptor
        return self.controller

    async def write_agent_kubeconfig(self, path: Path, node: str) -> None:
        """A kubeconfig with the token the DaemonSet's pod on ``node`` gets: a TokenRequest bound to
        that pod (created here, host network, as the chart runs it), whose node-name claim is what the
        chart's admission policy confines the agent with. Through kubectl, so the in-process server
        and ``eni-ipam dev-cluster`` serve it alike."""
        account = f"{RELEASE}-agent"
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"{account}-{node}", "namespace": NAMESPACE},
            "spec": {
                "nodeName": node,
                "hostNetwork": True,
                "serviceAccountName": account,
                "containers": [{"name": "agent", "image": "eni-ipam"}],
            },
        }
        await self.kubectl("apply", "-f", "-", stdin=json.dumps(pod))
        request = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": f"{account}-{node}"}},
        }
        url = f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{account}/token"
        answer = json.loads(await self.kubectl("create", "--raw", url, "-f", "-", stdin=json.dumps(request)))
        config = yaml.safe_load(await self.kubectl("config", "view", "--raw", "--minify"))
        user = f"{NAMESPACE}-{account}-{node}"
        config["users"] = [{"name": user, "user": {"token": answer["status"]["token"]}}]
        for context in config["contexts"]:
            context["context"]["user"] = user
        await asyncio.to_thread(path.write_text, yaml.safe_dump(config))

    async def start_agent(self, node: str, *, metrics_port: int = 0) -> Path:
        """``eni-ipam agent`` for ``node`` as the DaemonSet runs it: the agent ConfigMap's
        configuration (its paths moved into the test's directory, as a hostPath would hold them)
        and the chart's agent ServiceAccount with a token bound to its pod on ``node``; /metrics on
        127.0.0.1:``metrics_port`` (0: any free port). Its output goes to agent-NODE/agent.log.
        Returns the socket of its CNI API."""
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
            server={"host": "127.0.0.1", "port": metrics_port, "probe_port": 0},
        )
        account = base / "agent.kubeconfig"
        await self.write_agent_kubeconfig(account, node)
        config["kubernetes"] = {**(config.get("kubernetes") or {}), "kubeconfig": str(account)}
        (base / "agent.yaml").write_text(yaml.safe_dump(config))
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("ENI_IPAM_")}, "NODE_NAME": node}
        with (base / "agent.log").open("w") as log:
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

    async def kill_all(self) -> None:
        """Kill the controller and the agents that still run (a test's way out, whatever happened)."""
        for process in [*self.replicas, *self.agents]:
            if process.returncode is None:
                process.kill()
                await process.wait()


def nodes_manifest(
    instances: dict[str, str], zone: str = "us-east-1a", taints: tuple[dict[str, str], ...] = ()
) -> str:
    """Nodes as the cloud controller registers them (``taints``: those they register with)."""
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
            "spec": {
                "providerID": f"aws:///{zone}/{instance}",
                **({"taints": list(taints)} if taints else {}),
            },
        }
        for name, instance in instances.items()
    )


@contextlib.asynccontextmanager
async def operator(tmp_path: Path) -> AsyncIterator[Operator]:
    """An operator's shell against the in-process fake API server; its processes die with the block."""
    async with FakeKube() as kube:
        op = Operator(kube, tmp_path)
        try:
            yield op
        finally:
            await op.kill_all()


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


async def exists(path: Path) -> bool:
    return await asyncio.to_thread(path.exists)


async def cni_add(socket: Path, container: str) -> str:
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


@dataclasses.dataclass(frozen=True)
class MotoFleet:
    """EC2 instances in one subnet of moto's EC2 over HTTP, for a controller to fill."""

    ec2: Any
    """A boto3 EC2 client of the server (the test's own view of the cloud)."""
    vpc: str
    names: dict[str, str]
    """Node name → instance id."""


def moto_fleet(
    endpoint_url: str, instances: int, *, region: str = "us-east-1", zone: str = "us-east-1a"
) -> MotoFleet:
    """A VPC, a /20 subnet and ``instances`` m5.large instances in it, named ``ip-0``, ``ip-1``…"""
    import boto3

    ec2 = boto3.client(
        "ec2",
        region_name=region,
        endpoint_url=endpoint_url,
        aws_access_key_id="e2e",
        aws_secret_access_key="e2e",
    )
    vpc = ec2.create_vpc(CidrBlock="10.1.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.1.0.0/20", AvailabilityZone=zone)["Subnet"]
    image = ec2.register_image(Name="e2e", RootDeviceName="/dev/sda1")["ImageId"]
    launched = ec2.run_instances(
        ImageId=image,
        MinCount=instances,
        MaxCount=instances,
        InstanceType="m5.large",
        SubnetId=subnet["SubnetId"],
    )["Instances"]
    return MotoFleet(ec2, vpc, {f"ip-{n}": i["InstanceId"] for n, i in enumerate(launched)})


MOTO_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "e2e", "AWS_SECRET_ACCESS_KEY": "e2e"}
"""What the controller signs moto's requests with (moto checks no signature)."""
