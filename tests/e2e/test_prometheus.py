"""A real Prometheus scrapes the product for a few minutes; every query of the Grafana dashboard and
every alert rule of the chart is then evaluated by it, and promtool lints every /metrics.

The setup (tests/e2e/stack.py), all subprocesses on free ports of 127.0.0.1:

- ``eni-ipam demo --duration 0 --nodes 20``: a simulated cluster of its own, healthy: its pods come
  and go (its pools grow and shrink) within what its nodes' instances and its subnets hold;
- ``eni-ipam dev-cluster`` (the fake Kubernetes API server) with the chart installed by ``helm
  install`` on the in-memory cloud, ``eni-ipam run`` as the chart runs it (the ConfigMap's
  configuration, the chart's ServiceAccount), three Nodes made by kubectl (and one of another cloud,
  which gets no pool), and ``eni-ipam agent`` on each of the three under the agent's ServiceAccount
  (as the DaemonSet would); through n1's a task starts and stops pods all along (the pool grows,
  then shrinks through the release handshake);
- ``prometheus`` (/usr/bin/prometheus, ``make prometheus-tools``) scraping them every second,
  each job with the labels a prometheus-operator target has, and with the chart's PrometheusRule
  (``helm template``, its ``spec`` as a rule file, ``promtool check rules`` first) twice: for this
  release (its controller's job and its agents') and for the demo, rendered as a release of its own
  named after its job, so the chart's default selector reads the demo's series. Both with every
  timing of the chart divided by RULE_SCALE (20: its minutes are 3 s here;
  stack.scaled_rule_values), so that each rule's ``for`` (90 s at most) runs out within the run;
  the steps the counting rules count (``countStep``) scale too, and no rule may hold a fixed minute
  (stack.fixed_minute_rules).

After RUN_SECONDS (150 s; ENI_IPAM_E2E_RUN_SECONDS overrides it) of scraping:

- every dashboard query (each panel target, collapsed rows included, and each variable) is sent
  to Prometheus with Grafana's variables substituted; Prometheus must accept it, and it must return
  data (a range target may have had it earlier in the run, as its panel would show) unless
  ALLOWED_EMPTY lists it with the reason;
- the cluster's own counters moved (the controller allocated and released, the agent reported);
- at every scrape of the run, the cluster totals (``eni_ipam_ips``, ``eni_ipam_nodes``) of the
  controller and of the demo equal the sums and counts of that scrape's per-node series;
- every alert rule is loaded with health "ok" and its expression evaluates; the alerts pending or
  firing at any evaluation of the run (Prometheus's ``ALERTS`` series) are printed, each must be
  about this release or the demo (its namespace and job), and none may have fired: a healthy
  installation pages nothing;
- ``promtool check metrics`` finds nothing to say about the controller's, n1's agent's and the
  demo's /metrics.

tests/e2e/test_prometheus_incident.py injects an incident into the demo and checks the alert that
names it fires. ``make e2e`` runs both (``pytest -m e2e``); the default ``pytest`` run deselects the
``e2e`` marker.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from tests.e2e import dashboard
from tests.e2e.stack import (
    DEMO_JOB,
    RULE_SCALE,
    SCRAPE_INTERVAL,
    Stack,
    duration_seconds,
    fetch,
    finite_samples,
    fixed_minute_rules,
    now,
    promtool_check_metrics,
    running_stack,
    scaled_rule_values,
)
from tests.operator_shell import RELEASE

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]
in_stack_loop = pytest.mark.asyncio(loop_scope="module")
"""The tests share the stack's event loop (its subprocesses, the pod churn, the HTTP session)."""

MAX_DATA_POINTS = 1000
"""A panel's width in pixels, which Grafana takes as its data points: ``$__interval`` is the
dashboard's range (6 h) over it, rounded (20 s)."""

NO_NODE_AT_CAPACITY = (
    "no pool stops growing: both clusters are healthy (the demo's pods stay below what each node's "
    "instance and subnets hold), so no node is full or blocked; tests/adapters/test_metrics.py "
    "checks the series"
)
READY_INTERFACES_OFF = (
    "the stack runs the defaults, and ready interfaces are off by default (decision 0051): "
    "tests/core/test_readypool.py and bench/burst.py read the pool's counts"
)

PRESSURE_OFF = (
    "the stack runs the defaults, and subnet pressure is off by default (decision 0054): "
    "tests/core/test_pressure.py and examples/scenarios/subnet_pressure.yaml read its series"
)

