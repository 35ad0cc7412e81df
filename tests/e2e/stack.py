"""The processes of the Prometheus end-to-end test, and a small client of Prometheus's HTTP API.

``running_stack(home)`` starts, as subprocesses on free ports of 127.0.0.1, and stops them all on the
way out whatever happens:

- ``eni-ipam dev-cluster`` (the fake API server), the chart installed into it by ``helm install``;
- ``eni-ipam run`` as the chart runs it (tests/operator_shell.py) on the in-memory cloud, with Nodes
  created by kubectl, and ``eni-ipam agent`` for one of them under the agent's ServiceAccount;
- ``eni-ipam demo`` (a simulated cluster with pod churn);
- a real ``prometheus`` scraping the three every second, with the chart's alert rules loaded;

and a task that starts and stops pods through the agent's CNI API, so the controller's pools grow
and shrink (allocations, the release handshake, releases).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import random
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from bench.agent_soak import free_ports
from tests.deploy.conftest import CHART, merge_values, one, render
from tests.operator_shell import (
    HELM,
    KUBECTL,
    NAMESPACE,
    RELEASE,
    Operator,
    available,
    cni_add,
    exists,
)

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
SCRAPE_INTERVAL = 1.0
"""Seconds between scrapes (and rule evaluations): rate() windows fill in seconds."""
RUN_SECONDS = float(os.environ.get("ENI_IPAM_E2E_RUN_SECONDS", "150"))
"""How long Prometheus scrapes before the checks: long enough for two points of the dashboard's
``[1h:1m]`` subquery and for every rate window (override with ENI_IPAM_E2E_RUN_SECONDS)."""
DEMO_JOB = f"{RELEASE}-demo"
"""The demo's scrape job: a simulated cluster of its own beside the one ``eni-ipam run`` keeps."""
AGENT_NODE = "n1"
IGNORED_NODE = "n-gce"
"""A Node of another cloud (a ``gce://`` providerID): it gets no pool; eni_ipam_nodes_ignored counts it."""

CLOUD = {
    "vpcs": [{"id": "vpc-1", "cidr": "10.0.0.0/16"}],
    # A /20: the pools' growth is far from predicting the subnet's exhaustion (a critical alert).
    "subnets": [{"id": "subnet-e2e", "vpc": "vpc-1", "zone": "us-east-1a", "cidr": "10.0.0.0/20"}],
    "security_groups": [{"id": "sg-1", "vpc": "vpc-1"}],
    "instances": [
        {"id": f"i-000{n}", "type": "m5.large", "subnet": "subnet-e2e", "security_groups": ["sg-1"]}
        for n in (1, 2, 3)
    ],
}
VALUES: dict[str, Any] = {
    "agent": {"enabled": True, "config": {"claims": False, "report_interval": "1s"}},
    "config": {
        "provider": "sim",
        "aws": None,
        "sim": {"latency": "20ms", "cloud": CLOUD},
        "node_defaults": {"pre_allocate": 2},
        "settings": {
            # Pods come and go on n1: excess addresses go back (through the agent's handshake) soon.
            "release_excess_ips": True,
            "excess_ip_release_delay": "2s",
            "resync_interval": "15s",
            "gc_interval": "10s",
        },
        "shutdown_timeout": "5s",
        "kubernetes": {"lease_duration": "3s", "renew_deadline": "2s", "retry_period": "0.5s"},
    },
}
"""The chart's values: the in-memory cloud, the node agent on, short timings."""
RULE_VALUES = merge_values(VALUES, {"prometheusRule": {"enabled": True}})
"""The same release with its PrometheusRule (which helm install cannot create here: the fake API
server has no prometheus-operator CRDs); rendered by ``helm template`` instead."""


def now() -> float:
    """Wall-clock epoch seconds, as Prometheus timestamps its samples."""
    return datetime.now(UTC).timestamp()


def tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


async def wait_for(what: str, check: Callable[[], Awaitable[bool]], limit: float, poll: float = 0.25) -> None:
    """Return once ``await check()`` is true; AssertionError naming ``what`` after ``limit`` seconds."""
    try:
        async with asyncio.timeout(limit):
            while not await check():
                await asyncio.sleep(poll)
    except TimeoutError:
        raise AssertionError(f"not within {limit:g}s: {what}") from None


