"""The processes of the Prometheus end-to-end tests, and a small client of Prometheus's HTTP API.

``running_stack(home)`` starts, as subprocesses on free ports of 127.0.0.1, and stops them all on the
way out whatever happens:

- ``eni-ipam dev-cluster`` (the fake API server), the chart installed into it by ``helm install``;
- ``eni-ipam run`` as the chart runs it (tests/operator_shell.py) on the in-memory cloud, with Nodes
  created by kubectl, and ``eni-ipam agent`` on each Node with a pool, under the agent's
  ServiceAccount (as the chart's DaemonSet; the chart's EniIpamAgentMissing warns of a node without);
- ``eni-ipam demo`` (a simulated cluster of its own, healthy: its pods come and go within what its
  nodes and subnets hold), with ``--fault`` options when given;
- a real ``prometheus`` scraping them every second, with the chart's alert rules loaded, their
  timings divided by RULE_SCALE (:func:`scaled_rule_values`): once for this release (its controller
  and its agents) and once for the demo, as a release of its own named after its job;

and a task that starts and stops pods through n1's agent's CNI API, so the controller's pools grow
and shrink (allocations, the release handshake, releases). With ``cluster=False`` only the demo and
Prometheus run (tests/e2e/test_prometheus_incident.py).
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
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
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
DEMO_NAMESPACE = "demo"
"""The namespace label of the demo's target: its alerts are told from the release's by it and the job."""
DEMO_NODES = 20
AGENT_NODE = "n1"
"""The node whose agent the pod churn goes through."""
NODES = ("n1", "n2", "n3")
"""The Nodes of the cluster with a pool, each with its agent (a DaemonSet runs one on every node)."""
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

RULE_SCALE = 20
"""The chart's alert timings are divided by this in the end-to-end runs (:func:`scaled_rule_values`):
a minute of the chart is 3 s here, so the ``for`` of every rule, its windows and its holds play out
within a run of a few minutes, and the runs judge the rules as written, at a twentieth of their pace.
20 rather than 60 keeps every window several scrapes long (``throttlingWindow``, 2m, is 6 s;
``subnetTrendResolution``, 1m, 3 s) and over the intervals of the processes it reads: the controller
resyncs every 15 s (``resyncStaleAfter``: 45 s) and collects garbage every 10 s (``gcWindow``: 30 s),
the agent reports every second. The rules that count steps (``countStep``, 1m: 3 s here; the values
named ``...Minutes`` count them) and their one-step ``for`` scale with it; :func:`fixed_minute_rules`
names any rule still holding a fixed minute, which the runs require to be none."""
SECONDS_VALUES = frozenset({"subnetExhaustionSeconds", "outageDeficitAbove"})
"""prometheusRule values that are durations written as a number of seconds: scaled."""
UNSCALED_VALUES = frozenset(
    {
        "subnetFreeAddressesBelow",  # addresses
        "subnetFullBelow",  # addresses
        "subnetLowFreeShareBelow",  # a share
        "leaderChangesAbove",  # changes
        "throttledShareAbove",
        "agentFailureShareAbove",
        "outageFailureShareAbove",
        "maintenanceFailureShareAbove",
        "statusWriteFailureShareAbove",
    }
)
"""prometheusRule values that are numbers but no duration: kept as the chart has them. So are those
named ``...Minutes``: counts of ``countStep``'s steps, which scales."""
_DURATION = re.compile(r"^(?:\d+(?:ms|s|m|h|d|w|y))+$")
_DURATION_PART = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}


def _scaled_duration(text: str, scale: float) -> str:
    seconds = duration_seconds(text) / scale
    return f"{seconds:g}s" if seconds == int(seconds) else f"{round(seconds * 1000)}ms"


def duration_seconds(text: str) -> float:
    """Seconds of a Prometheus duration (``90s``, ``1h30m``, ``250ms``)."""
    assert _DURATION.match(text), f"not a Prometheus duration: {text!r}"
    return float(sum(int(n) * _UNIT_SECONDS[unit] for n, unit in _DURATION_PART.findall(text)))


