"""``eni-ipam status``: the judgement of what was read (table tests on plain documents), the screen and
the JSON, and the reads through the product's client against the fake API server, in-process.

The controller's scrapes are written by the controller's own metrics (:class:`Metrics`) and read back
by the status command's parser: a metric renamed on one side fails here.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import io
import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from eni_ipam.adapters.metrics import Metrics
from eni_ipam.adapters.metrics.scrape import Scrape
from eni_ipam.app.status import DEFAULT_LEASE
from eni_ipam.app.status.command import Options, check, kubeconfig_path, run
from eni_ipam.app.status.judge import judge
from eni_ipam.app.status.model import Gathered, Report
from eni_ipam.app.status.screen import as_json, render
from eni_ipam.cli import _selector, main
from eni_ipam.core.model import NodeStats, Subnet
from eni_ipam.kube import crd as crds
from eni_ipam.kube.permissions import STATUS_PERMISSIONS
from eni_ipam.kube.settings import KubeSettings
from eni_ipam_testkit.fake_kube import FakeKube

NOW = datetime.datetime(2026, 11, 29, 12, 0, tzinfo=datetime.UTC)
DOCS = Path(__file__).resolve().parents[2] / "docs" / "status.md"


def ago(seconds: float) -> str:
    return (NOW - datetime.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def lease(
    holder: str = "eni-ipam-0", *, renewed: float = 1, acquired: float = 3600, duration: int = 15
) -> dict:
    spec = {"holderIdentity": holder, "leaseDurationSeconds": duration, "leaseTransitions": 2}
    spec |= {"renewTime": ago(renewed), "acquireTime": ago(acquired)} if holder else {}
    return {"metadata": {"name": "eni-ipam", "namespace": "kube-system"}, "spec": spec}


def node(
    name: str, instance: str | None = None, *, created: float = 3600, taints: tuple[str, ...] = ()
) -> dict:
    instance = f"i-{name}" if instance is None else instance
    spec: dict[str, Any] = {"providerID": f"aws:///us-east-1a/{instance}"} if instance else {}
    if taints:
        spec["taints"] = [{"key": key, "effect": "NoSchedule"} for key in taints]
    return {"metadata": {"name": name, "creationTimestamp": ago(created)}, "spec": spec}


def pool(
    name: str,
    ready: tuple[str, str, float] | None = ("True", "PoolReady", 3600),
    *,
    message: str = "",
    subnets: tuple[str, ...] = ("s-1",),
    pressure: bool | None = None,
    created: float = 3600,
) -> dict:
    obj: dict[str, Any] = {
        "metadata": {"name": name, "creationTimestamp": ago(created)},
        "spec": {"instanceID": f"i-{name}"},
    }
    if ready is None:
        return obj
    status, reason, since = ready
    conditions = [{"type": "Ready", "status": status, "reason": reason, "lastTransitionTime": ago(since)}]
    if pressure is not None:
        said = ("True", "SubnetPressure") if pressure else ("False", "NoPressure")
        conditions.append({"type": "SubnetPressure", "status": said[0], "reason": said[1]})
    interfaces = [{"id": f"eni-{n}", "deviceIndex": n, "subnet": s} for n, s in enumerate(subnets)]
    obj["status"] = {"conditions": conditions, "message": message, "interfaces": interfaces}
    return obj


def crd(revision: int | None = None, *, drop: str = "") -> dict:
    """The CRD this eni-ipam carries, at another revision, or without a status field (``drop``)."""
    found = copy.deepcopy(crds.bundled())
    if revision is not None:
        found["metadata"]["annotations"][crds.REVISION_ANNOTATION] = str(revision)
    if drop:
        for version in found["spec"]["versions"]:
            version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"].pop(drop)
    return found


def scrape(
    *,
    leader: bool = True,
    ready: bool = True,
    failed_resyncs: int = 0,
    resync_age: float = 30.0,
    subnets: tuple[tuple[str, int, str], ...] = (("s-1", 900, "10.0.0.0/22"),),
    pressure: tuple[str, ...] = (),
    requests: Mapping[str, tuple[int, int]] | None = None,
    failing: Mapping[str, tuple[str, int]] | None = None,
    kube_unhealthy: str = "",
    crd_state: str = "current",
) -> Scrape:
    """What a controller in that state writes on /metrics, read back as status reads it."""
    metrics = Metrics(process=False)
    metrics.report_role(ready=lambda: ready, leader=lambda: leader)
    metrics.resync_finished(ok=True)
    for _ in range(failed_resyncs):
        metrics.resync_finished(ok=False)
    metrics.report_schedule(
        waiting=int, in_backoff=int, oldest_deficit=float, since_resync=lambda: resync_age
    )
    listed = [
        Subnet(id=s, vpc_id="vpc-1", zone="us-east-1a", cidr=cidr, available=free)
        for s, free, cidr in subnets
    ]
    metrics.replace_subnets(listed)
    for subnet in listed if pressure else ():
        metrics.subnet_pressure(subnet, under=subnet.id in pressure, changed=False)
    for operation, (count, throttled) in (requests or {"DescribeInstances": (100, 0)}).items():
        for n in range(count):
            metrics.api_request(operation=operation, throttled=n < throttled)
    for name, (reason, passes) in (failing or {}).items():
        metrics.set_node(name, NodeStats(available=4, needed=2), failing=(reason, passes))
    metrics.report_kube_api(("credentials_rejected", "unreachable"), lambda: kube_unhealthy)
    for state in crds.STATES:
        metrics.crd_state.labels(state=state).set(1 if state == crd_state else 0)
    if not leader:
        metrics.clear_pool_state()
    return Scrape.parse(metrics.exposition().decode())


def healthy(**changes: Any) -> Gathered:
    """A cluster where nothing needs an operator: a leader, the current CRD, two ready nodes."""
    base = Gathered(
        now=NOW,
        namespace="kube-system",
        lease_name="eni-ipam",
        lease=lease(),
        crd=crd(),
        pools=(pool("n1"), pool("n2")),
        nodes=(node("n1"), node("n2")),
    )
    return dataclasses.replace(base, **changes)


def metered(**changes: Any) -> Gathered:
    """:func:`healthy`, with the leader's metrics (``scrape``: :func:`scrape`'s arguments)."""
    base = {"metrics_url": "http://127.0.0.1:9090/metrics", "scrape": scrape(), "readyz": "ready: leader"}
    return healthy(**(base | changes))


Problems = set[tuple[str, str]]


def problems(report: Report) -> Problems:
    return {(f.section, f.subject) for f in report.problems}


def notes(report: Report) -> Problems:
    return {(f.section, f.subject) for f in report.findings if f.severity == "note"}


NO_ROOM = "4 more addresses needed, but no subnet this pool may use has room"
GONE = "instance i-n2 no longer exists: nothing is allocated"
URL = "http://127.0.0.1:9090/metrics"
STARTUP = ("eni-ipam.io/not-ready",)
LEASE = ("controller", "kube-system/eni-ipam")
NOT_READY = "not ready: leader, initial resync has not succeeded yet"


def finalizing(name: str, seconds: float) -> dict:
    return {**pool(name), "metadata": {"name": name, "deletionTimestamp": ago(seconds)}}


def assigns(count: int, throttled: int) -> dict[str, tuple[int, int]]:
    return {"AssignPrivateIpAddresses": (count, throttled)}


def subnet(free: int, cidr: str) -> Scrape:
    return scrape(subnets=(("s-1", free, cidr),))


CASES: list[tuple[str, Callable[[], Gathered], Problems, Problems]] = [
    ("healthy", healthy, set(), set()),
    ("healthy, with the leader's metrics", metered, set(), set()),
    ("no Lease: no controller ever led", lambda: healthy(lease=None), {LEASE}, set()),
    ("a released Lease: no leader", lambda: healthy(lease=lease("")), {LEASE}, set()),
    ("a stale Lease", lambda: healthy(lease=lease(renewed=60)), {("controller", "eni-ipam-0")}, set()),
    ("no CRD", lambda: healthy(crd=None), {("crd", crds.CRD_NAME)}, set()),
    (
        "a CRD older than expected, pruning status.subnets",
        lambda: healthy(crd=crd(1, drop="subnets")),
        {("crd", crds.CRD_NAME)},
        set(),
    ),
    ("an older CRD keeping every field", lambda: healthy(crd=crd(1)), set(), {("crd", crds.CRD_NAME)}),
    ("a newer CRD", lambda: healthy(crd=crd(99)), set(), {("crd", crds.CRD_NAME)}),
    (
        "a node short for a reason",
        lambda: healthy(pools=(pool("n1"), pool("n2", ("False", "Deficit", 30), message=NO_ROOM))),
        {("nodes", "n2")},
        set(),
    ),
    (
        "a node at capacity",
        lambda: healthy(pools=(pool("n1"), pool("n2", ("False", "AtCapacity", 30)))),
        {("nodes", "n2")},
        set(),
    ),
    (
        "a node filling up, just now",
        lambda: healthy(pools=(pool("n1"), pool("n2", ("False", "Deficit", 30)))),
        set(),
        {("nodes", "n2")},
    ),
    (
        "a node short for ten minutes, nothing said",
        lambda: healthy(pools=(pool("n1"), pool("n2", ("False", "Deficit", 600)))),
        {("nodes", "n2")},
        set(),
    ),
    (
        "a node whose instance the cloud does not know",
        lambda: healthy(pools=(pool("n1"), pool("n2", ("False", "InstanceNotRunning", 60), message=GONE))),
        {("nodes", "n2")},
        set(),
    ),
    (
        "a Node without a provider id",
        lambda: healthy(nodes=(node("n1"), node("n2"), node("bare", ""))),
        {("nodes", "bare")},
        set(),
    ),
    (
        "a Node without a pool",
        lambda: healthy(nodes=(node("n1"), node("n2"), node("n3"))),
        {("nodes", "n3")},
        set(),
    ),
    (
        "a new Node waiting for its pool",
        lambda: healthy(nodes=(node("n1"), node("n2"), node("n3", created=20))),
        set(),
        {("nodes", "n3")},
    ),
    (
        "a pool without a status for long",
        lambda: healthy(pools=(pool("n1"), pool("n2", None))),
        {("nodes", "n2")},
        set(),
    ),
    (
        "a deleted pool whose finalizer stays",
        lambda: healthy(pools=(pool("n1"), pool("n2"), finalizing("gone", 900))),
        {("nodes", "gone")},
        set(),
    ),
    (
        "a subnet under pressure",
        lambda: metered(scrape=scrape(pressure=("s-1",))),
        {("subnets", "s-1")},
        set(),
    ),
    ("a full subnet", lambda: metered(scrape=subnet(1, "10.0.0.0/22")), {("subnets", "s-1")}, set()),
    ("a low subnet", lambda: metered(scrape=subnet(40, "10.0.0.0/24")), {("subnets", "s-1")}, set()),
    ("a small subnet with room", lambda: metered(scrape=subnet(20, "10.0.0.0/27")), set(), set()),
    (
        "pressure said by the pools, without metrics",
        lambda: healthy(pools=(pool("n1", pressure=True), pool("n2", pressure=False))),
        {("subnets", "s-1")},
        set(),
    ),
    (
        "throttling now (two scrapes)",
        lambda: metered(
            earlier=scrape(requests=assigns(100, 0)), window=30, scrape=scrape(requests=assigns(200, 40))
        ),
        {("api", "AssignPrivateIpAddresses")},
        set(),
    ),
    (
        "throttling long ago (one scrape: totals)",
        lambda: metered(scrape=scrape(requests=assigns(100, 40))),
        set(),
        {("api", "AssignPrivateIpAddresses")},
    ),
    (
        "no throttling now after some before",
        lambda: metered(
            earlier=scrape(requests=assigns(100, 40)), window=30, scrape=scrape(requests=assigns(160, 40))
        ),
        set(),
        set(),
    ),
    (
        "nodes failing with Unauthorized",
        lambda: metered(scrape=scrape(failing={"n1": ("Unauthorized", 5)})),
        {("api", "Unauthorized")},
        set(),
    ),
    (
        "a node throttled",
        lambda: metered(scrape=scrape(failing={"n1": ("Throttled", 5)})),
        set(),
        {("api", "Throttled")},
    ),
    (
        "the controller's credentials rejected",
        lambda: metered(scrape=scrape(kube_unhealthy="credentials_rejected")),
        {("api", "credentials_rejected")},
        set(),
    ),
    (
        "an agent not serving",
        lambda: healthy(nodes=(node("n1", taints=STARTUP), node("n2"))),
        {("agents", "n1")},
        set(),
    ),
    (
        "an agent still starting",
        lambda: healthy(
            nodes=(node("n1", taints=STARTUP), node("n2")),
            pools=(pool("n1", ("True", "PoolReady", 60)), pool("n2")),
        ),
        set(),
        set(),
    ),
    (
        "the controller not ready",
        lambda: metered(scrape=scrape(ready=False), readyz=NOT_READY),
        {("controller", "eni-ipam-0")},
        set(),
    ),
    (
        "full resyncs failing",
        lambda: metered(scrape=scrape(failed_resyncs=3)),
        {("controller", "resync")},
        set(),
    ),
    (
        "one full resync failed",
        lambda: metered(scrape=scrape(failed_resyncs=1)),
        set(),
        {("controller", "resync")},
    ),
    (
        "no full resync for 20 minutes",
        lambda: metered(scrape=scrape(resync_age=1200)),
        {("controller", "resync")},
        set(),
    ),
    (
        "a standby's metrics",
        lambda: metered(scrape=scrape(leader=False, pressure=("s-1",))),
        set(),
        {("controller", URL)},
    ),
    (
        "metrics not reachable",
        lambda: healthy(metrics_url=URL, metrics_error="refused"),
        set(),
        {("controller", URL)},
    ),
    (
        "the controller cannot read the CRD",
        lambda: metered(scrape=scrape(crd_state="unreadable")),
        {("crd", crds.CRD_NAME)},
        set(),
    ),
    (
        "ENIPools not readable: the Nodes are not judged without them",
        lambda: healthy(pools=(), unread={"enipools": "403 Forbidden: enipools.eni-ipam.io is forbidden"}),
        {("api", "enipools")},
        set(),
    ),
    (
        "a pool whose Node -l leaves out is no orphan",
        lambda: healthy(pools=(pool("n1"), pool("n2"), finalizing("web-1", 900)), selector={"group": "db"}),
        set(),
        set(),
    ),
    (
        "Events not readable",
        lambda: healthy(unread={"events": "403 Forbidden: events is forbidden"}),
        {("api", "events")},
        set(),
    ),
]


@pytest.mark.parametrize(("case", "reading", "expected", "expected_notes"), CASES, ids=[c[0] for c in CASES])
def test_the_judgement(
    case: str, reading: Callable[[], Gathered], expected: Problems, expected_notes: Problems
) -> None:
    report = judge(reading())
    assert problems(report) == expected
    assert notes(report) == expected_notes
    assert report.exit_code == (1 if expected else 0)
    assert report.verdict == ("NEEDS ATTENTION" if expected else "OK")
    assert all(f.fix for f in report.problems if f.section != "crd"), (
        report.problems
    )  # the CRD's names it inline


def test_nodes_are_counted_by_state_with_the_reason_and_the_message() -> None:
    message = "4 more addresses needed, but no subnet this pool may use has room"
    report = judge(
        healthy(
            nodes=(node("n1"), node("n2"), node("n3"), node("bare", ""), node("ghost")),
            pools=(
                pool("n1"),
                pool("n2", ("False", "Deficit", 30), message=message),
                pool(
                    "ghost", ("False", "InstanceNotRunning", 30), message="instance i-ghost no longer exists"
                ),
            ),
        )
    )
    assert report.nodes.counts == {"ready": 1, "short": 1, "no-instance": 2, "no-pool": 1, "pending": 0}
    rows = {row.name: row for row in report.nodes.rows}
    assert (rows["n2"].state, rows["n2"].reason, rows["n2"].message) == ("short", "Deficit", message)
    assert rows["ghost"].state == "no-instance" and "no longer exists" in rows["ghost"].message
    assert rows["bare"].reason == "NoProviderID" and rows["n3"].state == "no-pool"
    finding = next(f for f in report.problems if f.subject == "ghost")
    assert "kubectl delete node ghost" in finding.fix


def test_eni_ipams_recent_warning_events_are_kept_with_the_node() -> None:
    def event(reason: str, seconds: float, count: int = 1) -> dict:
        return {
            "involvedObject": {"kind": "Node", "name": "n2"},
            "type": "Warning",
            "reason": reason,
            "message": f"{reason} said",
            "lastTimestamp": ago(seconds),
            "count": count,
        }

    reading = healthy(
        pools=(pool("n1"), pool("n2", ("False", "Deficit", 30), message="no subnet")),
        events=(event("NoSubnetRoom", 60, count=3), event("NoSubnetRoom", 600), event("LimitsUnknown", 7200)),
    )
    row = next(r for r in judge(reading).nodes.rows if r.name == "n2")
    assert row.events == (
        "NoSubnetRoom: NoSubnetRoom said (×3, last 1m ago)",
    )  # the latest; none older than 1h


def test_the_lease_says_who_leads_since_when_and_how_fresh() -> None:
    report = judge(healthy(lease=lease("eni-ipam-7", renewed=2, acquired=7260)))
    view = report.controller.lease
    assert view is not None and (view.holder, view.leading_for, view.renewed_ago) == ("eni-ipam-7", 7260, 2)
    assert not view.stale
    assert "leader eni-ipam-7 for 2h1m, renewed 2s ago" in render(report)


# -- the screen and the JSON -------------------------------------------------------------------------


def test_the_screen_starts_with_the_verdict_and_names_each_problem_with_its_fix() -> None:
    reading = healthy(
        nodes=(node("n1"), node("n2"), node("ghost")),
        pools=(
            pool("n1"),
            pool("n2"),
            pool("ghost", ("False", "InstanceNotRunning", 60), message="instance gone"),
        ),
    )
    screen = render(judge(reading))
    first, blank, *sections = screen.splitlines()
    assert first.startswith("eni-ipam status: NEEDS ATTENTION (1 problem)") and blank == ""
    titles = [line.split()[0] for line in sections if not line.startswith(" ")]
    assert titles == ["Controller", "CRD", "Nodes", "Subnets", "API", "Agents"]
    nodes = screen[screen.index("Nodes") : screen.index("Subnets")]
    assert nodes.startswith("Nodes      ✗ 3 Nodes: 2 ready, 1 no instance")
    assert "✗ ghost: no instance: instance gone" in nodes and "→ an instance gone for good" in nodes
    assert render(judge(healthy())).startswith("eni-ipam status: OK")
    assert "Controller ✓ leader eni-ipam-0" in render(judge(healthy()))


def test_what_comes_from_the_cluster_is_shown_never_obeyed() -> None:
    reading = healthy(
        pools=(pool("n1"), pool("n2", ("False", "Deficit", 30), message="\x1b]0;owned\x07\x1b[2J"))
    )
    screen = render(judge(reading))
    assert "\x1b" not in screen and "\x07" not in screen
    assert "\\x1b]0;owned\\x07\\x1b[2J" in screen


def test_a_section_lists_ten_findings_then_says_how_many_more() -> None:
    names = [f"n{i:02}" for i in range(14)]
    reading = healthy(nodes=tuple(node(n) for n in names), pools=())
    screen = render(judge(reading))
    assert screen.count("no ENIPool") == 10 and "… and 4 more (--json lists every one)" in screen
    assert len(judge(reading).problems) == 14


def test_the_json_is_one_object_with_the_documented_keys() -> None:
    report = judge(metered(pools=(pool("n1"), pool("n2", ("False", "AtCapacity", 30)))))
    body = json.loads(as_json(report))
    assert body["verdict"] == "NEEDS ATTENTION" and body["problems"] == 1 and body["exit_code"] == 1
    documented = _documented_keys()
    for group, keys in documented.items():
        value: Any = body
        for part in group.split(".") if group else ():
            value = value[part][0] if isinstance(value[part], list) else value[part]
        assert set(value) == keys, group or "the top level"
    assert {"", "controller.lease", "controller.metrics", "nodes.rows", "findings", "api"} <= set(documented)
    assert body["findings"][0] == {
        "section": "nodes",
        "subject": "n2",
        "problem": "short (AtCapacity)",
        "fix": body["findings"][0]["fix"],
        "severity": "problem",
    }
    assert {row["name"]: row["state"] for row in body["nodes"]["rows"]} == {"n1": "ready", "n2": "short"}


def _documented_keys() -> dict[str, set[str]]:
    """docs/status.md's table of the JSON's keys, by the object they are in (``""``: the top level;
    ``nodes.rows``: each row)."""
    keys: dict[str, set[str]] = {}
    table = DOCS.read_text().split("## The JSON", 1)[1].split("\n## ", 1)[0]
    for line in table.splitlines():
        cells = line.split("|")
        if len(cells) < 3:
            continue
        for key in re.findall(r"`([a-z_.\[\]]+)`", cells[1]):
            group, _, name = key.replace("[]", "").rpartition(".")
            keys.setdefault(group, set()).add(name)
    return keys


# -- reading a cluster: the fake API server, in-process ----------------------------------------------


async def _seed(kube: FakeKube) -> None:
    await kube.apply_manifest(crds.bundled())
    kube.add_object("leases", {**lease(), "spec": {**lease()["spec"], "renewTime": kube_now(kube)}})
    for name in ("n1", "ghost"):
        kube.add_object(
            "nodes", {"metadata": {"name": name}, "spec": {"providerID": f"aws:///us-east-1a/i-{name}"}}
        )
    kube.add_object("enipools", {"metadata": {"name": "n1"}, "spec": {"instanceID": "i-n1"}})
    kube.add_object(
        "events",
        {
            "metadata": {"name": "ghost.1", "namespace": "default"},
            "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": "ghost"},
            "reason": "NoProviderID",
            "message": "said",
            "type": "Warning",
            "source": {"component": "eni-ipam"},
            "lastTimestamp": kube_now(kube),
        },
    )


def kube_now(kube: FakeKube) -> str:
    return kube._timestamp()  # the server's own clock: the Lease was just renewed


async def test_status_reads_the_cluster_through_its_own_client(kube: FakeKube, tmp_path: Path) -> None:
    await _seed(kube)
    path = tmp_path / "kubeconfig"
    kube.write_kubeconfig(path)
    report = await check(Options(kubeconfig=str(path)), {})
    assert isinstance(report, Report)
    assert report.controller.lease is not None and report.controller.lease.holder == "eni-ipam-0"
    assert report.crd is not None and report.crd.state == "current"
    rows = {row.name: row for row in report.nodes.rows}
    assert rows["n1"].state == "pending" and rows["ghost"].state == "no-pool"
    assert rows["ghost"].events == ("NoProviderID: said",)


async def test_the_documented_cluster_role_grants_every_read_and_nothing_more(
    kube: FakeKube, tmp_path: Path
) -> None:
    role = _documented_role()
    rules = {
        (g, r, v)
        for rule in role["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }
    assert rules == set(STATUS_PERMISSIONS)
    await _seed(kube)
    for account in ("oncall", "nobody"):
        kube.add_object("serviceaccounts", {"metadata": {"name": account, "namespace": "default"}})
    await kube.apply_manifest(role)
    await kube.apply_manifest(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "eni-ipam-status"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "eni-ipam-status",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "oncall", "namespace": "default"}],
        }
    )
    path = tmp_path / "kubeconfig"
    kube.write_kubeconfig(path, service_account=("default", "oncall"))
    report = await check(Options(kubeconfig=str(path)), {})
    assert isinstance(report, Report) and not [f for f in report.findings if f.section == "api"]
    assert report.controller.lease is not None and report.crd is not None and report.nodes.total == 2
    unbound = tmp_path / "unbound"
    kube.write_kubeconfig(unbound, service_account=("default", "nobody"))
    refused = await check(Options(kubeconfig=str(unbound)), {})
    assert isinstance(refused, Report)
    assert {f.subject for f in refused.problems if f.section == "api"} == {
        "enipools", "nodes", "events", "leases", "customresourcedefinitions"
    }  # fmt: skip


def _documented_role() -> dict[str, Any]:
    blocks = re.findall(r"```yaml\n(.*?)\n```", DOCS.read_text(), re.S)
    docs = [doc for block in blocks for doc in yaml.safe_load_all(block) if doc]
    return next(doc for doc in docs if doc.get("kind") == "ClusterRole")


async def test_an_api_server_that_does_not_answer_or_refuses_the_token_is_exit_2(
    kube: FakeKube, tmp_path: Path
) -> None:
    config = kube.kubeconfig()
    config["users"][0]["user"]["token"] = "not-a-token"
    rejected = tmp_path / "rejected"
    rejected.write_text(yaml.safe_dump(config))
    said = await check(Options(kubeconfig=str(rejected)), {})
    assert isinstance(said, str) and said.startswith(f"cannot reach the Kubernetes API server {kube.url}")
    assert "401" in said
    config = kube.kubeconfig()
    config["clusters"][0]["cluster"]["server"] = "https://127.0.0.1:1"
    nobody = tmp_path / "nobody"
    nobody.write_text(yaml.safe_dump(config))
    err = io.StringIO()
    assert await _run_in_thread(Options(kubeconfig=str(nobody), timeout=5), err) == 2
    assert err.getvalue().startswith(
        "eni-ipam status: cannot reach the Kubernetes API server https://127.0.0.1:1"
    )
    assert "Traceback" not in err.getvalue()


async def _run_in_thread(options: Options, err: io.StringIO) -> int:
    """:func:`run` (which runs its own event loop) beside the test's loop."""
    import asyncio

    return await asyncio.to_thread(run, options, out=io.StringIO(), err=err)


