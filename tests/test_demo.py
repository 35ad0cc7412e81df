"""The demo runs, keeps pools, stops on its own and prints a summary."""

import asyncio
import io

from eni_ipam.app.demo import _demo


def test_demo_runs_briefly_and_summarises():
    out = io.StringIO()
    rc = asyncio.run(_demo(nodes=12, duration=3.0, seed=3, port=0, out=out))
    text = out.getvalue()
    assert rc == 0
    assert "summary: 12 nodes" in text
    assert "mutating API calls" in text


def test_the_demo_exports_its_role_and_totals_that_agree_with_its_nodes():
    """A demo runs alone: it leads, and is ready once resynced; every scrape's cluster totals are
    the sums of that same scrape's per-node series."""
    import socket

    import aiohttp
    from prometheus_client.parser import text_string_to_metric_families

    from eni_ipam.adapters.metrics import pool_totals_problems

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    async def scenario() -> list[dict[str, float]]:
        demo = asyncio.create_task(_demo(nodes=12, duration=4.0, seed=3, port=port, out=io.StringIO()))
        scrapes: list[dict[str, float]] = []
        async with aiohttp.ClientSession() as session:
            while not demo.done():
                await asyncio.sleep(0.2)
                try:
                    async with session.get(f"http://127.0.0.1:{port}/metrics") as response:
                        text = await response.text()
                except aiohttp.ClientConnectionError:
                    continue  # not serving yet, or already stopped
                samples = [
                    (s.name, s.labels, s.value)
                    for f in text_string_to_metric_families(text)
                    for s in f.samples
                ]
                assert pool_totals_problems(samples) == []
                scrapes.append({name: value for name, labels, value in samples if not labels})
        await demo
        return scrapes

    scrapes = asyncio.run(scenario())
    assert len(scrapes) >= 5
    assert all(s["eni_ipam_leader"] == 1 for s in scrapes)
    assert scrapes[-1]["eni_ipam_ready"] == 1