@dataclass
class Service:
    """A subprocess of the stack, with the file its stdout and stderr go to."""

    name: str
    process: asyncio.subprocess.Process
    log: Path
    url: str = ""
    """Its /metrics base URL, when it serves one."""


class DevCluster:
    """``eni-ipam dev-cluster`` seen as a :class:`tests.operator_shell.Cluster`: its admin kubeconfig,
    and ServiceAccount kubeconfigs with a token from a TokenRequest (``kubectl create token``)."""

    def __init__(self, admin: Path, env: Mapping[str, str]) -> None:
        self.admin, self.env = admin, dict(env)

    def write_kubeconfig(
        self, path: str | os.PathLike[str], *, service_account: tuple[str, str] | None = None
    ) -> None:
        config = yaml.safe_load(self.admin.read_text())
        if service_account is not None:
            namespace, name = service_account
            token = subprocess.run(
                [str(KUBECTL), "--kubeconfig", str(self.admin), "-n", namespace, "create", "token", name],
                env=self.env,
                capture_output=True,
                text=True,
                check=True,
                timeout=30,
            ).stdout.strip()
            user = f"{namespace}-{name}"
            config["users"] = [{"name": user, "user": {"token": token}}]
            for context in config["contexts"]:
                context["context"]["user"] = user
        Path(path).write_text(yaml.safe_dump(config))


