"""``eni-ipam demo --cloud moto`` (eni_ipam_testkit.demo_aws, the test kit's demo): the reconciler over
HTTP with boto3 until every node converges."""

from __future__ import annotations

import io
import re

import pytest

from eni_ipam_testkit.demo_aws import moto_demo
from tests.aws_environment import isolate


@pytest.fixture(autouse=True)
def aws_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Dummy credentials and a region; nothing may reach a real account."""
    isolate(monkeypatch)


@pytest.mark.timeout(120)
async def test_moto_demo_converges_a_handful_of_nodes_over_http() -> None:
    out = io.StringIO()
    code = await moto_demo(nodes=4, duration=60, seed=3, port=0, out=out)
    text = out.getvalue()
    assert code == 0, text
    summary = re.search(r"converged: 4 nodes in .*pool (\d+) addresses, EC2 requests: (\d+) mutating", text)
    assert summary, text
    assert int(summary.group(1)) > 0 and int(summary.group(2)) > 0
    assert re.search(r"http://127\.0\.0\.1:\d+", text)
