"""Health that tells the truth: ``eni-ipam run`` whose credentials the API server stops taking says
so in ``/readyz``, ``eni_ipam_kube_api_unhealthy`` and its log — once — and recovers on its own.

The controller runs as the chart runs it (tests/operator_shell.py) against the fake API server,
which is made to answer 401 to every request, as it does to a revoked or expired token.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp
import pytest

from eni_ipam_testkit.fake_kube import Fault
from tests.deploy.conftest import CHART
from tests.operator_shell import NEEDS_KUBE_TOOLS, RELEASE, operator, sim_values

pytestmark = [
    pytest.mark.system,
    pytest.mark.timeout(180),
    NEEDS_KUBE_TOOLS,
]


def events(log: Path) -> list[dict]:
    lines = log.read_text().splitlines()
    return [json.loads(line) for line in lines if line.startswith("{")]


async def test_rejected_credentials_fail_readyz_and_the_metric_after_the_bound_and_recover(
    tmp_path: Path,
) -> None:
    async with operator(tmp_path) as op:
        await op.helm("install", RELEASE, str(CHART), "--create-namespace", values=sim_values(2))
        log = tmp_path / "controller.log"
        await op.start_controller({"ENI_IPAM_KUBERNETES__API_UNHEALTHY_AFTER": "3s"}, log=log)

        async def started() -> bool:
            return any(e["event"] == "service_started" for e in await asyncio.to_thread(events, log))

        await op.wait("the controller listens", started)
        endpoint = next(e["endpoint"] for e in events(log) if e["event"] == "service_started")
        base = f"http://127.0.0.1:{endpoint.rsplit(':', 1)[1]}"

        async with aiohttp.ClientSession() as http:

            async def readyz() -> tuple[int, str]:
                async with http.get(f"{base}/readyz") as answer:
                    return answer.status, await answer.text()

            async def unhealthy(problem: str) -> float:
                async with http.get(f"{base}/metrics") as answer:
                    text = await answer.text()
                wanted = f'eni_ipam_kube_api_unhealthy{{problem="{problem}"}} '
                found = [line for line in text.splitlines() if line.startswith(wanted)]
                assert found, text[:400]
                return float(found[0].split()[-1])

            async def leading() -> bool:
                return (await readyz()) == (200, "ready: leader\n")

            await op.wait("the controller leads", leading)
            op.kube.faults.append(Fault(status=401, message="Unauthorized", times=1_000_000))
            assert (await readyz())[0] == 200  # a blip is not worth a page

            async def refused() -> bool:
                return (await readyz())[0] == 503

            await op.wait("readyz fails", refused, limit=30)
            _, why = await readyz()
            assert "rejects this process's credentials" in why, why
            assert await unhealthy("credentials_rejected") == 1 and await unhealthy("unreachable") == 0
            await asyncio.sleep(3)  # more retries, all refused: nothing more in the log
            said = [e for e in events(log) if e["event"].startswith("kube_api_")]
            assert [(e["event"], e["level"]) for e in said] == [
                ("kube_api_failing", "warning"),
                ("kube_api_unhealthy", "error"),
            ]

            op.kube.faults.clear()  # the token is taken again
            await op.wait("readyz recovers", leading, limit=30)
            assert await unhealthy("credentials_rejected") == 0
            assert [e["event"] for e in events(log) if e["event"].startswith("kube_api_")][
                -1
            ] == "kube_api_recovered"
        assert await op.stop_controller() == 0