def test_a_kubeconfig_that_cannot_be_loaded_is_exit_2(tmp_path: Path) -> None:
    err = io.StringIO()
    assert run(Options(kubeconfig=str(tmp_path / "missing")), out=io.StringIO(), err=err) == 2
    assert err.getvalue().startswith(f"eni-ipam status: cannot load {tmp_path / 'missing'}: ")
    assert "give --kubeconfig FILE" in err.getvalue()
    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "clusters": [], "contexts": [], "users": []})
    )
    assert run(Options(kubeconfig=str(path), context="prod"), out=io.StringIO(), err=err) == 2
    assert "Context 'prod' not found" in err.getvalue()


def test_the_default_lease_is_the_controllers() -> None:
    assert KubeSettings().lease_name == DEFAULT_LEASE
    assert Options().lease_name == DEFAULT_LEASE and Options().namespace == "kube-system"


def test_the_kubeconfig_is_found_as_kubectl_finds_it(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    second.write_text("")
    home = tmp_path / "home"
    assert kubeconfig_path("given", {"KUBECONFIG": str(second)}) == "given"
    assert kubeconfig_path("", {"KUBECONFIG": f"{first}:{second}", "HOME": str(home)}) == str(second)
    assert kubeconfig_path("", {"HOME": str(home)}) == ""  # then the in-cluster service account
    (home / ".kube").mkdir(parents=True)
    (home / ".kube" / "config").write_text("")
    assert kubeconfig_path("", {"HOME": str(home)}) == str(home / ".kube" / "config")


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--window", "5s"], "argument --window: needs --metrics-url"),
        (["--timeout", "0"], "argument --timeout: must be longer than 0"),
        (["-l", "group"], "argument -l/--selector: 'group' is not KEY=VALUE[,KEY=VALUE]"),
        (["-l", "=web"], "argument -l/--selector: '=web' is not KEY=VALUE[,KEY=VALUE]"),
        (["--window", "soon"], "argument --window:"),
    ],
)
def test_bad_usage_is_exit_2_naming_the_option(
    args: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        code = main(["status", *args])
    except SystemExit as exc:  # argparse's own errors exit; the command's return
        code = int(exc.code or 0)
    assert code == 2
    assert said in capsys.readouterr().err


def test_a_selector_is_kubectls_equality_selector() -> None:
    assert _selector("group=web, zone=a") == {"group": "web", "zone": "a"}
    assert _selector("tier=") == {"tier": ""}


# -- the scrape's reader ------------------------------------------------------------------------------


def test_a_scrape_reads_back_what_the_controller_writes() -> None:
    read = scrape(requests={"AssignPrivateIpAddresses": (10, 3)}, failed_resyncs=2, resync_age=12.5)
    assert read.value("eni_ipam_api_throttled_total", {"operation": "AssignPrivateIpAddresses"}) == 3
    assert read.total("eni_ipam_api_requests_total") == 10
    assert (read.value("eni_ipam_resync_failing"), read.value("eni_ipam_resync_age_seconds")) == (2, 12.5)
    assert read.value("eni_ipam_nothing") is None and read.total("eni_ipam_nothing") is None
    with pytest.raises(ValueError, match="not the Prometheus text format"):
        Scrape.parse('eni_ipam_ready{unclosed="} 1\n')