def scaled_rule_values(scale: float = RULE_SCALE) -> dict[str, Any]:
    """The chart's own ``prometheusRule`` values (deploy/helm/eni-ipam/values.yaml, read now), every
    duration divided by ``scale``: each ``...For``, window, resolution, ``handOverGap`` and
    ``keepFiringFor`` written as a Prometheus duration, and the durations written in seconds
    (:data:`SECONDS_VALUES`). Thresholds (:data:`UNSCALED_VALUES`), counts of minutes (``...Minutes``)
    and the rest stay. A number none of these classifies fails: it may be a duration."""
    chart = yaml.safe_load((CHART / "values.yaml").read_text())["prometheusRule"]
    scaled: dict[str, Any] = {}
    for key, value in chart.items():
        if isinstance(value, str) and _DURATION.match(value):
            scaled[key] = _scaled_duration(value, scale)
        elif isinstance(value, int | float) and not isinstance(value, bool) and not key.endswith("Minutes"):
            assert key in SECONDS_VALUES | UNSCALED_VALUES, (
                f"prometheusRule.{key} ({value}) is a number tests/e2e/stack.py does not know: add it "
                "to SECONDS_VALUES (a duration in seconds, scaled) or UNSCALED_VALUES"
            )
            if key in SECONDS_VALUES:
                seconds = round(value / scale, 3)
                scaled[key] = int(seconds) if seconds == int(seconds) else seconds
    return scaled


def fixed_minute_rules(rules: Sequence[Mapping[str, Any]]) -> list[str]:
    """The alerts among ``rules`` that hold a fixed minute (a ``[...:1m]`` subquery or ``for: 1m``),
    which RULE_SCALE would not speed up."""
    return sorted(
        {str(rule["alert"]) for rule in rules if ":1m]" in str(rule["expr"]) or rule.get("for") == "1m"}
    )


def rule_values() -> dict[str, Any]:
    """The same release with its PrometheusRule (which helm install cannot create here: the fake API
    server has no prometheus-operator CRDs), its timings scaled; rendered by ``helm template``
    instead. Read when the rules are written, not when this module is imported: a value it cannot
    classify fails the run, not the collection of every test."""
    return merge_values(VALUES, {"prometheusRule": {"enabled": True, **scaled_rule_values()}})


def demo_rule_values() -> dict[str, Any]:
    """The rules once more, for the demo (which has no agent), rendered as a release of its own
    (DEMO_JOB in DEMO_NAMESPACE): the chart's default selector then reads the demo's series, and its
    recording rule records apart from the release's."""
    return merge_values(rule_values(), {"agent": {"enabled": False}})


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


Target = tuple[str, dict[str, str]]
"""A scrape target: its address and the labels its job gives every series."""


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
class RuleFile:
    """A rule file Prometheus loads: the chart's rules rendered for one installation."""

    path: Path
    rules: list[dict[str, Any]]
    """Its alert rules (its recording rules aside)."""
    installations: tuple[tuple[str, str], ...]
    """The (namespace, job) of the targets its rules read, which their alerts carry."""


@dataclass
class Alert:
    """An alert as Prometheus holds it (``/api/v1/alerts``), or as its ``ALERTS`` series shows it."""

    labels: dict[str, str]
    state: str
    seconds: float = 0.0
    """How long it held that state, when read from the ``ALERTS`` series over a stretch of time."""

    @property
    def name(self) -> str:
        return self.labels.get("alertname", "")

    @property
    def installation(self) -> tuple[str, str]:
        return self.labels.get("namespace", ""), self.labels.get("job", "")

    def __str__(self) -> str:
        shown = {k: v for k, v in sorted(self.labels.items()) if k != "alertname"}
        held = f" for {self.seconds:g}s" if self.seconds else ""
        return f"{self.labels.get('severity')} {self.name} {shown} ({self.state}{held})"


