"""The Grafana dashboard and the PrometheusRule against the metrics the code exports: every name and
label they query exists, every metric family has a panel, and every alert is complete."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from prometheus_client.metrics import MetricWrapperBase

from eni_ipam.adapters.metrics import Metrics
from eni_ipam.agent.metrics import AgentMetrics
from tests.deploy.conftest import REPO_ROOT, HelmError, one, render, values

DASHBOARD = json.loads((REPO_ROOT / "deploy" / "grafana" / "eni-ipam.json").read_text())
NAME = re.compile(r"eni_ipam_[a-z_]+")
TARGET_LABELS = {"pod", "instance", "namespace", "job", "service", "container", "endpoint"}
"""Labels Prometheus adds to every scraped series (ServiceMonitor targets)."""
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}


def exported() -> dict[str, tuple[str, set[str]]]:
    """Sample name → (family name, label names) for every sample a query may use: the controller's
    and the node agent's metrics."""
    out: dict[str, tuple[str, set[str]]] = {}
    for metrics in (Metrics(), AgentMetrics()):
        labels = {
            m._name: set(m._labelnames) for m in vars(metrics).values() if isinstance(m, MetricWrapperBase)
        }
        for family in metrics.registry.collect():
            if not family.name.startswith("eni_ipam_"):
                continue  # the process's and the interpreter's own (process_*, python_*)
            # Families a collector computes (the cluster totals) declare their labels themselves.
            names = labels.get(family.name, set(getattr(family, "_labelnames", ())))
            for suffix in SUFFIXES[family.type]:
                extra = {"le"} if suffix == "_bucket" else set()
                out[family.name + suffix] = (family.name, names | extra)
    return out


EXPORTED = exported()


def dashboard_panels() -> list[dict[str, Any]]:
    panels = []
    for panel in DASHBOARD["panels"]:
        panels.append(panel)
        panels.extend(panel.get("panels", []))  # collapsed rows hold their panels
    return panels


