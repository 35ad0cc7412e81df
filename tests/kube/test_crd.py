"""The ENIPool CRD in the cluster against the controller's: judged, updated when older, watched.

The first release's CRD (kept with its chart in tests/deploy/charts/eni-ipam-0.1.0/) lacks fields
today's controller writes (``status.subnets``); the fake API server prunes them as a real one does.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from structlog.testing import capture_logs

from eni_ipam.adapters.metrics import Metrics
from eni_ipam.core.clock import LoopClock
from eni_ipam.kube import crd, informer
from eni_ipam.kube.api import KubeApi
from eni_ipam.kube.resources import HELD_REASON
from eni_ipam_testkit.fake_kube import ENIPOOL_CRD_DEFAULT, FakeKube, Fault
from tests.conftest import CRD, cluster_api_crd
from tests.kube.test_source import Cluster, leading
from tests.waiting import until

pytestmark = pytest.mark.looptime(start=1_000_000.0)

FIRST = (
    Path(__file__).parents[1] / "deploy" / "charts" / "eni-ipam-0.1.0" / "crds" / "enipools.eni-ipam.io.yaml"
)


def first_crd() -> dict[str, Any]:
    """The ENIPool CRD of the first release, 0.1.0."""
    loaded: dict[str, Any] = yaml.safe_load(FIRST.read_text())
    return loaded


def current_crd() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(CRD.read_text())
    return loaded


OLD = [first_crd(), cluster_api_crd("IPAddressClaim", "ipaddressclaims")]


# -- judging -----------------------------------------------------------------------------------


def test_the_packaged_crd_is_the_charts():
    assert crd.bundled() == current_crd()
    assert crd.revision(current_crd()) > crd.FIRST_REVISION


def test_the_first_releases_crd_loses_what_the_node_side_needs():
    lost = crd.lost_fields(first_crd())
    assert "status.subnets" in lost
    assert "status.interfaces[].macAddress" in lost
    assert not any(path.startswith("status.stats") for path in lost)  # those it has
    state = crd.judge(first_crd())
    assert (state.state, state.revision) == ("outdated", 1)
    assert "status.subnets" in state.problem() and crd.APPLY_COMMAND in state.problem()


def test_a_current_or_schemaless_crd_loses_nothing():
    assert crd.lost_fields(current_crd()) == []
    assert crd.lost_fields(ENIPOOL_CRD_DEFAULT) == []  # keeps unknown fields
    assert crd.judge(current_crd()).current


def test_a_crd_without_the_version_or_without_a_field_deep_down():
    other = copy.deepcopy(current_crd())
    other["spec"]["versions"][0]["name"] = "v1beta1"
    assert crd.judge(other).state == "missing"
    assert crd.judge(None).state == "missing"
    narrower = copy.deepcopy(current_crd())
    status = narrower["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    del status["properties"]["pool"]["additionalProperties"]["properties"]["prefix"]
    assert crd.lost_fields(narrower) == ["status.pool.*.prefix"]


def test_the_update_keeps_the_clusters_metadata_and_takes_the_spec():
    cluster = first_crd()
    cluster["metadata"].update(
        resourceVersion="7", uid="u-1", labels={"app.kubernetes.io/managed-by": "Helm"}
    )
    body = crd.updated(cluster)
    assert body["metadata"]["resourceVersion"] == "7" and body["metadata"]["uid"] == "u-1"
    assert body["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "Helm"}
    assert crd.revision(body) == crd.revision(current_crd())
    assert body["spec"] == current_crd()["spec"]


# -- the watch ----------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def watching(api: KubeApi, *, update: bool) -> AsyncIterator[tuple[crd.CrdWatch, Metrics]]:
    metrics = Metrics()
    changes: list[str] = []
    watch = crd.CrdWatch(
        api,
        clock=LoopClock(),
        metrics=metrics,
        update=update,
        identity="eni-ipam-0",
        on_change=lambda s: changes.append(s.state),
    )
    task = asyncio.create_task(watch.run())
    try:
        yield watch, metrics
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def state_metric(metrics: Metrics) -> str:
    (name,) = [s for s in crd.STATES if metrics.sample("eni_ipam_crd_state", {"state": s}) == 1]
    return name


def events(kube: FakeKube) -> list[tuple[str, str]]:
    return [(e["type"], e["reason"]) for e in kube.objects("events", "default")]


@pytest.mark.parametrize("kube_crds", [OLD])
async def test_an_older_crd_is_updated_by_the_controller(kube: FakeKube, api: KubeApi) -> None:
    async with watching(api, update=True) as (watch, metrics):
        await until(lambda: watch.state.current, limit=30)
        stored = kube.get_object("customresourcedefinitions", crd.CRD_NAME)
        assert stored is not None and crd.revision(stored) == crd.revision(current_crd())
        assert crd.lost_fields(stored) == []
        assert state_metric(metrics) == "current"
        await until(lambda: ("Normal", "CRDUpdated") in events(kube))
        assert ("Warning", "CRDOutdated") in events(kube)  # what it found first


@pytest.mark.parametrize("kube_crds", [OLD])
async def test_an_update_that_met_no_answer_is_tried_again(kube: FakeKube, api: KubeApi) -> None:
    # The API server answers the first update with a 503, as during its own rolling restart.
    kube.faults.append(Fault(verb="update", plural="customresourcedefinitions", status=503, times=1))
    async with watching(api, update=True) as (watch, _):
        await asyncio.sleep(crd.UPDATE_RETRY / 2)
        assert watch.state.state == "outdated"  # the one update failed
        await until(lambda: watch.state.current, limit=crd.UPDATE_RETRY * 2)
        stored = kube.get_object("customresourcedefinitions", crd.CRD_NAME)
        assert stored is not None and crd.revision(stored) == crd.revision(current_crd())


@pytest.mark.parametrize("kube_crds", [OLD])
async def test_an_older_crd_not_updated_is_said_everywhere_and_noticed_once_applied(
    kube: FakeKube, api: KubeApi
) -> None:
    with capture_logs() as logs:
        async with watching(api, update=False) as (watch, metrics):
            await until(lambda: watch.state.state == "outdated")
            assert state_metric(metrics) == "outdated"
            await until(lambda: ("Warning", "CRDOutdated") in events(kube))
            await asyncio.sleep(30)
            stored = kube.get_object("customresourcedefinitions", crd.CRD_NAME)
            assert stored is not None and crd.revision(stored) == 1  # left alone
            # The operator applies the chart's CRD: seen without a restart.
            await kube.apply_manifest(current_crd())
            await until(lambda: watch.state.current)
            assert state_metric(metrics) == "current"
    said = [(e["log_level"], e["event"]) for e in logs if e["event"].startswith("crd_")]
    assert said == [("error", "crd_not_current"), ("info", "crd_current")]  # once per change


@pytest.mark.parametrize("kube_crds", [[cluster_api_crd("IPAddress", "ipaddresses")]])
async def test_no_crd_at_all_is_missing_until_one_is_applied(kube: FakeKube, api: KubeApi) -> None:
    async with watching(api, update=True) as (watch, metrics):
        await until(lambda: watch.state.state == "missing")
        assert "is not installed" in watch.state.problem()
        assert state_metric(metrics) == "missing"
        await kube.apply_manifest(current_crd())
        await until(lambda: watch.state.current)


def newer_crd() -> dict[str, Any]:
    """The chart's CRD as a later release would carry it (a higher revision)."""
    newer = current_crd()
    newer["metadata"]["annotations"][crd.REVISION_ANNOTATION] = str(crd.revision(newer) + 5)
    return newer