@dataclass
class Stack:
    home: Path
    services: dict[str, Service]
    prometheus: Prometheus
    rule_files: list[RuleFile]
    critical_severity: str
    started: float
    """When Prometheus started scraping (epoch seconds)."""
    op: Operator | None = None
    """The operator's shell of the cluster (None without it)."""
    churn: Churn | None = None
    churn_task: asyncio.Task[None] | None = None

    @property
    def rules(self) -> list[dict[str, Any]]:
        """Every rendered alert rule, as loaded into Prometheus (each rule once per rule file)."""
        return [rule for rules in self.rule_files for rule in rules.rules]

    @property
    def installations(self) -> set[tuple[str, str]]:
        """The (namespace, job) pairs the rules judge: any alert must name one of them."""
        return {pair for rules in self.rule_files for pair in rules.installations}

    async def alerts(self) -> list[Alert]:
        """The alerts pending or firing now."""
        found = (await self.prometheus.get("/api/v1/alerts"))["alerts"]
        return [Alert(dict(a["labels"]), a["state"]) for a in found]

    async def alerts_between(self, start: float, end: float, state: str = "firing") -> list[Alert]:
        """Every alert that was in ``state`` at any rule evaluation from ``start`` to ``end``
        (Prometheus's ``ALERTS`` series), with how long it was."""
        expr = f'ALERTS{{alertstate="{state}"}}'
        first = end - math.ceil((end - start) / SCRAPE_INTERVAL) * SCRAPE_INTERVAL  # a step at ``end``
        status, body = await self.prometheus.query_range(expr, first, end, SCRAPE_INTERVAL)
        assert status == 200 and body["status"] == "success", f"{expr}: HTTP {status} {body}"
        return [
            Alert(
                {k: v for k, v in r["metric"].items() if k not in ("__name__", "alertstate")},
                state,
                len(r["values"]) * SCRAPE_INTERVAL,
            )
            for r in body["data"]["result"]
        ]

    def diagnostics(self) -> str:
        """The last lines of every process's output, and the churn's counts: for failure messages."""
        parts = []
        if (churn := self.churn) is not None:
            parts.append(f"churn: {churn.adds} adds, {churn.dels} dels, {churn.refused} refused")
        for service in self.services.values():
            state = (
                "running" if service.process.returncode is None else f"exited {service.process.returncode}"
            )
            parts.append(f"--- {service.name} ({state}), {service.log}:\n{tail(service.log)}")
        return "\n".join(parts)

    def check_alive(self) -> None:
        dead = [s.name for s in self.services.values() if s.process.returncode is not None]
        task = self.churn_task
        if task is not None and task.done() and not task.cancelled() and task.exception():
            raise AssertionError(f"the pod churn failed: {task.exception()!r}\n{self.diagnostics()}")
        if dead:
            raise AssertionError(f"exited early: {', '.join(dead)}\n{self.diagnostics()}")


def require_tools(*, cluster: bool = True) -> None:
    """Skip, saying why, when a tool the test runs is missing (helm is needed either way: it renders
    the rules; kubectl only with the cluster)."""
    tools = [
        (HELM, "make kube-tools installs it"),
        (Path(PROMETHEUS), "make prometheus-tools installs it"),
        (Path(PROMTOOL), "make prometheus-tools installs it"),
    ]
    if cluster:
        tools.append((KUBECTL, "make kube-tools installs it"))
    for tool, how in tools:
        if not os.access(tool, os.X_OK):
            pytest.skip(f"{tool} is missing ({how})")


def write_rules(home: Path, name: str, values: dict[str, Any], release: str, namespace: str) -> RuleFile:
    """The chart's PrometheusRule, rendered by ``helm template`` with ``values`` for ``release`` in
    ``namespace``, as a plain Prometheus rule file (its ``spec``) ``home/name.yml``, checked by
    ``promtool check rules``. Its alert rules read the release's controllers (and agents)."""
    spec = one(render(values, release, namespace), "PrometheusRule")["spec"]
    path = home / f"{name}.yml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    checked = subprocess.run(
        [PROMTOOL, "check", "rules", str(path)], capture_output=True, text=True, check=False, timeout=60
    )
    assert checked.returncode == 0, f"promtool check rules {path.name}:\n{checked.stdout}{checked.stderr}"
    alerts = [rule for group in spec["groups"] for rule in group["rules"] if "alert" in rule]
    installations = [(namespace, release)]
    if any(group["name"].endswith("-agents") for group in spec["groups"]):
        installations.append((namespace, f"{release}-agent"))
    return RuleFile(path, alerts, tuple(installations))


def critical_severity() -> str:
    """The severity label value of the rules' critical alerts."""
    return str(rule_values()["prometheusRule"].get("criticalSeverity") or "critical")


