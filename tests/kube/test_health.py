"""The API server's health as this process sees it: problems named, bounded, logged once per change."""

from __future__ import annotations

import asyncio

import pytest
from structlog.testing import capture_logs

from eni_ipam.adapters.metrics import Metrics
from eni_ipam.adapters.metrics.exposition import render
from eni_ipam.kube import errors
from eni_ipam.kube.api import ENIPOOLS, KubeApi
from eni_ipam.kube.health import CREDENTIALS_REJECTED, PROBLEMS, UNREACHABLE, ApiHealth, problem_of
from eni_ipam_testkit.fake_kube import FakeKube, Fault
from tests.kube.conftest import make_api


class Clock:
    """Only what ApiHealth reads: monotonic seconds, moved by hand."""

    def __init__(self) -> None:
        self.now = 5_000.0

    def monotonic(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("error", "problem"),
    [
        (errors.KubeForbidden("Unauthorized", code=401, reason="Unauthorized"), CREDENTIALS_REJECTED),
        (errors.KubeUnavailable("ConnectError: All connection attempts failed"), UNREACHABLE),
        (errors.KubeUnavailable("etcdserver: leader changed", code=500), UNREACHABLE),
        (errors.KubeUnavailable("", code=503), UNREACHABLE),
        (errors.KubeForbidden("enipools is forbidden", code=403, reason="Forbidden"), ""),
        (errors.KubeNotFound("not found", code=404), ""),
        (errors.KubeConflict("conflict", code=409), ""),
        (errors.KubeThrottled("slow down", code=429), ""),
    ],
)
def test_only_rejected_credentials_and_no_answer_are_problems_of_the_process(
    error: errors.KubeError, problem: str
) -> None:
    assert problem_of(error) == problem


def test_a_problem_becomes_unhealthy_only_after_the_bound_and_any_answer_ends_it() -> None:
    clock = Clock()
    health = ApiHealth(clock=clock, unhealthy_after=60.0)  # type: ignore[arg-type]
    rejected = errors.KubeForbidden("Unauthorized", code=401, reason="Unauthorized")
    health.failed(rejected)
    assert health.problem == CREDENTIALS_REJECTED and health.healthy and health.describe() == ""
    clock.now += 59.9
    health.failed(rejected)
    assert health.healthy
    clock.now += 0.1
    assert not health.healthy and health.unhealthy_problem() == CREDENTIALS_REJECTED
    assert health.describe() == (
        "the Kubernetes API server rejects this process's credentials "
        "(for 60s: 401 Unauthorized: Unauthorized)"
    )
    health.failed(errors.KubeNotFound("not found", code=404))  # an answer: the token is taken again
    assert health.healthy and health.problem == ""


def test_a_new_problem_starts_its_own_clock() -> None:
    clock = Clock()
    health = ApiHealth(clock=clock, unhealthy_after=60.0)  # type: ignore[arg-type]
    health.failed(errors.KubeForbidden("Unauthorized", code=401))
    clock.now += 50
    health.failed(errors.KubeUnavailable("ConnectError"))
    clock.now += 50
    assert health.healthy and health.problem == UNREACHABLE
    clock.now += 10
    assert health.unhealthy_problem() == UNREACHABLE
    assert "does not answer (for 60s: ConnectError)" in health.describe()


def test_each_change_of_state_is_logged_once_however_many_requests_fail() -> None:
    clock = Clock()
    health = ApiHealth(clock=clock, unhealthy_after=60.0)  # type: ignore[arg-type]
    with capture_logs() as logs:
        for _ in range(100):  # retries every 2 s for 200 s
            health.failed(errors.KubeUnavailable("ConnectError"))
            clock.now += 2
        health.succeeded()
        health.succeeded()
    said = [(entry["event"], entry["log_level"]) for entry in logs]
    assert said == [
        ("kube_api_failing", "warning"),
        ("kube_api_unhealthy", "error"),
        ("kube_api_recovered", "info"),
    ]
    assert logs[-1]["after"] == 200.0


@pytest.mark.looptime
async def test_the_api_client_reports_every_request_and_the_metric_follows(kube: FakeKube) -> None:
    from eni_ipam.core.clock import LoopClock

    metrics = Metrics(process=False)
    health = ApiHealth(clock=LoopClock(), unhealthy_after=30.0)
    metrics.report_kube_api(PROBLEMS, health.unhealthy_problem)
    api: KubeApi = make_api(kube, metrics=metrics, health=health)

    def unhealthy(problem: str) -> float | None:
        return metrics.sample("eni_ipam_kube_api_unhealthy", {"problem": problem})

    try:
        await api.list(ENIPOOLS)
        kube.faults.append(Fault(status=401, message="Unauthorized", times=1_000))
        for _ in range(20):  # a retry every 2 s for 40 s
            with pytest.raises(errors.KubeError):
                await api.list(ENIPOOLS)
            await asyncio.sleep(2)
        assert unhealthy(CREDENTIALS_REJECTED) == 1 and unhealthy(UNREACHABLE) == 0
        # A scrape renders off the loop: the gauge, which reads the loop's clock, is read before.
        text = await asyncio.to_thread(render, metrics.freeze())
        assert b'eni_ipam_kube_api_unhealthy{problem="credentials_rejected"} 1.0' in text
        kube.faults.clear()
        await api.list(ENIPOOLS)
        assert unhealthy(CREDENTIALS_REJECTED) == 0 and health.healthy
    finally:
        await api.close()
