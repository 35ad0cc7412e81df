"""One leader, by time as well as by switch: a leader paused past its Lease makes no cloud call
after it resumes.

Two ``eni-ipam run`` replicas, as the chart runs them, against the fake API server and one EC2
(moto over HTTP). Each replica reaches EC2 through its own recording proxy, so the test reads off
the cloud's side which replica made which call and when. The leader is stopped (SIGSTOP) for longer
than the Lease; meanwhile a pool asks for more addresses, the standby takes the Lease and serves it.
Then the old leader is resumed, with the API server slow to answer its Lease read (as after a
network hiccup): its reconciler wakes with work planned against a stale view of the cloud, and only
its leadership term — not the renew loop, which has not run yet — stands between it and a second
leader's mutations.
"""

from __future__ import annotations

import asyncio
import signal
import urllib.parse
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from eni_ipam_testkit.fake_kube import Fault
from tests.deploy.conftest import CHART
from tests.operator_shell import (
    MOTO_CREDENTIALS,
    NEEDS_KUBE_TOOLS,
    RELEASE,
    available,
    moto_fleet,
    nodes_manifest,
    operator,
)

pytestmark = [
    pytest.mark.system,
    pytest.mark.timeout(240),
    NEEDS_KUBE_TOOLS,
]

LEASE, RENEW, RETRY = 4.0, 3.0, 0.5
REGION, ZONE = "us-east-1", "us-east-1a"


class Recorder:
    """A proxy in front of EC2 that notes each action and when it arrived (this process's clock)."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.calls: list[tuple[float, str]] = []
        self.url = ""

    def mutations(self, since: float = float("-inf")) -> list[str]:
        """What changed the cloud (everything but Describe*), from ``since`` on."""
        return [a for t, a in self.calls if t >= since and not a.startswith("Describe")]

    async def forward(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        action = urllib.parse.parse_qs(body.decode()).get("Action", ["?"])[0]
        self.calls.append((asyncio.get_running_loop().time(), action))
        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")}
        async with (
            aiohttp.ClientSession() as session,
            session.request(
                request.method, self.upstream + request.path_qs, data=body, headers=headers
            ) as answer,
        ):
            payload = await answer.read()
            kept = {k: v for k, v in answer.headers.items() if k.lower() == "content-type"}
            return web.Response(status=answer.status, body=payload, headers=kept)


@asynccontextmanager
async def recording(upstream: str) -> AsyncIterator[Recorder]:
    recorder = Recorder(upstream)
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", recorder.forward)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    recorder.url = f"http://127.0.0.1:{port}"
    try:
        yield recorder
    finally:
        await runner.cleanup()


async def logged(path: Path, event: str, limit: float = 30.0) -> None:
    """Wait until a replica's log (``path``) names ``event``."""
    async with asyncio.timeout(limit):
        while event not in await asyncio.to_thread(path.read_text):
            await asyncio.sleep(0.1)


async def test_a_leader_paused_past_its_lease_makes_no_cloud_call_after_it_resumes(tmp_path: Path) -> None:
    pytest.importorskip("moto", reason="moto (with the test kit, eni-ipam-testkit) is not installed")
    from eni_ipam_testkit.moto_ec2 import MotoServer

    with MotoServer() as server:
        fleet = moto_fleet(server.endpoint_url, 2, region=REGION, zone=ZONE)
        vpc, names = fleet.vpc, fleet.names
        async with (
            operator(tmp_path) as op,
            recording(server.endpoint_url) as to_a,
            recording(server.endpoint_url) as to_b,
        ):
            values = {
                "config": {
                    "aws": {
                        "region": REGION,
                        "vpc_id": vpc,
                        "endpoint_url": server.endpoint_url,
                        "allow_plain_http": True,
                    },
                    "node_defaults": {"pre_allocate": 2},
                    "shutdown_timeout": "5s",
                    "kubernetes": {
                        "lease_duration": f"{LEASE}s",
                        "renew_deadline": f"{RENEW}s",
                        "retry_period": f"{RETRY}s",
                    },
                }
            }
            await op.helm("install", RELEASE, str(CHART), "--create-namespace", values=values)
            credentials = MOTO_CREDENTIALS
            a_log, b_log = tmp_path / "a.log", tmp_path / "b.log"
            a = await op.start_controller(
                {**credentials, "POD_NAME": "replica-a", "ENI_IPAM_AWS__ENDPOINT_URL": to_a.url}, log=a_log
            )
            await op.kubectl("apply", "-f", "-", stdin=nodes_manifest(names, ZONE))

            async def filled(want: int, nodes: tuple[str, ...] = tuple(names)) -> bool:
                pools = await op.pools()
                return all(n in pools and available(pools[n]) == want for n in nodes)

            await op.wait("replica a filled every pool", lambda: filled(2))
            await op.start_controller(
                {**credentials, "POD_NAME": "replica-b", "ENI_IPAM_AWS__ENDPOINT_URL": to_b.url}, log=b_log
            )
            await logged(b_log, "service_started")
            await asyncio.sleep(2 * RETRY * 2.2)  # b has read the Lease: a standby
            assert to_b.mutations() == []

            a.send_signal(signal.SIGSTOP)
            try:
                await op.kubectl(
                    "patch", "enipool", "ip-0", "--type=merge", "-p", '{"spec":{"preAllocate":6}}'
                )

                def holder() -> str:
                    lease = op.kube.get_object("leases", "eni-ipam", namespace="kube-system")
                    return str(lease["spec"].get("holderIdentity") or "")

                async def b_leads_and_served() -> bool:
                    return holder() == "replica-b" and await filled(6, ("ip-0",))

                await op.wait("replica b took the Lease and served the pool", b_leads_and_served)
                assert to_b.mutations(), "the standby made no call: the test proves nothing"
                # The API server is slow to answer the Lease reads that follow (a's renewal among
                # them): a's renew loop learns of its loss late, its reconciler runs first.
                op.kube.faults.append(Fault(verb="get", plural="leases", status=None, delay=1.0, times=4))
                pending = (await op.pools())["ip-0"]
            finally:
                a.send_signal(signal.SIGCONT)
            resumed = asyncio.get_running_loop().time()
            assert pending["spec"]["preAllocate"] == 6
            await logged(a_log, "leader_lost", limit=20)
            await asyncio.sleep(2 * RETRY * 2.2)

            assert to_a.mutations(since=resumed) == [], "the paused leader mutated after another took over"
            a_said = await asyncio.to_thread(a_log.read_text)
            assert "mutations_refused" in a_said, (
                "the resumed leader had nothing to do: the test proves nothing"
            )
            assert holder() == "replica-b"
            pools = await op.pools()
            assert available(pools["ip-0"]) == 6, pools["ip-0"]