@dataclass
class Churn:
    """Pods starting and stopping on the agent's node, through its CNI API."""

    adds: int = 0
    dels: int = 0
    refused: int = 0
    held: list[str] = field(default_factory=list)

    async def run(self, socket_path: Path, rng: random.Random) -> None:
        """Every half second a pod starts or stops. The number of pods follows a triangle wave
        between 1 and 12 over 40 s: going up, the pool's free addresses fall below the watermark and
        the controller allocates (a second interface once the primary's nine are taken); going down,
        the excess is released through the handshake. Between, a pod is replaced now and then."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        connector = aiohttp.UnixConnector(path=str(socket_path))
        async with aiohttp.ClientSession(connector=connector) as session:
            while True:
                phase = ((loop.time() - started) % 40.0) / 40.0
                target = 1 + round(11 * (1 - abs(2 * phase - 1)))
                if len(self.held) > target or (self.held and len(self.held) == target and rng.random() < 0.3):
                    pod = self.held.pop(rng.randrange(len(self.held)))
                    await self._call(session, "del", pod)
                    self.dels += 1
                if len(self.held) < target:
                    pod = f"pod-{self.adds + self.refused}"
                    if await self._call(session, "add", pod):
                        self.held.append(pod)
                        self.adds += 1
                    else:
                        self.refused += 1  # the pool is short: the controller is on it
                await asyncio.sleep(0.5)

    @staticmethod
    async def _call(session: aiohttp.ClientSession, verb: str, pod: str) -> bool:
        body = {"containerID": pod, "ifname": "eth0"}
        async with session.post(f"http://agent/v1/cni/{verb}", json=body) as response:
            await response.read()
            if verb == "del" and response.status != 200:
                raise AssertionError(f"the agent refused to DEL {pod}: {response.status}")
            return response.status == 200


class Prometheus:
    """A client of Prometheus's HTTP API (the answers as Prometheus gives them, errors included)."""

    def __init__(self, url: str, session: aiohttp.ClientSession) -> None:
        self.url, self.session = url, session

    async def get(self, path: str, params: Mapping[str, str] | list[tuple[str, str]] | None = None) -> Any:
        async with self.session.get(self.url + path, params=params) as response:
            body = await response.json(content_type=None)
            if response.status != 200:
                raise AssertionError(f"GET {path} {params}: HTTP {response.status}: {body}")
            return body["data"]

    async def query(self, expr: str) -> tuple[int, dict[str, Any]]:
        """An instant query at now: (HTTP status, decoded body)."""
        async with self.session.post(self.url + "/api/v1/query", data={"query": expr}) as response:
            return response.status, await response.json(content_type=None)

    async def query_range(
        self, expr: str, start: float, end: float, step: float
    ) -> tuple[int, dict[str, Any]]:
        data = {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
        async with self.session.post(self.url + "/api/v1/query_range", data=data) as response:
            return response.status, await response.json(content_type=None)

    async def label_values(self, label: str, selector: str) -> list[str]:
        params = [("match[]", selector)] if selector else []
        values: list[str] = await self.get(f"/api/v1/label/{label}/values", params)
        return values


def finite_samples(data: Mapping[str, Any]) -> tuple[int, int]:
    """(series or values in an instant or range result, how many hold at least one non-NaN value)."""
    kind, result = data["resultType"], data["result"]
    if kind == "scalar" or kind == "string":
        return 1, int(kind == "string" or not math.isnan(float(result[1])))
    if kind == "vector":
        return len(result), sum(1 for s in result if not math.isnan(float(s["value"][1])))
    return len(result), sum(1 for s in result if any(not math.isnan(float(v)) for _, v in s["values"]))


@dataclass
class Stack:
    home: Path
    op: Operator
    services: dict[str, Service]
    prometheus: Prometheus
    rules: list[dict[str, Any]]
    """The rendered alert rules, as loaded into Prometheus."""
    critical_severity: str
    started: float
    """When Prometheus started scraping (epoch seconds)."""
    churn: Churn
    churn_task: asyncio.Task[None]

    def diagnostics(self) -> str:
        """The last lines of every process's output, and the churn's counts: for failure messages."""
        parts = [f"churn: {self.churn.adds} adds, {self.churn.dels} dels, {self.churn.refused} refused"]
        for service in self.services.values():
            state = (
                "running" if service.process.returncode is None else f"exited {service.process.returncode}"
            )
            parts.append(f"--- {service.name} ({state}), {service.log}:\n{tail(service.log)}")
        return "\n".join(parts)

    def check_alive(self) -> None:
        dead = [s.name for s in self.services.values() if s.process.returncode is not None]
        if self.churn_task.done() and not self.churn_task.cancelled() and self.churn_task.exception():
            raise AssertionError(
                f"the pod churn failed: {self.churn_task.exception()!r}\n{self.diagnostics()}"
            )
        if dead:
            raise AssertionError(f"exited early: {', '.join(dead)}\n{self.diagnostics()}")


def require_tools() -> None:
    """Skip, saying why, when a tool the test runs is missing."""
    for tool, how in [
        (HELM, "make kube-tools installs it"),
        (KUBECTL, "make kube-tools installs it"),
        (Path(PROMETHEUS), "make prometheus-tools installs it"),
        (Path(PROMTOOL), "make prometheus-tools installs it"),
    ]:
        if not os.access(tool, os.X_OK):
            pytest.skip(f"{tool} is missing ({how})")


def write_rules(home: Path) -> tuple[Path, list[dict[str, Any]], str]:
    """The chart's PrometheusRule, rendered by ``helm template``, as a plain Prometheus rule file
    (its ``spec``), checked by ``promtool check rules``. Returns the file, its rules and the critical
    severity's label value."""
    spec = one(render(RULE_VALUES), "PrometheusRule")["spec"]
    path = home / "rules.yml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    checked = subprocess.run(
        [PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True, check=False, timeout=60
    )
    assert checked.returncode == 0, f"promtool check rules:\n{checked.stdout}{checked.stderr}"
    rules = [rule for group in spec["groups"] for rule in group["rules"]]
    severity = str(RULE_VALUES.get("prometheusRule", {}).get("criticalSeverity") or "critical")
    return path, rules, severity


def prometheus_config(targets: Mapping[str, tuple[str, dict[str, str]]], rules: Path) -> dict[str, Any]:
    """Scrape every target each second; each job carries the labels a prometheus-operator target has
    (namespace, pod, service, endpoint, container), which the dashboard groups by."""
    return {
        "global": {
            "scrape_interval": f"{SCRAPE_INTERVAL:g}s",
            "scrape_timeout": f"{SCRAPE_INTERVAL:g}s",
            "evaluation_interval": f"{SCRAPE_INTERVAL:g}s",
        },
        "rule_files": [str(rules)],
        "scrape_configs": [
            {"job_name": job, "static_configs": [{"targets": [address], "labels": labels}]}
            for job, (address, labels) in targets.items()
        ],
    }


async def start(name: str, home: Path, *argv: str, env: Mapping[str, str] | None = None) -> Service:
    log = home / f"{name}.log"
    with log.open("w") as out:
        process = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=out, env=dict(env or os.environ)
        )
    return Service(name, process, log)


