"""The Grafana dashboard and the PrometheusRule against the metrics the code exports: every name and
label they query exists, every metric family has a panel, and every alert is complete."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from prometheus_client.metrics import MetricWrapperBase

from eni_ipam.core.metrics import Metrics
from tests.deploy.conftest import REPO_ROOT, one, render

DASHBOARD = json.loads((REPO_ROOT / "deploy" / "grafana" / "eni-ipam.json").read_text())
NAME = re.compile(r"eni_ipam_[a-z_]+")
TARGET_LABELS = {"pod", "instance", "namespace", "job", "service", "container", "endpoint"}
"""Labels Prometheus adds to every scraped series (ServiceMonitor targets)."""
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}


def exported() -> dict[str, tuple[str, set[str]]]:
    """Sample name → (family name, label names) for every sample a query may use."""
    metrics = Metrics()
    labels = {m._name: set(m._labelnames) for m in vars(metrics).values() if isinstance(m, MetricWrapperBase)}
    out: dict[str, tuple[str, set[str]]] = {}
    for family in metrics.registry.collect():
        for suffix in SUFFIXES[family.type]:
            extra = {"le"} if suffix == "_bucket" else set()
            out[family.name + suffix] = (family.name, labels[family.name] | extra)
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
    docs = render({"prometheusRule": {"enabled": True}})
    return [r for g in one(docs, "PrometheusRule")["spec"]["groups"] for r in g["rules"]]


def check_expression(expr: str, legend: str = "") -> set[str]:
    """Assert that every metric and label ``expr`` names exists; return the families it uses."""
    names = NAME.findall(expr)
    assert names, f"no eni_ipam metric in {expr!r}"
    unknown = [n for n in names if n not in EXPORTED]
    assert not unknown, f"{unknown} not exported (in {expr!r})"
    labels = set(TARGET_LABELS).union(*(EXPORTED[n][1] for n in names))
    for name, matchers in re.findall(r"(eni_ipam_[a-z_]+)\{([^}]*)\}", expr):
        for label in re.findall(r"(\w+)\s*(?:=~|!~|!=|=)", matchers):
            assert label in EXPORTED[name][1], f"{name} has no label {label!r} (in {expr!r})"
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
    assert "label_values(eni_ipam_node_ips, node)" in json.dumps(variables["node"]["query"])
    assert "label_values(eni_ipam_available_ips_per_subnet, subnet)" in json.dumps(
        variables["subnet"]["query"]
    )
    exprs = " ".join(e for e, _ in dashboard_exprs())
    assert "$node" in exprs and "$subnet" in exprs
    for panel in dashboard_panels():
        if panel["type"] != "row":
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
            for target in panel["targets"]:
                assert target["datasource"]["uid"] == "${datasource}", panel["title"]


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


def test_alerts_query_only_exported_metrics_and_labels():
    for rule in alert_rules():
        check_expression(rule["expr"])
        labels = set(TARGET_LABELS).union(*(EXPORTED[n][1] for n in NAME.findall(rule["expr"])))
        for text in rule["annotations"].values():
            for label in re.findall(r"\$labels\.(\w+)", text):
                assert label in labels, (rule["alert"], label)


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


@pytest.mark.parametrize(
    ("pattern", "duration"),
    [
        (r"eni_ipam_available_ips_per_subnet\) < \d+", None),
        (r"predict_linear\(eni_ipam_available_ips_per_subnet\[", None),
        (r'eni_ipam_nodes\{category="in-deficit"\}\) > 0', "5m"),
        (r'eni_ipam_nodes\{category="at-capacity"\}\) > 0', None),
        (r"rate\(eni_ipam_api_throttled_total\[5m\]\)\) > 0", None),
        (r"sum\(eni_ipam_ready\) < 1 or absent\(eni_ipam_ready\)", "5m"),
        (r"eni_ipam_node_maintenance_failures_total", None),
        (r"eni_ipam_gc_run_failures_total", None),
        (r'eni_ipam_gc_interfaces_total\{action="failed"\}', None),
    ],
)
def test_the_required_alerts_exist(pattern, duration):
    matching = [r for r in alert_rules() if re.search(pattern, r["expr"])]
    assert matching, f"no alert matches {pattern!r}"
    if duration:
        assert matching[0]["for"] == duration


def test_alert_thresholds_come_from_values():
    docs = render(
        {
            "prometheusRule": {
                "enabled": True,
                "subnetFreeAddressesBelow": 7,
                "deficitFor": "9m",
                "warningSeverity": "page",
            }
        }
    )
    rules = {r["alert"]: r for g in one(docs, "PrometheusRule")["spec"]["groups"] for r in g["rules"]}
    assert rules["EniIpamSubnetLow"]["expr"].endswith("< 7")
    assert rules["EniIpamNodesInDeficit"]["for"] == "9m"
    assert rules["EniIpamNodesInDeficit"]["labels"]["severity"] == "page"
