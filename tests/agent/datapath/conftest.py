"""A private network namespace per test, entered by the test's own thread (no subprocess).

The datapath changes the routing of the namespace it runs in; each test gets a fresh one, entered
with ``unshare(CLONE_NEWNET)`` by the thread that runs the test (and its event loop), and left with
``setns`` afterwards, so the host's and the other tests' routing are never touched. Needs root
(``CAP_SYS_ADMIN``); skips otherwise, saying so.
"""

from __future__ import annotations

import ctypes
import os
import socket
import struct
from collections.abc import Iterator

import pytest

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"{what}: {os.strerror(error)}")


def loopback_up() -> None:
    """Bring ``lo`` (index 1 in a new namespace) up, as every namespace a process runs in has it."""
    iff_up = 0x1
    body = struct.pack("BxHiII", socket.AF_UNSPEC, 0, 1, iff_up, iff_up)
    message = struct.pack("IHHII", 16 + len(body), 19, 0x1 | 0x4, 1, 0) + body  # RTM_SETLINK, ACK
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE) as sock:
        sock.bind((0, 0))
        sock.send(message)
        answer = sock.recv(4096)
    (error,) = struct.unpack_from("i", answer, 16)
    if error:
        raise OSError(-error, os.strerror(-error))


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
            loopback_up()
            yield
        finally:
            _check(_libc.setns(original, CLONE_NEWNET), "setns back to the original namespace")
    finally:
        os.close(original)
