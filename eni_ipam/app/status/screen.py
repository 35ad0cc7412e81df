"""The report on one screen, or as one JSON object.

The screen is read from the top: the verdict first (``OK``, or ``NEEDS ATTENTION`` with the number
of problems), then a line or two a section, each marked ``✓`` (nothing to say), ``!`` (notes only) or
``✗`` (a problem), with its findings under it, each with its fix after ``→``. At most
:data:`SHOWN` findings a section are listed; ``--json`` has every one. Every line goes through
:func:`~eni_ipam.adapters.terminal.inert`: a node name or a message from the cluster is shown, never
obeyed by the terminal. JSON escapes by itself (``ensure_ascii``).
"""

from __future__ import annotations

import json
import textwrap

from eni_ipam.adapters.terminal import inert, plural
from eni_ipam.app.status.model import (
    NODE_STATES,
    SECTIONS,
    ApiView,
    ControllerView,
    Finding,
    NodesView,
    Report,
    SubnetsView,
    duration_text,
)
from eni_ipam.kube.nodemarks import STARTUP_TAINT

SHOWN = 10
"""Findings a section lists on the screen before it says how many more there are."""
TITLES = {
    "controller": "Controller",
    "crd": "CRD",
    "nodes": "Nodes",
    "subnets": "Subnets",
    "api": "API",
    "agents": "Agents",
}
INDENT = " " * 13
"""Where a section's lines start, after its title and mark."""
WIDTH = 100
"""Columns a finding's lines are wrapped at (a long fix stays readable on a terminal)."""
STATE_WORDS = {"ready": "ready", "short": "short", "no-instance": "no instance", "no-pool": "no pool"}


def as_json(report: Report) -> str:
    return json.dumps(report.as_json(), indent=2)


def render(report: Report) -> str:
    """The screen, one string ending in a newline."""
    problems = len(report.problems)
    verdict = "OK" if not problems else f"NEEDS ATTENTION ({plural(problems, 'problem')})"
    where = report.controller.namespace
    lines = [f"eni-ipam status: {verdict}    namespace {where}, {report.checked_at}", ""]
    summaries = {
        "controller": _controller(report.controller),
        "crd": _crd(report),
        "nodes": _nodes(report.nodes),
        "subnets": _subnets(report.subnets),
        "api": _api(report.api),
        "agents": _agents(report),
    }
    for section in SECTIONS:
        found = [f for f in report.findings if f.section == section]
        mark = "✗" if any(f.severity == "problem" for f in found) else ("!" if found else "✓")
        first, *more = summaries[section]
        lines.append(f"{TITLES[section]:<11}{mark} {first}")
        lines.extend(f"{INDENT}{line}" for line in more)
        for finding in found[:SHOWN]:
            lines.extend(_finding(finding))
        if len(found) > SHOWN:
            lines.append(f"{INDENT}… and {len(found) - SHOWN} more (--json lists every one)")
    return "".join(inert(line) + "\n" for line in lines)


def _finding(f: Finding) -> list[str]:
    mark = "✗" if f.severity == "problem" else "·"
    said = f"{f.subject}: {f.problem}" if f.subject and f.subject not in f.problem else f.problem
    lines = _wrap(said, f"{INDENT}{mark} ", INDENT + "  ")
    if f.fix:
        lines += _wrap(f.fix, f"{INDENT}  → ", INDENT + "    ")
    return lines


def _wrap(text: str, first: str, then: str) -> list[str]:
    """``text`` in lines of :data:`WIDTH`, never broken inside a word (a name, a taint key, a flag)."""
    return textwrap.wrap(
        text,
        WIDTH,
        initial_indent=first,
        subsequent_indent=then,
        break_on_hyphens=False,
        break_long_words=False,
    )