async def stop(process: asyncio.subprocess.Process, grace: float = 15.0) -> None:
    """SIGTERM, and SIGKILL after ``grace`` seconds."""
    if process.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(signal.SIGTERM)
    try:
        await asyncio.wait_for(process.wait(), grace)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()


async def fetch(session: aiohttp.ClientSession, url: str) -> tuple[int, str]:
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=5)) as response:
            return response.status, await response.text()
    except (aiohttp.ClientError, TimeoutError):
        return 0, ""


def _gauge(text: str, name: str) -> float | None:
    match = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    return float(match.group(1)) if match else None


@contextlib.asynccontextmanager
async def running_stack(home: Path) -> AsyncIterator[Stack]:
    """Everything started and scraped for RUN_SECONDS; stopped (and the churn cancelled) on exit."""
    require_tools()
    rules_path, rules, critical = write_rules(home)
    names = ("kube", "controller", "agent", "demo", "prometheus")
    ports = dict(zip(names, free_ports(len(names)), strict=True))
    services: dict[str, Service] = {}
    operator: Operator | None = None
    churn_task: asyncio.Task[None] | None = None
    session = aiohttp.ClientSession()
    try:
        # The API server, and the chart installed into it.
        admin = home / "dev-cluster.kubeconfig"
        services["dev-cluster"] = await start(
            "dev-cluster",
            home,
            sys.executable,
            "-m",
            "eni_ipam.cli",
            "dev-cluster",
            "--kubeconfig",
            str(admin),
            "--port",
            str(ports["kube"]),
        )
        await wait_for("dev-cluster's kubeconfig", lambda: _nonempty(admin), 30)
        shell_home = home / "operator"
        shell_home.mkdir()
        env = {"PATH": f"{HELM.parent}:/usr/bin:/bin", "HOME": str(shell_home)}
        operator = op = Operator(DevCluster(admin, env), shell_home)
        await op.helm("install", RELEASE, str(CHART), "--create-namespace", values=VALUES)

        # The controller on its own metrics port, and its Nodes (one of another cloud).
        await op.start_controller(
            {
                "ENI_IPAM_SERVER__PORT": str(ports["controller"]),
                "ENI_IPAM_SERVER__HOST": "127.0.0.1",
                "ENI_IPAM_SERVER__PROBE_HOST": "127.0.0.1",
                "ENI_IPAM_SERVER__PROBE_PORT": "0",
            },
            log=home / "controller.log",
        )
        assert op.controller is not None
        services["controller"] = Service("controller", op.controller, home / "controller.log")
        nodes = [_node(f"n{n}", f"aws:///us-east-1a/i-000{n}") for n in (1, 2, 3)]
        nodes.append(_node(IGNORED_NODE, "gce://e2e-project/us-east1-b/vm-1"))
        await op.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(nodes))

        async def filled() -> bool:
            pools = await op.pools()
            return sorted(pools) == ["n1", "n2", "n3"] and all(available(p) == 2 for p in pools.values())

        await wait_for("every pool filled", filled, 90)
        controller_url = f"http://127.0.0.1:{ports['controller']}"

        async def controller_ready() -> bool:
            status, text = await fetch(session, controller_url + "/metrics")
            return status == 200 and _gauge(text, "eni_ipam_ready") == 1

        await wait_for("the controller's eni_ipam_ready = 1", controller_ready, 60)
        services["controller"].url = controller_url

        # The node agent of n1, and pods coming and going through it.
        socket_path = await op.start_agent(AGENT_NODE, metrics_port=ports["agent"])
        services["agent"] = Service("agent", op.agents[-1], socket_path.parent / "agent.log")
        services["agent"].url = f"http://127.0.0.1:{ports['agent']}"
        await wait_for("the agent's socket", lambda: exists(socket_path), 60)
        await cni_add(socket_path, "pod-first")  # answered once the agent has read its pool
        churn = Churn(held=["pod-first"], adds=1)
        churn_task = asyncio.create_task(churn.run(socket_path, random.Random(7)), name="churn")

        # The demo, and Prometheus scraping all three.
        demo_url = f"http://127.0.0.1:{ports['demo']}"
        services["demo"] = await start(
            "demo",
            home,
            sys.executable,
            "-m",
            "eni_ipam.cli",
            "demo",
            "--duration",
            "0",
            "--nodes",
            "20",
            "--port",
            str(ports["demo"]),
            env={k: v for k, v in os.environ.items() if not k.startswith("ENI_IPAM_")},
        )
        services["demo"].url = demo_url

        async def demo_up() -> bool:
            status, text = await fetch(session, demo_url + "/metrics")
            return status == 200 and (_gauge(text, 'eni_ipam_nodes{category="total"}') or 0) > 0

        await wait_for("the demo's /metrics", demo_up, 60)
        target_labels = {"namespace": NAMESPACE, "service": RELEASE, "endpoint": "http"}
        targets = {
            RELEASE: (
                f"127.0.0.1:{ports['controller']}",
                {**target_labels, "pod": f"{RELEASE}-0", "container": RELEASE},
            ),
            f"{RELEASE}-agent": (
                f"127.0.0.1:{ports['agent']}",
                {**target_labels, "pod": f"{RELEASE}-agent-{AGENT_NODE}", "container": "agent"}
                | {"service": f"{RELEASE}-agent", "endpoint": "agent-http"},
            ),
            DEMO_JOB: (
                f"127.0.0.1:{ports['demo']}",
                {"namespace": "demo", "service": f"{RELEASE}-demo", "endpoint": "http"}
                | {"pod": f"{RELEASE}-demo-0", "container": RELEASE},
            ),
        }
        config = home / "prometheus.yml"
        config.write_text(yaml.safe_dump(prometheus_config(targets, rules_path), sort_keys=False))
        prometheus_url = f"http://127.0.0.1:{ports['prometheus']}"
        services["prometheus"] = await start(
            "prometheus",
            home,
            PROMETHEUS,
            f"--config.file={config}",
            f"--storage.tsdb.path={home / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{ports['prometheus']}",
            "--web.enable-lifecycle",
            "--log.level=warn",
        )
        started = now()
        prometheus = Prometheus(prometheus_url, session)

        async def prometheus_ready() -> bool:
            return (await fetch(session, prometheus_url + "/-/ready"))[0] == 200

        await wait_for("Prometheus ready", prometheus_ready, 60)

        async def scraped() -> bool:
            active = (await prometheus.get("/api/v1/targets"))["activeTargets"]
            return len(active) == len(targets) and all(t["health"] == "up" for t in active)

        await wait_for("every target scraped", scraped, 30)
        stack = Stack(home, op, services, prometheus, rules, critical, started, churn, churn_task)

        async def ran() -> bool:
            stack.check_alive()
            return now() - started >= RUN_SECONDS

        await wait_for(f"{RUN_SECONDS:g}s of scraping", ran, RUN_SECONDS + 60, poll=1.0)
        yield stack
    except BaseException:
        print("\n".join(f"--- {s.name}, {s.log}:\n{tail(s.log)}" for s in services.values()))
        raise
    finally:
        if churn_task is not None:
            churn_task.cancel()
            with contextlib.suppress(BaseException):
                await churn_task
        for service in reversed(list(services.values())):
            await stop(service.process)
        if operator is not None:
            await operator.kill_all()  # any agent or controller started but not yet registered above
        await session.close()


def _node(name: str, provider_id: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "topology.kubernetes.io/zone": "us-east-1a",
                "node.kubernetes.io/instance-type": "m5.large",
            },
        },
        "spec": {"providerID": provider_id},
    }


async def _nonempty(path: Path) -> bool:
    return await asyncio.to_thread(lambda: path.exists() and path.stat().st_size > 0)


def promtool_check_metrics(body: str) -> subprocess.CompletedProcess[str]:
    """``promtool check metrics`` with ``body`` on its standard input."""
    return subprocess.run(
        [PROMTOOL, "check", "metrics"], input=body, capture_output=True, text=True, check=False, timeout=60
    )


def dump(data: Any) -> str:
    return json.dumps(data, sort_keys=True)
