"""The service's readiness: a leader waits for its resync, a standby is ready and names the leader;
``eni_ipam_ready`` says whether this replica reconciles, as it is at each scrape."""

from __future__ import annotations

import asyncio

import aiohttp

from eni_ipam.adapters.metrics import Metrics
from eni_ipam.adapters.server import make_app, start_server
from eni_ipam.app.runconfig import load_config
from eni_ipam.app.service import Service, ServiceState, identity


class FakeManager:
    def __init__(self, ready: bool) -> None:
        self.ready = ready


def test_leader_is_ready_only_after_its_initial_resync() -> None:
    state = ServiceState(role="leader", manager=FakeManager(False))  # type: ignore[arg-type]
    assert state.readiness() == (False, "leader, initial resync has not succeeded yet")
    state.manager.ready = True  # type: ignore[union-attr]
    assert state.readiness() == (True, "leader")


def test_standby_is_ready_and_names_the_leader() -> None:
    assert ServiceState(role="standby", leader="pod-b").readiness() == (True, "standby (leader: pod-b)")
    assert ServiceState(role="candidate").readiness() == (True, "candidate")


def test_nobody_is_ready_before_the_kubernetes_caches_synced() -> None:
    state = ServiceState(role="candidate", caches_synced=False)
    assert state.readiness() == (False, "candidate, Kubernetes caches are not synced yet")


def test_a_missing_crd_is_said_rather_than_the_caches_it_keeps_from_syncing() -> None:
    problem = "the ENIPool CRD enipools.eni-ipam.io is not installed: kubectl apply ..."
    state = ServiceState(role="candidate", caches_synced=False, crd_problem=lambda: problem)
    assert state.readiness() == (False, f"candidate, {problem}")


async def test_readyz_body_states_the_role() -> None:
    state = ServiceState(role="standby", leader="pod-b")
    metrics = Metrics()
    runner = await start_server(make_app(metrics, state.readiness), host="127.0.0.1", port=0, metrics=metrics)
    try:
        base = f"http://127.0.0.1:{runner.addresses[0][1]}"
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{base}/readyz") as r:
                assert (r.status, await r.text()) == (200, "ready: standby (leader: pod-b)\n")
            state.role, state.manager = "leader", FakeManager(False)  # type: ignore[assignment]
            async with session.get(f"{base}/readyz") as r:
                assert r.status == 503
                assert await r.text() == "not ready: leader, initial resync has not succeeded yet\n"
    finally:
        await runner.cleanup()


def test_the_ready_gauge_says_whether_this_replica_reconciles_at_each_scrape() -> None:
    service = Service(load_config(None), stop=asyncio.Event(), environ={})
    service.metrics.report_role(ready=service._reconciling)
    ready = lambda: service.metrics.sample("eni_ipam_ready")  # noqa: E731
    assert ready() == 0  # a candidate
    service.state.role, service.state.manager = "leader", FakeManager(False)  # type: ignore[assignment]
    assert ready() == 0  # leads, not resynced yet
    service.state.manager.ready = True  # type: ignore[union-attr]
    assert ready() == 1
    service.state.role = "standby"  # the lease was lost to another replica
    assert ready() == 0


def test_the_lease_identity_is_the_configured_one_then_the_pods_name() -> None:
    assert identity("chosen", {"POD_NAME": "eni-ipam-abc"}) == "chosen"
    assert identity("", {"POD_NAME": "eni-ipam-abc"}) == "eni-ipam-abc"


def test_without_a_pod_name_two_processes_on_one_host_get_two_identities() -> None:
    import socket

    first, second = identity("", {}), identity("", {})
    assert first != second
    assert first.startswith(f"{socket.gethostname()}_") and second.startswith(f"{socket.gethostname()}_")


class StepClock:
    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now


def test_a_replica_the_api_server_rejects_for_longer_than_the_bound_is_neither_ready_nor_reconciling() -> (
    None
):
    from eni_ipam.kube import errors
    from eni_ipam.kube.health import ApiHealth

    clock = StepClock()
    service = Service(load_config(None), stop=asyncio.Event(), environ={})
    service.metrics.report_role(ready=service._reconciling)
    service.state.role, service.state.manager = "leader", FakeManager(True)  # type: ignore[assignment]
    service.state.api = ApiHealth(clock=clock, unhealthy_after=60.0)  # type: ignore[arg-type]
    service.state.api.failed(errors.KubeForbidden("Unauthorized", code=401))
    assert service.state.readiness() == (True, "leader")  # a blip is not worth a page
    clock.now += 60
    ready, why = service.state.readiness()
    assert not ready and why.startswith(
        "leader, the Kubernetes API server rejects this process's credentials"
    )
    assert service.metrics.sample("eni_ipam_ready") == 0
    service.state.api.succeeded()
    assert service.state.readiness() == (True, "leader") and service.metrics.sample("eni_ipam_ready") == 1
