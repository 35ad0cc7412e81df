"""A private network namespace per test, entered by the test's own thread (no subprocess).

The datapath changes the routing of the namespace it runs in; each test gets a fresh one, entered
with ``unshare(CLONE_NEWNET)`` by the thread that runs the test (and its event loop), and left with
``setns`` afterwards, so the host's and the other tests' routing are never touched. Needs root
(``CAP_SYS_ADMIN``); skips otherwise, saying so.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterator

import pytest

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"{what}: {os.strerror(error)}")


@pytest.fixture
def private_netns() -> Iterator[None]:
    if os.geteuid() != 0:
        pytest.skip("a private network namespace needs root")
    original = os.open("/proc/self/ns/net", os.O_RDONLY)
    try:
        try:
            _check(_libc.unshare(CLONE_NEWNET), "unshare(CLONE_NEWNET)")
        except OSError as exc:
            pytest.skip(f"cannot make a network namespace: {exc}")
        try:
            yield
        finally:
            _check(_libc.setns(original, CLONE_NEWNET), "setns back to the original namespace")
    finally:
        os.close(original)
