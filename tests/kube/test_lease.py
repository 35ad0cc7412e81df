"""Lease leader election with client-go's rules, on the loop's virtual clock (looptime)."""

from __future__ import annotations

import asyncio
import random

import pytest
from lightkube.types import PatchType

from eni_ipam.adapters.metrics import Metrics
from eni_ipam.core.clock import LoopClock
from eni_ipam.kube.api import LEASES, KubeApi
from eni_ipam.kube.lease import EXPIRY_MARGIN, LeaderElector
from eni_ipam_testkit.fake_kube import FakeKube, Fault
from tests.kube.conftest import make_api

# A virtual clock far from zero, like a machine's uptime: relative and absolute times must not mix.
pytestmark = pytest.mark.looptime(start=1_000_000.0)

DURATION, DEADLINE, RETRY = 15.0, 10.0, 2.0


class Replica:
    """One elector and what it did while leading."""

    def __init__(self, kube: FakeKube, identity: str, *, release: bool = True) -> None:
        self.api: KubeApi = make_api(kube)
        self.metrics = Metrics()
        self.elector = LeaderElector(
            self.api,
            name="eni-ipam",
            namespace="kube-system",
            identity=identity,
            clock=LoopClock(),
            metrics=self.metrics,
            lease_duration=DURATION,
            renew_deadline=DEADLINE,
            retry_period=RETRY,
            release_on_cancel=release,
            rng=random.Random(identity),
        )
        self.started: list[float] = []
        self.lost: list[float] = []
        self.terms: list[tuple[float, float]] = []
        """(when, valid_for) of every term the elector reported."""
        self.working = False
        self.task: asyncio.Task[None] | None = None

    async def lead(self) -> None:
        self.started.append(asyncio.get_running_loop().time())
        self.working = True
        try:
            await asyncio.Event().wait()
        finally:
            self.working = False

    def on_lost(self) -> None:
        self.lost.append(asyncio.get_running_loop().time())

    def on_renewed(self, until: float) -> None:
        now = asyncio.get_running_loop().time()  # the elector's default term clock
        self.terms.append((now, until - now))

    def start(self) -> None:
        self.task = asyncio.create_task(
            self.elector.run(self.lead, on_lost=self.on_lost, on_renewed=self.on_renewed)
        )

    async def stop(self) -> None:
        assert self.task is not None
        self.task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await self.task
        await self.api.close()


async def label_lease(kube: FakeKube) -> None:
    """Someone changes only the Lease's metadata (kubectl label): its version moves, its record not."""
    api = make_api(kube)
    await api.client.patch(
        LEASES.resource(),
        "eni-ipam",
        {"metadata": {"labels": {"team": "net"}}},
        namespace="kube-system",
        patch_type=PatchType.MERGE,
    )
    await api.close()


def holder(kube: FakeKube) -> str:
    lease = kube.get_object("leases", "eni-ipam", namespace="kube-system")
    return lease["spec"]["holderIdentity"] if lease else ""


async def test_two_replicas_elect_exactly_one_leader(kube: FakeKube) -> None:
    a, b = Replica(kube, "a"), Replica(kube, "b")
    a.start()
    b.start()
    await asyncio.sleep(30)
    leaders = [r for r in (a, b) if r.elector.leading]
    assert len(leaders) == 1 and leaders[0].working
    follower = b if leaders[0] is a else a
    assert not follower.working and follower.started == []
    assert follower.elector.leader == leaders[0].elector.identity == holder(kube)
    assert leaders[0].metrics.sample("eni_ipam_leader") == 1
    assert follower.metrics.sample("eni_ipam_leader") == 0
    lease = kube.get_object("leases", "eni-ipam", namespace="kube-system")
    assert lease["spec"]["leaseDurationSeconds"] == 15 and lease["spec"]["leaseTransitions"] == 0
    await a.stop()
    await b.stop()


async def test_standby_takes_over_within_the_lease_duration_when_the_leader_dies(kube: FakeKube) -> None:
    a = Replica(kube, "a", release=False)  # dies without releasing, like a crashed pod
    a.start()
    await asyncio.sleep(1)
    assert a.elector.leading
    b = Replica(kube, "b")
    b.start()
    await asyncio.sleep(20)
    assert not b.elector.leading  # a renews: b waits
    loop = asyncio.get_running_loop()
    await a.stop()
    died = loop.time()
    await asyncio.sleep(DURATION + RETRY * (1 + 1.2) + 1)
    assert b.elector.leading and b.working
    assert b.started[0] - died <= DURATION + RETRY * (1 + 1.2)
    assert holder(kube) == "b"
    assert kube.get_object("leases", "eni-ipam", namespace="kube-system")["spec"]["leaseTransitions"] == 1
    await b.stop()


async def test_released_lease_is_taken_over_without_waiting_a_lease_duration(kube: FakeKube) -> None:
    a = Replica(kube, "a")
    a.start()
    await asyncio.sleep(1)
    b = Replica(kube, "b")
    b.start()
    await asyncio.sleep(5)
    loop = asyncio.get_running_loop()
    await a.stop()  # a graceful shutdown releases the lease
    stopped = loop.time()
    assert holder(kube) == ""
    await asyncio.sleep(RETRY * (1 + 1.2) + 0.5)
    assert b.elector.leading
    assert b.started[0] - stopped <= RETRY * (1 + 1.2)
    await b.stop()