@pytest.mark.parametrize("kube_crds", [[newer_crd()]])
async def test_a_newer_crd_is_never_taken_back(kube: FakeKube, api: KubeApi) -> None:
    newer = newer_crd()
    async with watching(api, update=True) as (watch, _):
        await until(lambda: watch.state.current)
        await asyncio.sleep(10)
    stored = kube.get_object("customresourcedefinitions", crd.CRD_NAME)
    assert stored is not None and crd.revision(stored) == crd.revision(newer)
    assert not [r for r in kube.requests if r.verb == "update"]


# -- the pools' statuses while the CRD is older ----------------------------------------------------


@pytest.mark.parametrize("kube_crds", [OLD])
async def test_statuses_are_held_while_the_crd_would_prune_them_then_written(
    kube: FakeKube, api: KubeApi
) -> None:
    cluster = Cluster(kube, api, update_crd=False)
    cluster.add_node("n1")
    async with leading(cluster):
        await until(lambda: cluster.pool("n1") is not None and "status" in (cluster.pool("n1") or {}))
        await asyncio.sleep(5)
        status = (cluster.pool("n1") or {})["status"]
        assert set(status) == {"conditions"}  # nothing that would be pruned
        ready = next(c for c in status["conditions"] if c["type"] == "Ready")
        assert (ready["status"], ready["reason"]) == ("False", HELD_REASON)
        assert "status.subnets" in ready["message"]
        assert cluster.source.writer.held
        await kube.apply_manifest(current_crd())
        await until(lambda: cluster.available("n1") == 4, limit=30)
        status = (cluster.pool("n1") or {})["status"]
        assert status["subnets"] == {"s-1": {"cidr": "10.0.0.0/22"}}
        ready = next(c for c in status["conditions"] if c["type"] == "Ready")
        assert (ready["status"], ready["reason"]) == ("True", "PoolReady")


