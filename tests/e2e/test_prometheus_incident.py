"""A known incident, injected into a healthy installation under a real Prometheus, must fire the
alert that names it, and nothing else critical.

The incident: the cloud stops accepting the reconciler's credentials (expired or revoked), so every
call fails with ``AuthFailure`` while pods keep arriving. The chart's EniIpamAllocationsFailing
(critical) pages for it, named by its cause: ``reason="Unauthorized"``.

The setup (tests/e2e/stack.py, ``running_stack(cluster=False)``), subprocesses on free ports of
127.0.0.1: ``eni-ipam demo --duration 0 --nodes 20 --fault credentials-revoked-at=FAULT_AT`` (the
demo's healthy cluster, whose in-memory cloud refuses its credentials FAULT_AT seconds into the
run), and ``prometheus`` scraping it every second with the chart's rules for the demo's series, their
timings divided by RULE_SCALE as in tests/e2e/test_prometheus.py. ``eni-ipam run``'s own in-memory
cloud (``provider: sim``) takes no change once started, hence the demo.

Checked:

- until the fault, no alert fires: the demo is healthy;
- within fire_bound() of the fault (the scaled outageDeficitAbove, outageWindow and outageFor, plus
  a margin for the first pod to find no address and for the rule's evaluations), EniIpamAllocationsFailing
  fires for the demo with severity critical and reason Unauthorized; the time it took is printed;
- no other critical alert fires before it or with it (one cause, one page).

``make e2e`` runs it (``pytest -m e2e``); the default ``pytest`` run deselects the ``e2e`` marker.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pytest
import pytest_asyncio

from tests.e2e.stack import (
    DEMO_JOB,
    DEMO_NAMESPACE,
    RULE_SCALE,
    SCRAPE_INTERVAL,
    Alert,
    Stack,
    duration_seconds,
    now,
    running_stack,
    scaled_rule_values,
    wait_for,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]
in_stack_loop = pytest.mark.asyncio(loop_scope="module")

FAULT = "credentials-revoked"
FAULT_AT = 20.0
"""Seconds into the demo's run: its pools are filled and Prometheus has scraped it healthy for
about a quarter of a minute (longer than the scaled outageWindow)."""
EXPECTED = "EniIpamAllocationsFailing"
REASON = "Unauthorized"
MARGIN = 15.0
"""Seconds fire_bound() allows beyond the rule's own timings: a pod arriving on a node with no free
address (the deficit starts), the scrapes and evaluations in between."""


def fire_bound() -> float:
    """How long after the fault EniIpamAllocationsFailing must fire: a deficit older than
    outageDeficitAbove, failures that are most of the passes of outageWindow, held for outageFor
    (each of the chart's, scaled), and MARGIN."""
    values = scaled_rule_values()
    window, hold = duration_seconds(values["outageWindow"]), duration_seconds(values["outageFor"])
    return float(values["outageDeficitAbove"]) + window + hold + MARGIN


@dataclass
class Incident:
    stack: Stack
    injected: float
    """When the demo revoked its credentials (epoch seconds, from its fault_injected log line)."""
    fired: float | None
    """When the expected alert was first seen firing (None: not within fire_bound())."""
    alert: Alert | None
    """The expected alert as Prometheus then held it."""


async def injected_at(stack: Stack) -> float:
    """The time of the demo's ``fault_injected`` log line, once it has written it."""
    log = stack.services["demo"].log
    found: list[float] = []

    async def logged() -> bool:
        stack.check_alive()
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith("{") and '"fault_injected"' in line:
                event = json.loads(line)
                found.append(datetime.fromisoformat(event["timestamp"]).timestamp())
                return True
        return False

    await wait_for("the demo's fault_injected log line", logged, FAULT_AT + 30, poll=0.25)
    return found[0]


def expected(alert: Alert) -> bool:
    return (
        alert.name == EXPECTED
        and alert.state == "firing"
        and alert.installation == (DEMO_NAMESPACE, DEMO_JOB)
    )


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def incident(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Incident]:
    home = Path(tmp_path_factory.mktemp("prometheus-incident"))
    faults = [f"{FAULT}-at={FAULT_AT:g}"]
    async with running_stack(home, cluster=False, demo_faults=faults, run_seconds=0) as stack:
        injected = await injected_at(stack)
        fired: list[tuple[float, Alert]] = []

        async def firing() -> bool:
            stack.check_alive()
            fired.extend((now(), alert) for alert in await stack.alerts() if expected(alert))
            return bool(fired)

        # Not within the bound: the test that expects it says so, with what fired instead.
        with contextlib.suppress(AssertionError):
            await wait_for(f"{EXPECTED} firing", firing, fire_bound() - (now() - injected), poll=0.5)
        await asyncio.sleep(2 * SCRAPE_INTERVAL)  # its ALERTS sample written, for the run's history
        yield Incident(stack, injected, *(fired[0] if fired else (None, None)))


@in_stack_loop
async def test_no_alert_fires_before_the_incident(incident: Incident) -> None:
    stack = incident.stack
    fired = await stack.alerts_between(stack.started, incident.injected, "firing")
    pending = await stack.alerts_between(stack.started, incident.injected, "pending")
    scraped = incident.injected - stack.started
    print(f"before the fault ({scraped:.1f}s scraped), pending: {list(map(str, pending))}")
    assert scraped > duration_seconds(scaled_rule_values()["outageWindow"])
    assert not fired, f"alerts fired while the demo was healthy: {list(map(str, fired))}"


@in_stack_loop
async def test_revoked_credentials_fire_allocations_failing_naming_the_cause(incident: Incident) -> None:
    stack = incident.stack
    now_alerts = await stack.alerts()
    print(f"rule timings divided by {RULE_SCALE}; alerts now:")
    print("\n".join(f"  {alert}" for alert in now_alerts) or "  none")
    assert incident.fired is not None, (
        f"{EXPECTED} did not fire within {fire_bound():g}s of the fault ({FAULT}); active now: "
        f"{list(map(str, now_alerts))}\n{stack.diagnostics()}"
    )
    took = incident.fired - incident.injected
    print(f"{EXPECTED} fired {took:.1f}s after the fault (bound {fire_bound():g}s)")
    alert = incident.alert
    assert alert is not None
    assert alert.labels.get("severity") == stack.critical_severity, str(alert)
    assert alert.labels.get("reason") == REASON, str(alert)
    assert alert.installation == (DEMO_NAMESPACE, DEMO_JOB), str(alert)


@in_stack_loop
async def test_no_other_critical_alert_fires(incident: Incident) -> None:
    """One cause, one page: what else fired is printed; none of it may be critical."""
    stack = incident.stack
    fired = await stack.alerts_between(stack.started, now(), "firing")
    print("fired during the run:\n" + ("\n".join(f"  {alert}" for alert in fired) or "  none"))
    others = [
        str(a) for a in fired if a.name != EXPECTED and a.labels.get("severity") == stack.critical_severity
    ]
    assert not others, f"critical alerts besides {EXPECTED}: {others}\n{stack.diagnostics()}"
