"""The Grafana dashboard's queries, as Grafana would send them to Prometheus.

Every panel target (those of collapsed rows included) and every templating variable, read from
deploy/grafana/eni-ipam.json when called, so panels added to the dashboard are checked without a
change here. Variables are substituted as Grafana does: ``$__interval``, ``$__rate_interval``
(``max($__interval + scrape interval, 4 × scrape interval)``), ``$__range``, and the dashboard's
own variables, in ``$name``, ``${name}``, ``${name:format}`` and ``[[name]]`` form.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "eni-ipam.json"

_VARIABLE = re.compile(
    r"\$\{([A-Za-z_]\w*)(?::[\w-]+)?\}|\[\[([A-Za-z_]\w*)(?::[\w-]+)?\]\]|\$([A-Za-z_]\w*)"
)
_LABEL_VALUES = re.compile(r"^\s*label_values\(\s*(?:(?P<selector>.+?)\s*,\s*)?(?P<label>\w+)\s*\)\s*$", re.S)
_QUERY_RESULT = re.compile(r"^\s*query_result\((?P<expr>.+)\)\s*$", re.S)


@dataclass(frozen=True)
class Target:
    """One query of a panel: where it is, its expression as written in the dashboard, and whether
    Grafana runs it as a range query (a time series over the dashboard's range) or an instant one."""

    where: str
    expr: str
    instant: bool


@dataclass(frozen=True)
class Variable:
    """A templating variable of type ``query``: its query as written, and how Grafana would use it."""

    name: str
    query: str
    include_all: bool
    all_value: str | None
    multi: bool


@dataclass(frozen=True)
class LabelValues:
    """``label_values(selector, label)`` (``selector`` may be empty)."""

    selector: str
    label: str


@dataclass(frozen=True)
class QueryResult:
    """``query_result(expr)``: an instant query."""

    expr: str


def load() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def panels(dashboard: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every panel, those inside collapsed rows included (their ``panels``), in the file's order."""
    out: list[dict[str, Any]] = []
    for panel in dashboard.get("panels", []):
        out.append(panel)
        out.extend(panel.get("panels", []))
    return out


def targets(dashboard: Mapping[str, Any]) -> list[Target]:
    """Every panel target's query (hidden ones too: a hidden query is still shipped and may be shown)."""
    found: list[Target] = []
    row = ""
    for panel in panels(dashboard):
        if panel.get("type") == "row":
            row = panel.get("title", "")
            continue
        for target in panel.get("targets", []):
            if "expr" not in target:
                raise AssertionError(
                    f"panel {panel.get('title')!r}: a target without a PromQL expr: {target}"
                )
            where = f"{row} / {panel.get('title')} [{target.get('refId', '?')}]"
            instant = bool(target.get("instant")) and not target.get("range")
            found.append(Target(where=where, expr=target["expr"], instant=instant))
    return found


def variables(dashboard: Mapping[str, Any]) -> list[Variable]:
    """The templating variables that query Prometheus, in the dashboard's order (a variable may use
    the ones before it). Any type this test cannot evaluate fails, so a new kind is not skipped."""
    found: list[Variable] = []
    for variable in dashboard.get("templating", {}).get("list", []):
        kind = variable.get("type")
        if kind == "datasource":
            continue  # chooses the Prometheus; no query of its own
        if kind != "query":
            raise AssertionError(
                f"variable {variable.get('name')!r} of type {kind!r}: teach tests/e2e about it"
            )
        query = variable.get("query")
        text = query.get("query", "") if isinstance(query, dict) else str(query or "")
        found.append(
            Variable(
                name=variable["name"],
                query=text,
                include_all=bool(variable.get("includeAll")),
                all_value=variable.get("allValue") or None,
                multi=bool(variable.get("multi")),
            )
        )
    return found


def parse_variable_query(query: str) -> LabelValues | QueryResult:
    """What a Prometheus variable query asks for; anything else fails (extend this when needed)."""
    if match := _LABEL_VALUES.match(query):
        return LabelValues(selector=match.group("selector") or "", label=match.group("label"))
    if match := _QUERY_RESULT.match(query):
        return QueryResult(expr=match.group("expr"))
    raise AssertionError(
        f"variable query {query!r}: only label_values(...) and query_result(...) are supported"
    )


def variable_value(variable: Variable, values: list[str]) -> str:
    """What Grafana puts in place of ``$name`` with "All" selected (or the first value otherwise)."""
    if variable.include_all:
        if variable.all_value is not None:
            return variable.all_value
        return "(" + "|".join(re.escape(v) for v in values) + ")"
    return re.escape(values[0]) if variable.multi else values[0]


def time_range(dashboard: Mapping[str, Any]) -> float:
    """Seconds of the dashboard's default time range (``now-6h`` to ``now``)."""
    time = dashboard.get("time", {})
    match = re.fullmatch(r"now-(\d+)([smhdw])", time.get("from", ""))
    if not match or time.get("to") != "now":
        raise AssertionError(f"time range {time}: expected now-<n><unit> to now")
    return int(match.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}[match.group(2)]


_ROUNDED = [
    (0.015, 0.01), (0.035, 0.02), (0.075, 0.05), (0.15, 0.1), (0.35, 0.2), (0.75, 0.5), (1.5, 1.0),
    (3.5, 2.0), (7.5, 5.0), (12.5, 10.0), (17.5, 15.0), (25.0, 20.0), (45.0, 30.0), (90.0, 60.0),
    (210.0, 120.0), (450.0, 300.0), (1050.0, 600.0), (2100.0, 1200.0), (5400.0, 3600.0),
]  # fmt: skip


def interval(range_seconds: float, *, max_data_points: int, scrape_interval: float) -> float:
    """Grafana's ``$__interval``: the range over the panel's data points, rounded as Grafana rounds
    it (kbn.roundInterval), and never below the data source's scrape interval."""
    raw = range_seconds / max_data_points
    rounded = next((nice for limit, nice in _ROUNDED if raw <= limit), 3600.0 * round(raw / 3600.0))
    return max(rounded, scrape_interval)


def builtins(*, scrape_interval: float, interval: float, range_seconds: float) -> dict[str, str]:
    """Grafana's global variables for a dashboard over the last ``range_seconds``."""
    rate_interval = max(interval + scrape_interval, 4 * scrape_interval)
    return {
        "__interval": _duration(interval),
        "__interval_ms": str(round(interval * 1000)),
        "__rate_interval": _duration(rate_interval),
        "__rate_interval_ms": str(round(rate_interval * 1000)),
        "__range": _duration(range_seconds),
        "__range_s": str(round(range_seconds)),
        "__range_ms": str(round(range_seconds * 1000)),
    }


def substitute(expr: str, values: Mapping[str, str]) -> str:
    """``expr`` with every variable replaced; an unknown one fails (Grafana would leave it, and
    Prometheus would reject the query)."""

    def replace(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2) or match.group(3)
        if name not in values:
            raise AssertionError(f"unknown variable ${name} in {expr!r} (known: {sorted(values)})")
        return values[name]

    return _VARIABLE.sub(replace, expr)


def _duration(seconds: float) -> str:
    millis = round(seconds * 1000)
    return f"{millis // 1000}s" if millis % 1000 == 0 else f"{millis}ms"