async def test_nothing_is_said_on_the_pools_before_the_crd_is_read(kube: FakeKube, api: KubeApi) -> None:
    """A term that begins before the CRD's first read holds its statuses without a word on the pools:
    a current CRD then lets them through, and no pool ever said CRDOutdated."""
    cluster = Cluster(kube, api)
    cluster.source.crd.run = asyncio.Event().wait  # type: ignore[method-assign]  # never read
    cluster.add_node("n1")
    async with leading(cluster):
        await until(lambda: len(cluster.source.writer.pending) == 1, limit=30)
        await asyncio.sleep(5)
        assert "status" not in (cluster.pool("n1") or {})  # nothing written, not even a condition
        cluster.source.crd._judged(current_crd())
        await until(lambda: cluster.available("n1") == 4, limit=30)
    assert not cluster.metrics.sample("eni_ipam_status_writes_total", {"outcome": "held"})


@pytest.mark.parametrize("kube_crds", [[cluster_api_crd("IPAddress", "ipaddresses")]])
async def test_no_crd_at_all_is_one_error_naming_the_fix_not_a_warning_per_retry(
    kube: FakeKube, api: KubeApi
) -> None:
    cluster = Cluster(kube, api)
    cluster.add_node("n1")
    with capture_logs() as logs:
        async with leading(cluster):
            await asyncio.sleep(informer.MISSING_REPEAT * 2 - 1)  # ten minutes of retries, less a second
            problem = cluster.source.crd.state.problem()  # what /readyz answers
            await kube.apply_manifest(current_crd())
            await until(lambda: cluster.source.pools.synced.is_set(), limit=60)
    install = "kubectl apply --server-side -f deploy/kubernetes/crd.yaml (or install the Helm chart"
    assert problem.startswith(f"the ENIPool CRD {crd.CRD_NAME} is not installed: {install}")
    loud = [e for e in logs if e["log_level"] in ("warning", "error")]
    missing = [e for e in loud if e["event"] == "crd_missing"]
    assert [e["resource"] for e in missing] == ["enipools", "enipools"], "at once, then five minutes later"
    assert missing[0]["fix"].startswith(install)
    assert "does not serve enipools.eni-ipam.io" in missing[0]["problem"]
    assert {e["event"] for e in loud} == {"crd_missing", "crd_not_current"}, "no warning per retry"
    assert [e["event"] for e in logs if e["event"] == "crd_served"] == ["crd_served"]
