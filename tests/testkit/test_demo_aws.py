"""``eni-ipam demo --cloud moto`` (eni_ipam_testkit.demo_aws, the test kit's demo): the reconciler over
HTTP with boto3 until every node converges."""

from __future__ import annotations

import io
import re

import pytest
from rich.text import Text

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


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _rows(frame: str) -> list[list[str]]:
    return [line.split() for line in frame.splitlines() if line.startswith("node-")]


@pytest.mark.timeout(120)
async def test_the_first_frame_waits_for_the_first_resync_and_the_last_is_converged() -> None:
    """The first frame read "avail 0 used 5" before the reconciler had looked at the cloud: it now
    comes after the first resync (types known, each pool's need shown), and the converged state is
    drawn before the summary."""
    out = _Terminal()
    code = await moto_demo(nodes=4, duration=60, seed=3, port=0, out=out, plain=True)
    text = out.getvalue()
    assert code == 0, text
    frames = text.split("\x1b[H\x1b[2J")[1:]
    assert len(frames) >= 2, text
    first, last = frames[0], frames[-1]
    assert "ready=True" in first.splitlines()[0]
    rows = _rows(first)
    assert len(rows) == 4 and all(row[1] != "?" for row in rows), first
    for _, _, avail, used, need, *_ in rows:
        assert int(avail) >= int(used) or int(need) > 0, f"pods and no pool, with no need: {first}"
    assert "in deficit 0" in last, last
    assert all(int(avail) >= int(used) and need == "0" for _, _, avail, used, need, *_ in _rows(last))


@pytest.mark.timeout(120)
async def test_on_a_terminal_it_draws_the_products_live_view() -> None:
    out = _Terminal()
    code = await moto_demo(nodes=4, duration=60, seed=3, port=0, out=out)
    text = out.getvalue()
    assert code == 0, text
    enter, leave = text.index("\x1b[?1049h"), text.rindex("\x1b[?1049l")
    assert enter < text.index("cannot grow") < leave, "the view's node table, on the alternate screen"
    after = [Text.from_ansi(line).plain for line in text[leave:].splitlines()]
    assert any(line.startswith("eni-ipam demo") and "● ready" in line for line in after), after[:3]
    assert len([line for line in after if line.startswith("node-")]) == 4, "the last frame, every node"
    assert any(line.startswith("converged: 4 nodes") for line in after)