def _controller(view: ControllerView) -> list[str]:
    lease = view.lease
    if lease is None:
        first = "no leader known"
    elif not lease.holder:
        first = f"no leader (Lease {lease.namespace}/{lease.name} released)"
    else:
        held = f" for {duration_text(lease.leading_for)}" if lease.leading_for is not None else ""
        renewed = (
            f"renewed {duration_text(lease.renewed_ago)} ago"
            if lease.renewed_ago is not None
            else "never renewed"
        )
        where = f"Lease {lease.namespace}/{lease.name}, {lease.duration}s"
        first = f"leader {lease.holder}{held}, {renewed} ({where})"
    metrics = view.metrics
    if metrics is None:
        pod = lease.holder if lease is not None and lease.holder else "<leader pod>"
        second = (
            f"metrics: not read (--metrics-url, e.g. through kubectl -n {view.namespace} port-forward "
            f"pod/{pod} 9090:9090)"
        )
    elif not metrics.reachable:
        second = "metrics: not reachable"
    else:
        role = metrics.role or "role unknown"
        ready = {True: "ready", False: "not ready", None: "readiness unknown"}[metrics.ready]
        second = f"metrics: eni-ipam {metrics.version or '?'}, {role}, {ready}"
        if metrics.role == "leader":
            second += "; " + _resyncs(
                metrics.resync_age, metrics.resync_failing, metrics.resyncs, metrics.resync_failures
            )
    return [first, second]


def _resyncs(age: float | None, failing: int | None, ok: int | None, failed: int | None) -> str:
    last = f"last full resync {duration_text(age)} ago" if age is not None else "full resyncs"
    if failing:
        last += f" ({failing} failed since)"
    if ok is not None and failed is not None:
        last += f", {ok} ok and {failed} failed since its start"
    return last


def _crd(report: Report) -> list[str]:
    crd = report.crd
    if crd is None:
        return ["not read"]
    if crd.state == "missing":
        return [f"{crd.name}: not installed (this eni-ipam carries revision {crd.expected})"]
    return [
        f"{crd.name} revision {crd.revision}, {crd.state} (eni-ipam {report.version} carries {crd.expected})"
    ]


def _nodes(view: NodesView) -> list[str]:
    counts = [f"{view.counts[s]} {STATE_WORDS.get(s, s)}" for s in NODE_STATES if view.counts.get(s)]
    first = plural(view.total, "Node") + (": " + ", ".join(counts) if counts else "")
    if view.pools_without_node:
        first += f"; {plural(len(view.pools_without_node), 'ENIPool')} without a Node"
    return [first]


def _subnets(view: SubnetsView) -> list[str]:
    if not view.rows:
        if view.source == "metrics":
            return [
                "none in the leader's metrics yet (a subnet appears at the full resync after its first use)"
            ]
        return ["no pool has an interface yet"]
    lines = []
    for row in view.rows[:SHOWN]:
        line = f"{row.id} ({row.zone})" if row.zone else row.id
        if row.free is not None:
            line += f": {row.free:,}" + (f" of {row.size:,}" if row.size else "") + " free"
        if row.pressure:
            line += ", under pressure"
        lines.append(f"{line}, used by {plural(row.nodes, 'pool')}")
    if len(view.rows) > SHOWN:
        lines.append(f"… and {len(view.rows) - SHOWN} more subnets")
    if view.source == "pools":
        lines.append("free addresses: from the leader's metrics (--metrics-url)")
    return lines


def _api(view: ApiView | None) -> list[str]:
    if view is None:
        return ["cloud: needs the leader's metrics (--metrics-url)"]
    requests = sum(r.requests for r in view.operations)
    throttled = sum(r.throttled for r in view.operations)
    over = f"in the last {duration_text(view.window)}" if view.window else "since the controller started"
    first = f"cloud: {throttled:,} of {requests:,} requests throttled {over}"
    if not view.window:
        first += " (--window 30s judges now)"
    failing = ", ".join(f"{reason} ×{n}" for reason, n in sorted(view.failing.items()))
    second = f"nodes failing their passes: {failing}" if failing else "no node failing its passes"
    kube = "; Kubernetes: " + ("answering" if not view.kube_unhealthy else ", ".join(view.kube_unhealthy))
    return [first, second + kube]


def _agents(report: Report) -> list[str]:
    view = report.agents
    if not view.tainted:
        return [f"no Node carries {STARTUP_TAINT} (what tells an agent that never served: docs/status.md)"]
    waiting, not_serving = view.tainted - len(view.not_serving), len(view.not_serving)
    carry = "carries" if view.tainted == 1 else "carry"
    return [
        f"{plural(view.tainted, 'Node')} {carry} {STARTUP_TAINT}: {waiting} waiting, {not_serving} not"
        " serving"
    ]
