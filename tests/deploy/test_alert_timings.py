"""Each alert's lead time and clear time, measured, and the table of docs/deploy.md §7 that states them.

Every alert gets an incident with a start and an end: hand-written series (the minutes of a
Prometheus scraping every minute), or a run of the real reconciler in the simulator where its fault
steps can make the incident. promtool evaluates the chart's rules (default values) at every minute,
and the minutes at which the alert fires are read off its report: each case expects the alert quiet
at every minute, so promtool names every minute it fires. *Fires*: minutes from the incident's start
to the first firing evaluation; *clears*: minutes from the incident's end to the first evaluation
after the last firing one. The alert must fire in one stretch (no flapping), and the table in
docs/deploy.md ("Lead and clear times") must hold exactly these numbers.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.test_alert_rules import RULES, rendered_spec, run_promtool, workspace
from tests.deploy.test_alert_timelines import example, record

pytestmark = pytest.mark.system

DOCS = Path(__file__).parents[2] / "docs" / "deploy.md"
START, END, LENGTH = 10, 40, 90
"""The incident runs from minute START to minute END (excluded) of a LENGTH-minute recording."""

CONTROLLER = 'job="eni-ipam", namespace="kube-system", pod="eni-ipam-a", instance="10.0.0.1:9090"'
STANDBY = 'job="eni-ipam", namespace="kube-system", pod="eni-ipam-b", instance="10.0.0.2:9090"'
AGENT = 'job="eni-ipam-agent", namespace="kube-system", pod="agent-a", instance="10.0.1.1:9091"'
ADDS = f'eni_ipam_agent_requests_total{{{AGENT}, api="cni", operation="add"'
"""An agent's CNI ADD answers, but for their outcome label."""


def during(
    inside: object, outside: object, *, start: int = START, end: int = END, length: int = LENGTH
) -> str:
    """A gauge's values: ``inside`` from ``start`` to ``end``, ``outside`` before and after."""
    return " ".join(str(inside if start <= m < end else outside) for m in range(length + 1))


def only_during(value: object) -> str:
    """A series that exists during the incident alone: a staleness marker at its end, as Prometheus
    writes when a scraped series goes away."""
    return " ".join(
        str(value) if START <= m < END else "stale" if m == END else "_" for m in range(LENGTH + 1)
    )


def gone_during(value: object) -> str:
    """A series that goes away during the incident (a staleness marker at its start) and is back after."""
    return " ".join(
        "stale" if m == START else "_" if START < m < END else str(value) for m in range(LENGTH + 1)
    )


def counter(
    inside: float, outside: float, *, start: int = START, end: int = END, length: int = LENGTH
) -> str:
    """A counter's values growing by ``inside`` a minute during the incident, by ``outside`` otherwise."""
    total, values = 0.0, []
    for m in range(length + 1):
        values.append(f"{total:g}")
        total += inside if start <= m < end else outside
    return " ".join(values)