def prometheus_config(targets: Mapping[str, Sequence[Target]], rules: Sequence[Path]) -> dict[str, Any]:
    """Scrape every target each second; each job carries the labels a prometheus-operator target has
    (namespace, pod, service, endpoint, container), which the dashboard groups by."""
    return {
        "global": {
            "scrape_interval": f"{SCRAPE_INTERVAL:g}s",
            "scrape_timeout": f"{SCRAPE_INTERVAL:g}s",
            "evaluation_interval": f"{SCRAPE_INTERVAL:g}s",
        },
        "rule_files": [str(path) for path in rules],
        "scrape_configs": [
            {
                "job_name": job,
                "static_configs": [{"targets": [address], "labels": labels} for address, labels in found],
            }
            for job, found in targets.items()
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


@dataclass
class _Started:
    """What ``running_stack`` has started so far: what its way out stops."""

    services: dict[str, Service] = field(default_factory=dict)
    targets: dict[str, list[Target]] = field(default_factory=dict)
    operator: Operator | None = None
    churn: Churn | None = None
    churn_task: asyncio.Task[None] | None = None

    async def stop(self) -> None:
        if self.churn_task is not None:
            self.churn_task.cancel()
            with contextlib.suppress(BaseException):
                await self.churn_task
        for service in reversed(list(self.services.values())):
            await stop(service.process)
        if self.operator is not None:
            await self.operator.kill_all()  # any agent or controller started but not yet registered


async def _start_cluster(
    home: Path, ports: Mapping[str, int], session: aiohttp.ClientSession, started: _Started
) -> None:
    """The API server with the chart installed, the controller and its Nodes, an agent on each and
    the pod churn through n1's; their targets (the controller's job and the agents')."""
    services = started.services
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
    started.operator = op = Operator(DevCluster(admin, env), shell_home)
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
    nodes = [_node(name, f"aws:///us-east-1a/i-000{n}") for n, name in enumerate(NODES, 1)]
    nodes.append(_node(IGNORED_NODE, "gce://e2e-project/us-east1-b/vm-1"))
    await op.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(nodes))

    async def filled() -> bool:
        pools = await op.pools()
        return sorted(pools) == list(NODES) and all(available(p) == 2 for p in pools.values())

    await wait_for("every pool filled", filled, 90)
    controller_url = f"http://127.0.0.1:{ports['controller']}"

    async def controller_ready() -> bool:
        status, text = await fetch(session, controller_url + "/metrics")
        return status == 200 and _gauge(text, "eni_ipam_ready") == 1

    await wait_for("the controller's eni_ipam_ready = 1", controller_ready, 60)
    services["controller"].url = controller_url

    # A node agent on every Node with a pool (as the DaemonSet), and pods coming and going through n1's.
    target_labels = {"namespace": NAMESPACE, "service": RELEASE, "endpoint": "http"}
    started.targets[f"{RELEASE}-agent"] = []
    for node in NODES:
        name = "agent" if node == AGENT_NODE else f"agent-{node}"
        socket_path = await op.start_agent(node, metrics_port=ports[name])
        services[name] = Service(name, op.agents[-1], socket_path.parent / "agent.log")
        services[name].url = f"http://127.0.0.1:{ports[name]}"
        await wait_for(f"the socket of {node}'s agent", lambda path=socket_path: exists(path), 60)
        started.targets[f"{RELEASE}-agent"].append(
            (
                f"127.0.0.1:{ports[name]}",
                {**target_labels, "pod": f"{RELEASE}-agent-{node}", "container": "agent"}
                | {"service": f"{RELEASE}-agent", "endpoint": "agent-http"},
            )
        )
        if node == AGENT_NODE:
            await cni_add(socket_path, "pod-first")  # answered once the agent has read its pool
            started.churn = Churn(held=["pod-first"], adds=1)
            churn = started.churn.run(socket_path, random.Random(7))
            started.churn_task = asyncio.create_task(churn, name="churn")
    started.targets[RELEASE] = [
        (f"127.0.0.1:{ports['controller']}", {**target_labels, "pod": f"{RELEASE}-0", "container": RELEASE})
    ]


async def _start_demo(
    home: Path, port: int, session: aiohttp.ClientSession, started: _Started, faults: Sequence[str]
) -> None:
    """``eni-ipam demo`` (with ``--fault`` for each of ``faults``), once its /metrics has nodes; its
    target (DEMO_JOB)."""
    demo_url = f"http://127.0.0.1:{port}"
    started.services["demo"] = service = await start(
        "demo",
        home,
        sys.executable,
        "-m",
        "eni_ipam.cli",
        "demo",
        "--duration",
        "0",
        "--nodes",
        str(DEMO_NODES),
        "--port",
        str(port),
        *[option for fault in faults for option in ("--fault", fault)],
        env={k: v for k, v in os.environ.items() if not k.startswith("ENI_IPAM_")},
    )
    service.url = demo_url

    async def demo_up() -> bool:
        status, text = await fetch(session, demo_url + "/metrics")
        return status == 200 and (_gauge(text, 'eni_ipam_nodes{category="total"}') or 0) > 0

    await wait_for("the demo's /metrics", demo_up, 60)
    started.targets[DEMO_JOB] = [
        (
            f"127.0.0.1:{port}",
            {"namespace": DEMO_NAMESPACE, "service": f"{RELEASE}-demo", "endpoint": "http"}
            | {"pod": f"{RELEASE}-demo-0", "container": RELEASE},
        )
    ]


async def _start_prometheus(
    home: Path, port: int, session: aiohttp.ClientSession, started: _Started, rule_files: list[RuleFile]
) -> tuple[Prometheus, float]:
    """Prometheus scraping every target of ``started`` with ``rule_files``, once each target is up;
    and when it started (epoch seconds)."""
    config = home / "prometheus.yml"
    rules = [r.path for r in rule_files]
    config.write_text(yaml.safe_dump(prometheus_config(started.targets, rules), sort_keys=False))
    prometheus_url = f"http://127.0.0.1:{port}"
    started.services["prometheus"] = await start(
        "prometheus",
        home,
        PROMETHEUS,
        f"--config.file={config}",
        f"--storage.tsdb.path={home / 'tsdb'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--web.enable-lifecycle",
        "--log.level=warn",
    )
    began = now()
    prometheus = Prometheus(prometheus_url, session)

    async def prometheus_ready() -> bool:
        return (await fetch(session, prometheus_url + "/-/ready"))[0] == 200

    await wait_for("Prometheus ready", prometheus_ready, 60)

    async def scraped() -> bool:
        active = (await prometheus.get("/api/v1/targets"))["activeTargets"]
        expected = sum(len(found) for found in started.targets.values())
        return len(active) == expected and all(t["health"] == "up" for t in active)

    await wait_for("every target scraped", scraped, 30)
    return prometheus, began


@contextlib.asynccontextmanager
async def running_stack(
    home: Path,
    *,
    cluster: bool = True,
    demo_faults: Sequence[str] = (),
    run_seconds: float = RUN_SECONDS,
) -> AsyncIterator[Stack]:
    """Everything started and scraped for ``run_seconds``; stopped (and the churn cancelled) on exit.
    ``cluster=False``: the demo and Prometheus only. ``demo_faults``: the demo's ``--fault`` options."""
    require_tools(cluster=cluster)
    rule_files = []
    if cluster:
        rule_files.append(write_rules(home, "rules", rule_values(), RELEASE, NAMESPACE))
    rule_files.append(write_rules(home, "rules-demo", demo_rule_values(), DEMO_JOB, DEMO_NAMESPACE))
    names = (
        "kube",
        "controller",
        "agent",
        *(f"agent-{n}" for n in NODES if n != AGENT_NODE),
        "demo",
        "prometheus",
    )
    ports = dict(zip(names, free_ports(len(names)), strict=True))
    started = _Started()
    session = aiohttp.ClientSession()
    try:
        # The demo first: its nodes' pods are scheduled as their pools appear, a step down of its
        # subnets' free addresses that is over before Prometheus looks (the cluster takes seconds).
        await _start_demo(home, ports["demo"], session, started, demo_faults)
        if cluster:
            await _start_cluster(home, ports, session, started)
        prometheus, began = await _start_prometheus(home, ports["prometheus"], session, started, rule_files)
        stack = Stack(
            home,
            started.services,
            prometheus,
            rule_files,
            critical_severity(),
            began,
            started.operator,
            started.churn,
            started.churn_task,
        )

        async def ran() -> bool:
            stack.check_alive()
            return now() - began >= run_seconds

        await wait_for(f"{run_seconds:g}s of scraping", ran, run_seconds + 60, poll=1.0)
        yield stack
    except BaseException:
        print("\n".join(f"--- {s.name}, {s.log}:\n{tail(s.log)}" for s in started.services.values()))
        raise
    finally:
        await started.stop()
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
