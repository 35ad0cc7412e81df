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