ALLOWED_EMPTY: dict[str, str] = {
    'max by (subnet, zone) (eni_ipam_available_ips_per_subnet{namespace=~"$namespace", subnet=~"$subnet"}) / (-deriv(max by (subnet, zone) (eni_ipam_available_ips_per_subnet{namespace=~"$namespace", subnet=~"$subnet"})[1h:1m]) > 0)': (  # noqa: E501
        "no subnet need be draining: the healthy clusters' free addresses go up and down with their "
        "load, and the run holds two or three points of the [1h:1m] trend, which may not go down"
    ),
    'sum by (operation, outcome) (rate(eni_ipam_api_duration_seconds_count{namespace=~"$namespace", outcome!="ok"}[$__rate_interval]))': (  # noqa: E501
        "no cloud call fails: neither the run's in-memory cloud nor the demo's injects errors"
    ),
    'sum by (operation) (rate(eni_ipam_api_throttled_total{namespace=~"$namespace"}[$__rate_interval]))': (
        "nothing is throttled: neither workload comes near the in-memory cloud's EC2 token buckets"
    ),
    'sum by (reason) (rate(eni_ipam_node_maintenance_failures_total{namespace=~"$namespace"}[$__rate_interval]))': (  # noqa: E501
        "no maintenance pass fails: no cloud error, no subnet or instance runs out"
    ),
    'max by (node, reason) (eni_ipam_node_at_capacity{namespace=~"$namespace", node=~"$node"})': (
        NO_NODE_AT_CAPACITY
    ),
    'count by (reason) (max by (node, reason) (eni_ipam_node_at_capacity{namespace=~"$namespace"}))': (
        NO_NODE_AT_CAPACITY
    ),
    'count by (reason) (max by (node, reason) (eni_ipam_node_failing{namespace=~"$namespace"}))': (
        "no node's passes fail: no cloud error, no subnet or instance runs out (the incident run, "
        "tests/e2e/test_prometheus_incident.py, has them fail)"
    ),
    'sum by (resource, reason) (increase(eni_ipam_informer_watch_restarts_total{namespace=~"$namespace"}[$__rate_interval]))': (  # noqa: E501
        "no watch is restarted: the fake API server neither drops watches nor expires versions, and "
        "the 5 m watch_timeout outlasts the run"
    ),
    'sum by (reason) (increase(eni_ipam_agent_socket_refused_total{namespace=~"$namespace"}[$__rate_interval]))': (  # noqa: E501
        "the agent's socket refuses nothing: only the plugin talks to it, one whole request at a time"
    ),
    'sum by (reason) (increase(eni_ipam_agent_claim_conflicts_total{namespace=~"$namespace"}[$__rate_interval]))': (  # noqa: E501
        "no claim meets an IPAddress that is not its own: the stack makes no Cluster API claims"
    ),
    'sum by (api, operation, outcome) (rate(eni_ipam_agent_requests_total{namespace=~"$namespace", outcome!="ok"}[$__rate_interval]))': (  # noqa: E501
        "a CNI request seldom fails here: the churn's pods usually find a free address (a pod started "
        "just before its pool grows is refused pool_exhausted now and then, not in every run)"
    ),
    'sum by (outcome) (increase(eni_ipam_agent_datapath_reconciles_total{namespace=~"$namespace"}[$__rate_interval]))': (  # noqa: E501
        "the stack's agents run with the datapath off (it would change this host's own routing); "
        "tests/agent/datapath/test_agent_datapath.py reads the counter from an agent in a network "
        "namespace of its own"
    ),
    'max by (subnet) (eni_ipam_subnet_pressure{namespace=~"$namespace"})': PRESSURE_OFF,
    'sum by (subnet) (increase(eni_ipam_subnet_pressure_transitions_total{namespace=~"$namespace"}[$__rate_interval]))': (  # noqa: E501
        PRESSURE_OFF
    ),
    'sum by (subnet) (eni_ipam_ready_interfaces{namespace=~"$namespace"})': READY_INTERFACES_OFF,
    'sum by (outcome) (increase(eni_ipam_ready_interface_takes_total{namespace=~"$namespace"}[$__rate_interval]))': (  # noqa: E501
        READY_INTERFACES_OFF
    ),
    'sum by (outcome) (increase(eni_ipam_ready_interface_refills_total{namespace=~"$namespace"}[$__rate_interval]))': (  # noqa: E501
        READY_INTERFACES_OFF
    ),
}
"""Dashboard queries (as written in deploy/grafana/eni-ipam.json) that may return nothing here, with
the reason. An entry that is no longer a query of the dashboard fails the test."""


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    async with running_stack(Path(tmp_path_factory.mktemp("prometheus-e2e"))) as running:
        yield running


def test_the_allowed_empty_list_names_only_queries_of_the_dashboard() -> None:
    board = dashboard.load()
    queries = {t.expr for t in dashboard.targets(board)} | {v.query for v in dashboard.variables(board)}
    unknown = sorted(set(ALLOWED_EMPTY) - queries)
    assert not unknown, f"ALLOWED_EMPTY lists queries the dashboard no longer has: {unknown}"
    assert all(reason.strip() for reason in ALLOWED_EMPTY.values())