async def test_leader_that_cannot_renew_stops_before_anyone_else_may_lead(kube: FakeKube) -> None:
    a = Replica(kube, "a")
    a.start()
    await asyncio.sleep(1)
    assert a.working
    last_renewal = asyncio.get_running_loop().time()
    kube.faults.append(Fault(plural="leases", status=500, times=10_000))
    await asyncio.sleep(DEADLINE + RETRY + 1)
    assert a.lost and not a.working and not a.elector.leading
    # on_lost ran before anyone else could have taken the lease over
    assert a.lost[0] - last_renewal < DURATION
    assert a.metrics.sample("eni_ipam_leader") == 0
    kube.faults.clear()
    await asyncio.sleep(DURATION + 2 * RETRY * 2.2)
    assert a.elector.leading and len(a.started) == 2  # a candidate again, and it leads afresh
    await a.stop()


async def test_leader_seeing_another_holder_stops_at_once(kube: FakeKube) -> None:
    a = Replica(kube, "a")
    a.start()
    await asyncio.sleep(1)
    lease = kube.get_object("leases", "eni-ipam", namespace="kube-system")
    api = make_api(kube)
    lease["spec"]["holderIdentity"] = "intruder"
    await api.replace(LEASES, lease)
    await api.close()
    await asyncio.sleep(RETRY + 0.5)
    assert a.lost and not a.working
    await a.stop()


async def test_leader_whose_renewal_hangs_stops_within_the_renew_deadline(kube: FakeKube) -> None:
    a = Replica(kube, "a")
    a.start()
    await asyncio.sleep(1)
    b = Replica(kube, "b")
    b.start()
    await asyncio.sleep(3)
    loop = asyncio.get_running_loop()
    # a's next renewal (and only a's: b reads and waits) hangs far longer than any deadline
    kube.faults.append(Fault(verb="get", plural="leases", status=None, delay=1_000.0, times=1))
    hung = loop.time()
    await asyncio.sleep(DURATION + 2 * RETRY * 2.2 + 1)
    assert a.lost and a.lost[0] - hung <= RETRY + DEADLINE + 0.1
    assert not b.started or b.started[0] > a.lost[0]  # never two leaders at once
    await a.stop()
    await b.stop()


async def test_a_metadata_change_on_the_lease_does_not_lock_the_leader_out(kube: FakeKube) -> None:
    a = Replica(kube, "a")
    a.start()
    await asyncio.sleep(1)
    await label_lease(kube)
    await asyncio.sleep(DEADLINE + 3 * RETRY)
    assert a.lost == [] and a.elector.leading and len(a.started) == 1
    await a.stop()


async def test_expiry_follows_the_holders_recorded_duration(kube: FakeKube) -> None:
    a = Replica(kube, "a", release=False)
    a.elector.lease_duration = 60.0  # an older leader with a longer term (a rollout shortens it)
    a.start()
    await asyncio.sleep(1)
    await a.stop()  # dies without releasing
    b = Replica(kube, "b")
    b.start()
    await asyncio.sleep(DURATION + 2 * RETRY * 2.2)
    assert not b.elector.leading  # 15 s of its own would be too soon: a's record says 60
    await asyncio.sleep(60)
    assert b.elector.leading
    await b.stop()


async def test_release_succeeds_after_an_unseen_write_moved_the_leases_version(kube: FakeKube) -> None:
    a = Replica(kube, "a")
    a.start()
    await asyncio.sleep(1)
    # like a renewal cancelled after the server applied it: the version moved without a seeing it
    await label_lease(kube)
    await a.stop()
    assert holder(kube) == ""


async def test_every_renewal_reports_a_term_of_the_renew_deadline_less_the_renewals_own_time(
    kube: FakeKube,
) -> None:
    a = Replica(kube, "a")
    a.start()
    await asyncio.sleep(1)
    assert a.terms and a.terms[0][0] <= a.started[0]  # the first term is known before the work starts
    kube.faults.append(Fault(verb="get", plural="leases", status=None, delay=1.5, times=1))
    await asyncio.sleep(2 * RETRY + 2)
    # A term counts from the attempt's start, before the write can be seen: a slow renewal (1.5 s
    # here) shortens its own term by what it took, so the term never outlives the renew deadline.
    valid = [valid_for for _, valid_for in a.terms]
    assert max(valid) == pytest.approx(DEADLINE, abs=0.01)
    assert min(valid) == pytest.approx(DEADLINE - 1.5, abs=0.01)
    assert len(a.terms) >= 3
    await a.stop()


async def test_a_standby_takes_over_when_the_lease_runs_out_not_at_its_next_retry(kube: FakeKube) -> None:
    a = Replica(kube, "a", release=False)
    a.start()
    await asyncio.sleep(1)
    b = Replica(kube, "b")
    b.start()
    await asyncio.sleep(7)
    await a.stop()  # dies without releasing
    await asyncio.sleep(RETRY * (1 + 1.2) + 0.1)  # b has seen a's last renewal by now
    last_seen = b.elector.observed_at
    await asyncio.sleep(DURATION)
    assert b.started and b.started[0] - last_seen == pytest.approx(DURATION + EXPIRY_MARGIN, abs=0.01)
    await b.stop()