def dashboard_exprs() -> list[tuple[str, str]]:
    """(expression, legend format) of every target, and of every variable query."""
    out = [(t["expr"], t.get("legendFormat", "")) for p in dashboard_panels() for t in p.get("targets", [])]
    for variable in DASHBOARD["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]
            out.append((query["query"] if isinstance(query, dict) else query, ""))
    return out


def alert_rules() -> list[dict[str, Any]]:
    """Every alert the chart renders: the node agents' too."""
    docs = render({"prometheusRule": {"enabled": True}, "agent": {"enabled": True}})
    return [r for g in one(docs, "PrometheusRule")["spec"]["groups"] for r in g["rules"] if "alert" in r]


def check_expression(expr: str, legend: str = "") -> set[str]:
    """Assert that every metric and label ``expr`` names exists; return the families it uses."""
    names = NAME.findall(expr)
    assert names, f"no eni_ipam metric in {expr!r}"
    unknown = [n for n in names if n not in EXPORTED]
    assert not unknown, f"{unknown} not exported (in {expr!r})"
    labels = set(TARGET_LABELS).union(*(EXPORTED[n][1] for n in names))
    for name, matchers in re.findall(r"(eni_ipam_[a-z_]+)\{([^}]*)\}", expr):
        for label in re.findall(r"(\w+)\s*(?:=~|!~|!=|=)", matchers):
            assert label in EXPORTED[name][1] | TARGET_LABELS, f"{name} has no label {label!r} (in {expr!r})"
    grouped = [x.strip() for g in re.findall(r"\b(?:by|without)\s*\(([^)]*)\)", expr) for x in g.split(",")]
    grouped += re.findall(r"label_values\([^,]+,\s*(\w+)\)", expr)
    for label in [*grouped, *re.findall(r"\{\{\s*(\w+)\s*\}\}", legend)]:
        assert label in labels, f"no metric of {expr!r} has a label {label!r}"
    assert expr.count("(") == expr.count(")") and expr.count("[") == expr.count("]"), expr
    return {EXPORTED[n][0] for n in names}


# -- dashboard -----------------------------------------------------------------------------------


def test_dashboard_queries_only_exported_metrics_and_labels():
    for expr, legend in dashboard_exprs():
        check_expression(expr, legend)


def test_dashboard_covers_every_metric_family():
    used = set().union(*(check_expression(e, legend) for e, legend in dashboard_exprs()))
    families = {family for family, _ in EXPORTED.values()}
    assert families - used == set(), "metric families without a dashboard panel"


def test_dashboard_variables():
    variables = {v["name"]: v for v in DASHBOARD["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert (
        variables["node"]["query"]["query"]
        == 'label_values(eni_ipam_node_ips{namespace=~"$namespace"}, node)'
    )
    assert (
        variables["subnet"]["query"]["query"]
        == 'label_values(eni_ipam_available_ips_per_subnet{namespace=~"$namespace"}, subnet)'
    )
    installation = variables["namespace"]
    assert installation["query"]["query"] == "label_values(eni_ipam_build_info, namespace)"
    assert installation["includeAll"] and installation["allValue"] == ".*"  # All: as before
    exprs = " ".join(e for e, _ in dashboard_exprs())
    assert "$node" in exprs and "$subnet" in exprs
    for panel in dashboard_panels():
        if panel["type"] != "row":
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
            for target in panel["targets"]:
                assert target["datasource"]["uid"] == "${datasource}", panel["title"]


def test_every_dashboard_query_reads_the_chosen_installation_only():
    """Two releases scraped by one Prometheus: every selector of every query is limited to the
    installation picked in $namespace (a "Leaders 3" across releases was the symptom)."""
    unscoped = [
        (expr, selector)
        for expr, _ in dashboard_exprs()
        for selector in re.findall(r"eni_ipam_[a-z_]+(?:\{[^}]*\})?", expr)
        if selector != "eni_ipam_build_info" and 'namespace=~"$namespace"' not in selector
    ]
    assert not unscoped, unscoped


def test_dashboard_layout():
    assert DASHBOARD["schemaVersion"] >= 36 and DASHBOARD["uid"] and DASHBOARD["title"]
    panels = dashboard_panels()
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "duplicate panel ids"
    taken: set[tuple[int, int]] = set()
    for panel in panels:
        pos = panel["gridPos"]
        assert pos["w"] > 0 and pos["h"] > 0 and pos["x"] >= 0 and pos["x"] + pos["w"] <= 24, panel["title"]
        cells = {
            (x, y) for x in range(pos["x"], pos["x"] + pos["w"]) for y in range(pos["y"], pos["y"] + pos["h"])
        }
        assert not cells & taken, f"panel {panel['title']!r} overlaps another"
        taken |= cells
        refs = [t["refId"] for t in panel.get("targets", [])]
        assert len(refs) == len(set(refs)), panel["title"]
        assert panel["type"] == "row" or (panel.get("title") and panel.get("targets")), panel


# -- alerts --------------------------------------------------------------------------------------


@pytest.mark.system
def test_alerts_query_only_exported_metrics_and_labels():
    for rule in alert_rules():
        check_expression(rule["expr"])
        labels = set(TARGET_LABELS).union(*(EXPORTED[n][1] for n in NAME.findall(rule["expr"])))
        for text in rule["annotations"].values():
            for label in re.findall(r"\$labels\.(\w+)", text):
                assert label in labels, (rule["alert"], label)


@pytest.mark.system
def test_every_alert_is_complete():
    rules = alert_rules()
    names = [r["alert"] for r in rules]
    assert len(names) == len(set(names))
    for rule in rules:
        assert rule["labels"]["severity"] in ("critical", "warning"), rule["alert"]
        assert rule["annotations"]["summary"].strip() and rule["annotations"]["description"].strip(), rule[
            "alert"
        ]
        assert re.fullmatch(r"\d+[smh]", rule["for"]), rule["alert"]
        assert "{{" not in rule["expr"], rule["alert"]


SHARE = r"\s*/\s*"
"""A division, however the expression is laid out."""
SEL = r'\{namespace="kube-system", job="eni-ipam"'
"""This installation's series (the rendered release: eni-ipam in kube-system), by the labels its
ServiceMonitor gives them."""


def gauge(name: str, by: str, match: str = "") -> str:
    """The pattern of a leader's pool gauge as the rules read it (eni-ipam.leaderGauge): live, or its
    last value only while the installation exports no pool gauge (a hand-over)."""
    sel = SEL + (f", {match}" if match else "") + r"\}"
    return (
        rf"\(\s*max by \(namespace, job, {by}\) \({name}{sel}\)\s+or\s+\(\s*"
        rf"max by \(namespace, job, {by}\) \(last_over_time\({name}{sel}\[5m\]\)\)\s+"
        rf"unless on \(namespace, job\)\s+eni_ipam_ips{SEL}\}}\s*\)\s*\)"
    )


THIS = SEL + r"\}"
SUM = r"sum by \(namespace, job"
FREE = gauge("eni_ipam_available_ips_per_subnet", "subnet, zone")
SIZE = gauge("eni_ipam_subnet_size_ips", "subnet, zone")
PRESSURE = gauge("eni_ipam_subnet_pressure", "subnet, zone")
NEEDED = gauge("eni_ipam_node_ips", "node", 'type="needed"')
AT_CAPACITY = gauge("eni_ipam_node_at_capacity", "node")
FAILING = gauge("eni_ipam_node_failing", "node", 'reason!="Throttled"')
STUCK = gauge("eni_ipam_node_at_capacity", "node, reason", 'reason!="instance-limit"')
FULL_NODE = gauge("eni_ipam_node_at_capacity", "node, reason", 'reason="instance-limit"')


@pytest.mark.parametrize(
    ("alert", "patterns", "duration"),
    [
        (
            "EniIpamNotReady",
            # Minutes without a ready replica, counted: a crash loop through ready pages (finding 6);
            # minutes before the rules were loaded do not count.
            [
                rf"^sum_over_time\(\s*\(\s*{SUM}\) \(eni_ipam_ready{THIS}\) < bool 1\s+or\s+"
                rf"\(\s*absent\(eni_ipam_ready{THIS}\)\s+and on \(\)\s+eni_ipam:rules_evaluated"
                r'\{release_namespace="kube-system", release="eni-ipam"\}\s*\)\s*\)\[10m:1m\]\s*\) >= 5$'
            ],
            "1m",
        ),
        ("EniIpamSeveralLeaders", [rf"^{SUM}\) \(eni_ipam_leader{THIS}\) > 1$"], "5m"),
        # The minutes of the window below 2, not every sample: under churn a full subnet shows 2 or 3
        # now and then (the on-call review's finding 2).
        ("EniIpamSubnetFull", [rf"^sum_over_time\(\s*\(\s*{FREE} < bool 2\s*\)\[8m:1m\]\s*\) >= 5$"], "1m"),
        (
            "EniIpamSubnetLow",
            [rf"^{FREE} < 64\s+and", rf"{FREE}{SHARE}{SIZE}\s*\) < 0.25$"],
            "10m",
        ),
        # The subnet's own judgement (decision 0054), held for half an hour.
        ("EniIpamSubnetUnderPressure", [rf"^{PRESSURE} > 0$"], "30m"),
        (
            "EniIpamSubnetExhaustionPredicted",
            # Time to empty: something left, the hour's trend reaching 0 within 4 hours, and still
            # going down over the last quarter of an hour.
            [
                rf"^{FREE} > 0\s+and\s+",
                rf"predict_linear\(\s*{FREE}\[1h:1m\],\s*14400\s*\) < 0\s+and\s+",
                rf"deriv\(\s*{FREE}\[15m:1m\]\s*\) < 0$",
            ],
            "30m",
        ),
        (
            "EniIpamNodesInDeficit",
            # Per node, and not the nodes the capacity alert reports.
            # ...nor during an outage of the installation (EniIpamAllocationsFailing names it once).
            # Failing (throttling aside) for deficitFor, or short in each of the last 15 minutes.
            [
                rf"^\(\s*{NEEDED} > 0\s*\)\s+and on \(namespace, job, node\)\s+\(\s*{FAILING}\s+or\s+"
                rf"sum_over_time\(\s*\(max by \(namespace, job, node\) \(eni_ipam_node_ips{SEL}, "
                r'type="needed"\}\) > bool 0\)\[900s:1m\]\s*\) >= 15\s*\)'
                rf"\s+unless on \(namespace, job, node\)\s+{AT_CAPACITY}"
                r"\s+unless on \(namespace, job\)\s+\(",
                r"eni_ipam_oldest_deficit_seconds",
            ],
            "5m",
        ),
        (
            "EniIpamNodesAtCapacity",
            [rf"^{STUCK}\s+or", rf"{FULL_NODE}\s+and on \(namespace, job, node\)\s+{NEEDED} > 0"],
            "15m",
        ),
        (
            "EniIpamCloudApiThrottled",
            [
                rf"^{SUM}, operation\) \(rate\(eni_ipam_api_throttled_total{THIS}\[2m\]\)\)"
                rf"{SHARE}{SUM}, operation\) \(rate\(eni_ipam_api_requests_total{THIS}"
                r"\[2m\]\)\)\s+> 0.1$"
            ],
            "10m",
        ),
        (
            "EniIpamMaintenanceFailing",
            [
                rf"^{SUM}, reason\) \(rate\(eni_ipam_node_maintenance_failures_total{THIS}"
                r"\[10m\]\)\)\s*/ on \(namespace, job\) group_left\s*"
                rf"{SUM}\) \(rate\(eni_ipam_node_maintenance_passes_total{THIS}\[10m\]\)\)"
                r"\s+> 0.1$"
            ],
            "20m",
        ),
        (
            "EniIpamResyncFailing",
            # Failures and no success in the window: the view is getting stale.
            [
                rf"^{SUM}\) \(increase\(eni_ipam_resync_failures_total{THIS}\[15m\]\)\) > 0"
                r"\s+unless on \(namespace, job\)\s+"
                rf"{SUM}\) \(increase\(eni_ipam_resync_total{THIS}\[15m\]\)\) > 0$"
            ],
            "5m",
        ),
        (
            "EniIpamGarbageCollectionFailing",
            [
                rf"^{SUM}\) \(rate\(eni_ipam_gc_run_failures_total{THIS}\[10m\]\)\) > 0"
                r"\s+or\s+",
                rf'{SUM}\) \(rate\(eni_ipam_gc_interfaces_total{SEL}, action="failed"\}}'
                r"\[10m\]\)\) > 0$",
            ],
            "30m",
        ),
        (
            "EniIpamStatusWritesFailing",
            [
                rf'^{SUM}\) \(rate\(eni_ipam_status_writes_total{SEL}, outcome="failed"\}}'
                rf"\[10m\]\)\){SHARE}"
                rf"{SUM}\) \(rate\(eni_ipam_status_writes_total{THIS}\[10m\]\)\)\s+> 0.1$"
            ],
            "20m",
        ),
    ],
)
@pytest.mark.system
def test_the_required_alerts_exist(alert: str, patterns: list[str], duration: str | None) -> None:
    rules = {r["alert"]: r for r in alert_rules()}
    assert alert in rules, f"no alert {alert}"
    expr = rules[alert]["expr"]
    for pattern in patterns:
        assert re.search(pattern, expr), f"{alert}: {pattern!r} not in {expr!r}"
    assert rules[alert].get("for") == duration, alert
    # Every alert is kept firing past its condition, but the per-node deficit: under churn it would
    # never clear (the on-call review's finding 1).
    assert rules[alert].get("keep_firing_for") == (None if alert in NOT_KEPT_FIRING else "5m"), alert


NOT_KEPT_FIRING = {"EniIpamNodesInDeficit"}
"""Alerts that resolve at the first evaluation without their condition."""

THRESHOLDS: dict[str, Any] = {
    "selector": 'job="custom", cluster="prod"',
    "installationLabels": ["cluster", "job"],
    "handOverGap": "4m",
    "keepFiringFor": "6m",
    "countStep": "30s",
    "notReadyMinutes": 7,
    "notReadyWindow": "13m",
    "severalLeadersFor": "8m",
    "leaderChangesWindow": "23m",
    "leaderChangesAbove": 9,
    "subnetFullBelow": 3,
    "subnetFullFor": "4m",
    "subnetFullMinutes": 3,
    "subnetFreeAddressesBelow": 7,
    "subnetLowFreeShareBelow": 0.31,
    "subnetLowFor": "11m",
    "subnetPressureFor": "47m",
    "subnetTrendWindow": "12h",
    "subnetRecentWindow": "7m",
    "subnetTrendResolution": "10m",
    "subnetExhaustionSeconds": 7200,
    "subnetExhaustionFor": "2h",
    "deficitFor": "9m",
    "deficitWaitingMinutes": 12,
    "atCapacityFor": "17m",
    "rateWindow": "6m",
    "throttledShareAbove": 0.2,
    "throttlingWindow": "4m",
    "throttlingFor": "25m",
    "outageWindow": "11m",
    "outageFailureShareAbove": 0.6,
    "outageDeficitAbove": 240,
    "outageFor": "4m",
    "maintenanceFailureShareAbove": 0.3,
    "statusWriteFailureShareAbove": 0.4,
    "failuresFor": "21m",
    "resyncStaleAfter": "19m",
    "resyncFailingFor": "3m",
    "gcWindow": "13m",
    "gcFailingFor": "41m",
    "agentSelector": 'job="custom-agent", cluster="prod"',
    "agentNotReadyFor": "12m",
    "agentFailureShareAbove": 0.35,
    "agentFailingFor": "14m",
    "agentRateWindow": "4m",
    "agentMissingFor": "16m",
    "agentStateUnwritableFor": "6m",
    "agentRebuildFor": "18m",
    "criticalSeverity": "wake-up",
    "warningSeverity": "page",
}
"""A value, unlike its default, for every threshold, duration and severity under prometheusRule."""
GAUGE = ("[4m]", "unless on (cluster, job)")
"""What every rule reading a leader's pool gauge holds with THRESHOLDS: its hand-over gap, and the
installation labels it bridges the gap by."""
EXPECTED: dict[str, tuple[str | None, list[str], str]] = {
    "EniIpamNotReady": ("30s", ["sum by (cluster, job)", "[13m:30s]", ">= 7"], "wake-up"),
    "EniIpamSeveralLeaders": ("8m", ["sum by (cluster, job)"], "wake-up"),
    "EniIpamLeadershipFlapping": ("30s", ["sum by (cluster, job)", "[23m]", "> 9"], "page"),
    "EniIpamSubnetFull": ("30s", ["< bool 3", "[4m:30s]", ">= 3", *GAUGE], "wake-up"),
    "EniIpamSubnetLow": ("11m", ["< 7\n", "< 0.31", *GAUGE], "page"),
    "EniIpamSubnetExhaustionPredicted": ("2h", ["[12h:10m]", "[7m:10m]", "7200", *GAUGE], "wake-up"),
    "EniIpamSubnetUnderPressure": ("47m", ["eni_ipam_subnet_pressure", "> 0", *GAUGE], "page"),
    "EniIpamNodesInDeficit": ("9m", ["max by (cluster, job, node)", "[360s:30s]", ">= 12", *GAUGE], "page"),
    "EniIpamNodesAtCapacity": ("17m", ["max by (cluster, job, node, reason)", *GAUGE], "page"),
    "EniIpamCloudApiThrottled": (
        "25m",
        ['_throttled_total{job="custom", cluster="prod"}[4m]', "> 0.2"],
        "page",
    ),
    "EniIpamAllocationsFailing": (
        "4m",
        [
            '_failures_total{job="custom", cluster="prod"}[11m]',
            '_passes_total{job="custom", cluster="prod"}[11m]',
            "> 0.6",
            "> 240",
        ],
        "wake-up",
    ),
    "EniIpamAgentNotReady": (
        "12m",
        ['eni_ipam_agent_ready{job="custom-agent", cluster="prod"}', "(cluster, job, pod"],
        "page",
    ),
    "EniIpamAgentRequestsFailing": (
        "14m",
        ['_requests_total{job="custom-agent", cluster="prod", outcome!~', "[6m]", "> 0.35"],
        "page",
    ),
    "EniIpamAgentPoolExhausted": ("14m", ['outcome=~"pool_exhausted|pool_withheld"}[4m]'], "page"),
    "EniIpamAgentMissing": (
        "16m",
        ['eni_ipam_agent_release_answers{job="custom-agent", cluster="prod"}', *GAUGE],
        "page",
    ),
    "EniIpamAgentStateUnwritable": (
        "6m",
        ['eni_ipam_agent_state_writable{job="custom-agent", cluster="prod"}'],
        "page",
    ),
    "EniIpamAgentRebuildIncomplete": (
        "18m",
        ['eni_ipam_agent_source_unread{job="custom-agent", cluster="prod"}'],
        "page",
    ),
    "EniIpamMaintenanceFailing": (
        "21m",
        [
            '_failures_total{job="custom", cluster="prod"}[6m]',
            '_passes_total{job="custom", cluster="prod"}[6m]',
            "> 0.3",
        ],
        "page",
    ),
    "EniIpamResyncFailing": (
        "3m",
        [
            '_failures_total{job="custom", cluster="prod"}[19m]',
            '_resync_total{job="custom", cluster="prod"}[19m]',
        ],
        "page",
    ),
    "EniIpamGarbageCollectionFailing": (
        "41m",
        ['_run_failures_total{job="custom", cluster="prod"}[13m]', 'failed"}[13m]'],
        "page",
    ),
    "EniIpamStatusWritesFailing": (
        "21m",
        ['failed"}[6m]', '_writes_total{job="custom", cluster="prod"}[6m]', "> 0.4"],
        "page",
    ),
}
"""Alert → its ``for``, what its expression holds, and its severity, with THRESHOLDS."""


def test_every_alert_setting_of_values_is_exercised_by_the_threshold_test() -> None:
    settings = set(values()["prometheusRule"]) - {"enabled", "labels"}
    assert settings == set(THRESHOLDS), "THRESHOLDS must set every value under prometheusRule"


@pytest.mark.system
def test_alert_thresholds_come_from_values() -> None:
    docs = render({"prometheusRule": {"enabled": True, **THRESHOLDS}, "agent": {"enabled": True}})
    rules = {
        r["alert"]: r
        for g in one(docs, "PrometheusRule")["spec"]["groups"]
        for r in g["rules"]
        if "alert" in r
    }
    assert set(rules) == set(EXPECTED)
    for alert, (duration, parts, severity) in EXPECTED.items():
        rule = rules[alert]
        assert rule.get("for") == duration, alert
        assert rule["labels"]["severity"] == severity, alert
        for part in parts:
            assert part in rule["expr"], f"{alert}: {part!r} not in {rule['expr']!r}"
        assert rule.get("keep_firing_for") == (None if alert in NOT_KEPT_FIRING else "6m"), alert
        # Nothing of the defaults is left where a value should be.
        assert not re.search(r"\[(1h|1m|2m|3m|5m|10m|15m)[]:]", rule["expr"]), f"{alert}: a fixed window"
        assert ":1m]" not in rule["expr"], f"{alert}: a fixed step"
        # The rules' own clock names the release, not the controllers' series.
        expr = re.sub(r"eni_ipam:rules_evaluated\{[^}]*\}", "eni_ipam:rules_evaluated", rule["expr"])
        assert "kube-system" not in expr and "namespace" not in expr, alert


@pytest.mark.system
@pytest.mark.parametrize("step", ["1.5m", "90", "0s", "1d"])
def test_a_count_step_the_rules_cannot_multiply_fails_naming_the_value(step: str) -> None:
    with pytest.raises(HelmError, match=r"prometheusRule\.countStep: .* is not a whole number"):
        render({"prometheusRule": {"enabled": True, "countStep": step}})


@pytest.mark.system
def test_without_keep_firing_for_the_rules_carry_none_for_an_older_prometheus() -> None:
    """keep_firing_for needs Prometheus 2.42; ``keepFiringFor: ""`` leaves it out of every rule."""
    docs = render({"prometheusRule": {"enabled": True, "keepFiringFor": ""}})
    rules = [r for g in one(docs, "PrometheusRule")["spec"]["groups"] for r in g["rules"]]
    assert rules and not [r["alert"] for r in rules if "keep_firing_for" in r]


def test_dashboard_panels_have_their_own_ids_and_places():
    """Grafana keys a panel's state (links, edits, a shared URL's ``viewPanel``) by its id, and draws
    panels that share grid cells over each other."""
    panels = dashboard_panels()
    ids = [p["id"] for p in panels]
    assert sorted(i for i in ids if ids.count(i) > 1) == []
    cells: dict[tuple[int, int], str] = {}
    for panel in panels:
        grid = panel["gridPos"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                other = cells.setdefault((x, y), panel["title"])
                assert other == panel["title"], f"{panel['title']!r} overlaps {other!r} at {(x, y)}"
