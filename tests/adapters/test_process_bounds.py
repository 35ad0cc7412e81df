"""What every long-running process sets up at start: its open-file limit and its event loop's error
reports (:func:`eni_ipam.adapters.guard.bound_process`)."""

from __future__ import annotations

import asyncio
import errno
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from eni_ipam.adapters.guard import Throttled, loop_error_handler

ROOT = Path(__file__).resolve().parents[2]


def accept_error(code: int = errno.EMFILE) -> dict[str, Any]:
    """What asyncio's selector loop reports when ``accept()`` fails for want of a resource."""
    return {
        "message": "socket.accept() out of system resource",
        "exception": OSError(code, "Too many open files"),
    }


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.system
def test_the_soft_file_limit_is_raised_to_the_hard_one() -> None:
    probe = textwrap.dedent(
        """
        import resource
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 512))
        from eni_ipam.adapters.guard import raise_file_limit
        print(raise_file_limit(), resource.getrlimit(resource.RLIMIT_NOFILE))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60, cwd=ROOT
    )
    assert done.stdout.strip() == "(256, 512) (512, 512)"


def test_accept_errors_are_counted_each_and_logged_once_per_interval() -> None:
    counted: list[str] = []
    clock = Clock()
    handler = loop_error_handler(counted.append, Throttled(60.0, now=clock))
    loop = asyncio.new_event_loop()
    try:
        with capture_logs() as logs:
            for _ in range(1000):
                handler(loop, accept_error())
            clock.now = 61.0
            handler(loop, accept_error())
            handler(loop, accept_error(errno.ENFILE))
    finally:
        loop.close()
    assert counted == ["EMFILE"] * 1001 + ["ENFILE"]
    assert [(e["event"], e["error"], e.get("suppressed")) for e in logs] == [
        ("accept_failed", "EMFILE", None),
        ("accept_failed", "EMFILE", 999),
        ("accept_failed", "ENFILE", None),
    ]
    assert not any("traceback" in e for e in logs)


def test_another_loop_error_is_one_line_per_kind_with_its_traceback_once() -> None:
    clock = Clock()
    handler = loop_error_handler(lambda error: None, Throttled(60.0, now=clock))
    loop = asyncio.new_event_loop()
    try:
        bug = RuntimeError("a bug")
        try:
            raise bug
        except RuntimeError:
            pass
        with capture_logs() as logs:
            for _ in range(50):
                handler(loop, {"message": "Unhandled exception in protocol", "exception": bug})
                handler(loop, {"message": "Fatal error on transport", "exception": ConnectionResetError()})
    finally:
        loop.close()
    assert [e["event"] for e in logs] == ["event_loop_error", "event_loop_error"]
    assert "RuntimeError: a bug" in logs[0]["traceback"]
    assert "traceback" not in logs[1]  # the network's, not the code's: no traceback


async def test_the_process_routes_its_loop_errors_through_the_handler() -> None:
    from eni_ipam.adapters.guard import bound_process

    counted: list[str] = []
    loop = asyncio.get_running_loop()
    previous = loop.get_exception_handler()
    try:
        bound_process(accept_failed=counted.append, files_needed=0)
        with capture_logs() as logs:
            loop.call_exception_handler(accept_error())
        assert counted == ["EMFILE"] and [e["event"] for e in logs] == ["accept_failed"]
    finally:
        loop.set_exception_handler(previous)