@in_stack_loop
async def test_every_dashboard_query_is_accepted_and_returns_data(stack: Stack) -> None:
    board = dashboard.load()
    range_seconds = dashboard.time_range(board)
    step = dashboard.interval(range_seconds, max_data_points=MAX_DATA_POINTS, scrape_interval=SCRAPE_INTERVAL)
    values = dashboard.builtins(scrape_interval=SCRAPE_INTERVAL, interval=step, range_seconds=range_seconds)
    rejected: list[str] = []
    empty: list[str] = []
    report: list[str] = [f"$__interval={values['__interval']} $__rate_interval={values['__rate_interval']}"]

    for variable in dashboard.variables(board):
        query = dashboard.substitute(variable.query, values)
        parsed = dashboard.parse_variable_query(query)
        if isinstance(parsed, dashboard.LabelValues):
            found = await stack.prometheus.label_values(parsed.label, parsed.selector)
        else:
            status, body = await stack.prometheus.query(parsed.expr)
            if status != 200:
                rejected.append(f"variable ${variable.name}: HTTP {status} {body.get('error')}\n    {query}")
                continue
            found = [str(s["metric"]) for s in body["data"]["result"]]
        report.append(f"variable ${variable.name}: {len(found)} values {found[:5]}")
        if not found:
            (report if variable.query in ALLOWED_EMPTY else empty).append(
                f"variable ${variable.name}: {query}"
            )
        values[variable.name] = dashboard.variable_value(variable, found) if found else ".*"

    for target in dashboard.targets(board):
        expr = dashboard.substitute(target.expr, values)
        status, body = await stack.prometheus.query(expr)
        if status != 200 or body.get("status") != "success":
            rejected.append(
                f"{target.where}: HTTP {status} {body.get('errorType')}: {body.get('error')}\n    {expr}"
            )
            continue
        series, finite = finite_samples(body["data"])
        how = "now"
        if not finite and not target.instant:  # a time series panel shows what the whole range had
            status, body = await stack.prometheus.query_range(expr, stack.started, now(), step)
            assert status == 200, f"{target.where}: query_range: HTTP {status} {body}"
            series, finite = finite_samples(body["data"])
            how = "over the run"
        allowed = target.expr in ALLOWED_EMPTY
        report.append(f"{'ok' if finite else 'EMPTY'} {series} series ({how}): {target.where}")
        if not finite and not allowed:
            empty.append(f"{target.where}: {series} series, none with a value\n    {expr}")
        elif finite and allowed:
            report.append(f"  (allowed empty, but has data: {ALLOWED_EMPTY[target.expr]})")
    print("\n".join(report))
    assert not rejected, "Prometheus rejected dashboard queries:\n" + "\n".join(rejected)
    assert not empty, (
        "dashboard queries without data (fix the product or the dashboard, or list them in "
        "ALLOWED_EMPTY with the reason):\n" + "\n".join(empty) + "\n" + stack.diagnostics()
    )


@in_stack_loop
async def test_pods_come_and_go_on_the_cluster_so_its_counters_move(stack: Stack) -> None:
    """Not only the demo feeds the dashboard: the cluster's controller allocated and released
    addresses while scraped (the pod churn through its agent), and the agent reported them."""
    window = f"{int(now() - stack.started)}s"
    for expr in [
        f'sum(increase(eni_ipam_allocation_ops_total{{job="{RELEASE}"}}[{window}]))',
        f'sum(increase(eni_ipam_release_ops_total{{job="{RELEASE}"}}[{window}]))',
        f'sum(increase(eni_ipam_agent_status_reports_total{{job="{RELEASE}-agent",outcome="ok"}}[{window}]))',
    ]:
        status, body = await stack.prometheus.query(expr)
        assert status == 200, f"{expr}: HTTP {status} {body}"
        result = body["data"]["result"]
        moved = float(result[0]["value"][1]) if result else 0.0
        print(f"{moved:g} = {expr}")
        assert moved > 0, f"{expr} did not move\n{stack.diagnostics()}"