def flapping(first: bool) -> str:
    """A leader gauge that changes hands every five minutes during the incident."""
    values = []
    for m in range(LENGTH + 1):
        leads = first if not START <= m < END else ((m - START) // 5 % 2 == 0) == first
        values.append("1" if leads else "0")
    return " ".join(values)


def crash_loop() -> str:
    """A controller ready until START, then crashing a minute after each start (ready for one scrape
    in between) while its back-off grows; up for good from END."""
    values = ["1"] * START
    minute, gap = START, 1
    while minute < END:
        values += ["stale"] + ["_"] * (gap - 1) + ["1"]
        minute += gap + 1
        gap = min(gap + 1, 5)
    values = values[:END]
    return " ".join(values + ["1"] * (LENGTH + 1 - len(values)))


DRAIN_START, DRAIN_END, DRAIN_LENGTH = 60, 60 + 6 * 60, 6 * 60 + 90
"""The six-hour drain: an hour of flat history, the drain, then an hour and a half."""


def drain_6h() -> str:
    """A /22's free addresses going down steadily from DRAIN_START until the subnet is empty (at
    DRAIN_END), then given back (other tenants' instances gone)."""
    size, start, end = 1019, DRAIN_START, DRAIN_END
    return " ".join(
        str(size if m < start or m >= end else max(size - (m - start) * size // (end - start), 0))
        for m in range(DRAIN_LENGTH + 1)
    )


Series = Sequence[tuple[str, str]]


def subnet(free: str, length: int = LENGTH) -> list[tuple[str, str]]:
    """A /22's free addresses (``free``) and its size."""
    return [
        (f'eni_ipam_available_ips_per_subnet{{{CONTROLLER}, subnet="s-1", zone="z"}}', free),
        (f'eni_ipam_subnet_size_ips{{{CONTROLLER}, subnet="s-1", zone="z"}}', f"1024x{length}"),
    ]


TOTALS = (f'eni_ipam_ips{{{CONTROLLER}, type="needed"}}', f"0x{LENGTH}")
"""The leader's cluster totals, exported all along: a node's or subnet's series going is no hand-over."""


@dataclass(frozen=True)
class Incident:
    alert: str
    incident: str
    """What happens, as the docs' table says it."""
    series: Callable[[], Series | dict[str, Any]]
    """The input series, or a promtool test's ``input_series`` and ``interval`` from a recording."""
    start: int = START
    end: int = END
    length: int = LENGTH


def simulated(name: str) -> Callable[[], dict[str, Any]]:
    """The series the real reconciler makes of an incident scenario (examples/scenarios), whose fault
    begins half a minute before minute START and ends half a minute before minute END."""
    return lambda: record(example(name)).to_input_series()


INCIDENTS: list[Incident] = [
    Incident(
        "EniIpamNotReady",
        "no replica ready",
        lambda: [(f"eni_ipam_ready{{{CONTROLLER}}}", during(0, 1))],
    ),
    Incident(
        "EniIpamNotReady",
        "a crash loop through ready",
        lambda: [(f"eni_ipam_ready{{{CONTROLLER}}}", crash_loop())],
    ),
    Incident(
        "EniIpamSeveralLeaders",
        "two replicas leading",
        lambda: [
            (f"eni_ipam_leader{{{CONTROLLER}}}", during(1, 1)),
            (f"eni_ipam_leader{{{STANDBY}}}", during(1, 0)),
            (f"eni_ipam_ready{{{CONTROLLER}}}", during(1, 1)),
        ],
    ),
    Incident(
        "EniIpamLeadershipFlapping",
        "the leader changing every 5 minutes",
        lambda: [
            (f"eni_ipam_leader{{{CONTROLLER}}}", flapping(True)),
            (f"eni_ipam_leader{{{STANDBY}}}", flapping(False)),
            (f"eni_ipam_ready{{{CONTROLLER}}}", during(1, 1)),
        ],
    ),
    Incident(
        "EniIpamSubnetFull",
        "a subnet with 0 free addresses",
        lambda: [*subnet(during(0, 300)), TOTALS],
    ),
    Incident(
        "EniIpamSubnetLow",
        "a /22 with 40 free addresses",
        lambda: [*subnet(during(40, 600)), TOTALS],
    ),
    Incident(
        "EniIpamSubnetUnderPressure",
        "a subnet under pressure for an hour",
        lambda: [
            (
                f'eni_ipam_subnet_pressure{{{CONTROLLER}, subnet="s-1", zone="z"}}',
                during(1, 0, start=10, end=70, length=120),
            )
        ],
        start=10,
        end=70,
        length=120,
    ),
    Incident(
        "EniIpamSubnetExhaustionPredicted",
        "a /22 drained steadily in 6 h, then given back",
        lambda: subnet(drain_6h(), DRAIN_LENGTH),
        start=DRAIN_START,
        end=DRAIN_END,
        length=DRAIN_LENGTH,
    ),
    Incident(
        "EniIpamNodesInDeficit",
        "one node's interfaces broken (simulated)",
        simulated("incident_broken_node"),
    ),
    Incident(
        "EniIpamNodesInDeficit",
        "one node short, not failing",
        lambda: [(f'eni_ipam_node_ips{{{CONTROLLER}, node="n1", type="needed"}}', during(3, 0)), TOTALS],
    ),
    Incident(
        "EniIpamNodesAtCapacity",
        "a short node in a full subnet",
        lambda: [
            (f'eni_ipam_node_ips{{{CONTROLLER}, node="n1", type="needed"}}', during(3, 0)),
            (f'eni_ipam_node_at_capacity{{{CONTROLLER}, node="n1", reason="subnet"}}', only_during(1)),
            TOTALS,
        ],
    ),
    Incident(
        "EniIpamCloudApiThrottled",
        "half of an operation's requests throttled",
        lambda: [
            (
                f'eni_ipam_api_requests_total{{{CONTROLLER}, operation="AssignPrivateIpAddresses"}}',
                counter(60, 60),
            ),
            (
                f'eni_ipam_api_throttled_total{{{CONTROLLER}, operation="AssignPrivateIpAddresses"}}',
                counter(30, 0),
            ),
        ],
    ),
    Incident(
        "EniIpamAllocationsFailing",
        "credentials revoked while pods arrive (simulated)",
        simulated("incident_credentials_revoked"),
    ),
    Incident(
        "EniIpamMaintenanceFailing",
        "a fifth of the passes failing",
        lambda: [
            (f"eni_ipam_node_maintenance_passes_total{{{CONTROLLER}}}", counter(10, 10)),
            (
                f'eni_ipam_node_maintenance_failures_total{{{CONTROLLER}, reason="TransientError"}}',
                counter(2, 0),
            ),
        ],
    ),
    Incident(
        "EniIpamResyncFailing",
        "every resync failing",
        lambda: [
            (f"eni_ipam_resync_total{{{CONTROLLER}}}", counter(0, 1)),
            (f"eni_ipam_resync_failures_total{{{CONTROLLER}}}", counter(1, 0)),
        ],
    ),
    Incident(
        "EniIpamGarbageCollectionFailing",
        "every garbage-collection run failing",
        lambda: [(f"eni_ipam_gc_run_failures_total{{{CONTROLLER}}}", counter(0.2, 0, end=70, length=120))],
        end=70,
        length=120,
    ),
    Incident(
        "EniIpamStatusWritesFailing",
        "a fifth of the status writes failing",
        lambda: [
            (f'eni_ipam_status_writes_total{{{CONTROLLER}, outcome="ok"}}', counter(8, 10)),
            (f'eni_ipam_status_writes_total{{{CONTROLLER}, outcome="failed"}}', counter(2, 0)),
        ],
    ),
    Incident(
        "EniIpamAgentNotReady",
        "an agent not ready",
        lambda: [(f"eni_ipam_agent_ready{{{AGENT}}}", during(0, 1)), (f"up{{{AGENT}}}", during(1, 1))],
    ),
    Incident(
        "EniIpamAgentRequestsFailing",
        "a fifth of an agent's answers errors",
        lambda: [
            (
                f'eni_ipam_agent_requests_total{{{AGENT}, api="cni", operation="add", outcome="ok"}}',
                counter(8, 10),
            ),
            (
                f'{ADDS}, outcome="internal"}}',
                counter(2, 0),
            ),
        ],
    ),
    Incident(
        "EniIpamAgentPoolExhausted",
        "every ADD answered pool_exhausted",
        lambda: [
            (
                f'{ADDS}, outcome="pool_exhausted"}}',
                counter(2, 0),
            ),
            (
                f'eni_ipam_agent_requests_total{{{AGENT}, api="cni", operation="add", outcome="ok"}}',
                counter(0, 2),
            ),
        ],
    ),
    Incident(
        "EniIpamAgentMissing",
        "a node's agent gone",
        lambda: [
            (f'eni_ipam_node_ips{{{CONTROLLER}, node="n1", type="available"}}', during(8, 8)),
            (
                f'eni_ipam_agent_release_answers{{{AGENT}, node="n1", answer="ready-for-release"}}',
                gone_during(0),
            ),
            TOTALS,
        ],
    ),
    Incident(
        "EniIpamAgentStateUnwritable",
        "an agent's disk full",
        lambda: [(f"eni_ipam_agent_state_writable{{{AGENT}}}", during(0, 1))],
    ),
    Incident(
        "EniIpamAgentRebuildIncomplete",
        "Docker not read since the agent's start",
        lambda: [(f'eni_ipam_agent_source_unread{{{AGENT}, source="docker"}}', during(1, 0))],
    ),
]
"""One incident (or more) for every alert."""


TIME = re.compile(r"alertname: (\w+), time: ((?:\d+h)?(?:\d+m)?(?:\d+s)?),")


def minutes(text: str) -> int:
    parts = {unit: int(number) for number, unit in re.findall(r"(\d+)([hms])", text)}
    return parts.get("h", 0) * 60 + parts.get("m", 0)


def firing_minutes(tmp_path: Path, incident: Incident) -> list[int]:
    """The minutes at which ``incident.alert`` fires, as promtool reports them."""
    made = incident.series()
    if isinstance(made, dict):
        series = made
    else:
        series = {"interval": "1m", "input_series": [{"series": s, "values": v} for s, v in made]}
    cases = [
        {"eval_time": f"{m}m", "alertname": incident.alert, "exp_alerts": []} for m in range(incident.length)
    ]
    test = {
        "rule_files": [RULES],
        "evaluation_interval": "1m",
        "tests": [{"name": incident.incident, **series, "alert_rule_test": cases}],
    }
    (tmp_path / "timing.yaml").write_text(yaml.safe_dump(test, sort_keys=False))
    status, output = run_promtool("test", "rules", "timing.yaml", cwd=tmp_path)
    found = sorted({minutes(t) for name, t in TIME.findall(output) if name == incident.alert})
    assert status == 0 or found, output  # a failure that names no minute is no measurement
    return found


def documented() -> dict[tuple[str, str], tuple[str, str]]:
    """The table "Lead and clear times" of docs/deploy.md: (alert, incident) → (fires, clears)."""
    text = DOCS.read_text()
    table = text[text.index("#### Lead and clear times") :]
    rows = re.findall(r"^\| `(\w+)` \| ([^|]+?) \| ([^|]+?) \| ([^|]+?) \|$", table, re.MULTILINE)
    return {(alert, incident): (fires, clears) for alert, incident, fires, clears in rows}


def test_every_alert_has_an_incident_and_every_incident_a_row() -> None:
    spec = rendered_spec()
    alerts = {r["alert"] for g in spec["groups"] for r in g["rules"] if "alert" in r}
    assert alerts == {i.alert for i in INCIDENTS}
    assert set(documented()) == {(i.alert, i.incident) for i in INCIDENTS}


def said(minutes: int) -> str:
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60} min"


@pytest.mark.parametrize("incident", INCIDENTS, ids=[f"{i.alert}-{i.incident}" for i in INCIDENTS])
def test_the_docs_state_each_alerts_measured_lead_and_clear_time(tmp_path: Path, incident: Incident) -> None:
    workspace(tmp_path, rendered_spec())
    fired = firing_minutes(tmp_path, incident)
    assert fired, f"{incident.alert} never fires on {incident.incident!r}"
    assert fired == list(range(fired[0], fired[-1] + 1)), f"{incident.alert} flaps: {fired}"
    lead, clear = fired[0] - incident.start, fired[-1] + 1 - incident.end
    assert fired[-1] + 1 < incident.length, f"{incident.alert} still fires at the end: {fired}"
    assert documented()[(incident.alert, incident.incident)] == (said(lead), said(clear)), (lead, clear)