@in_stack_loop
@pytest.mark.parametrize("job", [RELEASE, DEMO_JOB])
async def test_cluster_totals_equal_the_sums_of_the_node_series_at_every_scrape(
    stack: Stack, job: str
) -> None:
    """Over the whole run, at every scrape interval, the totals Prometheus holds equal the sums and
    counts of the per-node series of the same scrape: not one evaluation may find them apart."""
    sel = f'job="{job}"'
    totals = f"max by (type) (eni_ipam_ips{{{sel}}})"
    mismatches = {
        "ips": f"{totals} - sum by (type) (eni_ipam_node_ips{{{sel}}}) != 0",
        "nodes total": f'max(eni_ipam_nodes{{{sel},category="total"}})'
        f' - (count(eni_ipam_node_ips{{{sel},type="available"}}) or vector(0)) != 0',
        "nodes in deficit": f'max(eni_ipam_nodes{{{sel},category="in-deficit"}})'
        f' - (count(eni_ipam_node_ips{{{sel},type="needed"}} > 0) or vector(0)) != 0',
        "nodes at capacity": f'max(eni_ipam_nodes{{{sel},category="at-capacity"}})'
        f' - (count(eni_ipam_node_at_capacity{{{sel},reason="instance-limit"}}) or vector(0)) != 0',
    }
    end = now()
    status, body = await stack.prometheus.query_range(totals, stack.started, end, SCRAPE_INTERVAL)
    assert status == 200, body
    assert finite_samples(body["data"])[1], f"no totals exported by {job}: the check would prove nothing"
    for what, expr in mismatches.items():
        status, body = await stack.prometheus.query_range(expr, stack.started, end, SCRAPE_INTERVAL)
        assert status == 200 and body["status"] == "success", f"{expr}: HTTP {status} {body}"
        apart = [(r["metric"], r["values"][:3]) for r in body["data"]["result"]]
        assert not apart, f"{job}: {what} disagree with the per-node series: {apart}\n    {expr}"


@in_stack_loop
async def test_every_alert_rule_loads_healthy_and_no_alert_fires_for_the_cluster_or_the_demo(
    stack: Stack,
) -> None:
    """Both installations are healthy (the cluster's pods and the demo's come and go within what
    their nodes and subnets hold), so at no rule evaluation of the run may any alert fire, for the
    cluster or for the demo. The rules' timings are the chart's divided by RULE_SCALE, so every
    rule's ``for`` has run out several times over within the run: the check is not empty."""
    print(f"the chart's rule timings divided by {RULE_SCALE}: {scaled_rule_values()}")
    fixed = fixed_minute_rules(stack.rules)
    assert not fixed, f"rules holding a fixed minute, which the scaled run cannot judge: {fixed}"
    for rule in stack.rules:  # each expression once, for its syntax and its evaluation
        status, body = await stack.prometheus.query(rule["expr"])
        assert status == 200 and body["status"] == "success", f"{rule['alert']}: HTTP {status} {body}"
    groups = (await stack.prometheus.get("/api/v1/rules", {"type": "alert"}))["groups"]
    loaded: list[dict[str, Any]] = [r for g in groups for r in g["rules"]]
    assert sorted(r["name"] for r in loaded) == sorted(r["alert"] for r in stack.rules)
    unhealthy = [f"{r['name']}: {r['health']} {r.get('lastError')}" for r in loaded if r["health"] != "ok"]
    assert not unhealthy, "alert rules that do not evaluate:\n" + "\n".join(unhealthy)

    end = now()
    unjudged = sorted(
        {r["alert"] for r in stack.rules if duration_seconds(r.get("for", "0s")) * 1.5 > end - stack.started}
    )
    if unjudged:  # a shorter run than RUN_SECONDS's default
        print(f"rules whose `for` is about the run's length or longer, so not judged: {unjudged}")
        assert "ENI_IPAM_E2E_RUN_SECONDS" in os.environ, f"the run is too short to judge {unjudged}"
    pending = await stack.alerts_between(stack.started, end, "pending")
    fired = await stack.alerts_between(stack.started, end, "firing")
    for what, alerts in [("pending (not firing) at some evaluation", pending), ("firing", fired)]:
        print(f"alerts {what} during the run:")
        print("\n".join(f"  {alert}" for alert in alerts) or "  none")
    # Each rule file reads its own installation's series only (namespace and job): the release's
    # controllers and agents, or the demo, a cluster of its own which leads itself.
    strangers = [str(a) for a in pending + fired if a.installation not in stack.installations]
    assert not strangers, f"alerts about none of {sorted(stack.installations)}: {strangers}"
    shown = "\n".join(map(str, fired))
    assert not fired, f"alerts fired on a healthy run:\n{shown}\n{stack.diagnostics()}"


@in_stack_loop
@pytest.mark.parametrize("process", ["controller", "agent", "demo"])
async def test_metrics_pass_promtool_check_metrics(stack: Stack, process: str) -> None:
    service = stack.services[process]
    status, text = await fetch(stack.prometheus.session, service.url + "/metrics")
    assert status == 200, f"{service.url}/metrics: HTTP {status}"
    checked = promtool_check_metrics(text)
    output = (checked.stdout + checked.stderr).strip()
    assert checked.returncode == 0 and not output, f"promtool check metrics ({process}):\n{output}"
