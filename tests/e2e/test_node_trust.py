"""End to end: what a start of the agent trusts, with real runtimes holding addresses
(docs/decisions/0034). ONE agent serves podman, a Docker network and a private containerd (CRI) from
one pool, as in ``tests/e2e/test_runtimes_together.py``, whose fixtures and invariants these are:

1. the newer slot of the state file damaged (10 bytes overwritten at offset 300) while containers of
   every runtime hold addresses: after the start, new containers get none of theirs;
2. an older valid copy of the state directory put back (a backup, a snapshot, a volume restored)
   after more containers started: 9 new starts across the runtimes duplicate nothing;
3. dockerd hung (SIGSTOP) when the agent starts, its state file lost: podman and CRI starts go on
   from the addresses Docker was not handed, the refusal once only those are left names the pool
   and Docker's socket (``pool_withheld``, not ``pool_exhausted``), ``/readyz`` says the pool is not
   ready, and once dockerd answers its endpoints are adopted and nothing was handed out twice.

Each fault is also a round of ``make soak`` (:data:`TRUST_FAULTS`, run by ``test_soak`` of
``tests/e2e/test_runtimes_together.py``). Needs what that module needs: root, network namespaces,
podman, docker.io, containerd (``make node-runtimes``); each missing piece skips, saying why.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.e2e.test_node_runtimes import SWEPT_WITHIN, Node, until
from tests.e2e.test_runtimes_together import (
    NAMES,
    Runtimes,
    Say,
    assert_invariants,
    containerd,
    docker,
    holders,
    node,
    plugin_status,
    podman,
    start_across,
    started,
    state_file,
    together,
)

__all__ = ["containerd", "docker", "node", "podman", "together"]  # the fixtures, used here

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

OFFSET = 300
"""Where in the newer slot the damage starts (bytes), as the issue that found it did."""


# --- helpers ----------------------------------------------------------------------------------------


def newer_slot(path: Path) -> int:
    """The byte offset of the slot holding the higher generation."""
    raw = path.read_bytes()
    half = len(raw) // 2
    generations = []
    for start in (0, half):
        found = re.search(rb'^ "generation": (\d+),$', raw[start : start + half], re.M)
        generations.append(int(found[1]) if found else -1)
    assert max(generations) > 0, f"no generation in either slot of {path}"
    return 0 if generations[0] > generations[1] else half


def held_by_owner(node: Node, rts: Runtimes) -> dict[str, str]:
    """The addresses the containers hold that the agent does not list for them (empty: all are)."""
    allocations = node.allocations()
    return {h.address: str(h) for h in holders(rts) if not h.owner_matches(allocations.get(h.address, ""))}


def agent_port(node: Node) -> int:
    """The TCP port the agent listens on (``server.port: 0`` in the test: any free one)."""
    assert node.process is not None
    pid = node.process.pid
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # LISTEN
                return int(fields[1].rsplit(":", 1)[1], 16)
    raise AssertionError(f"the agent (pid {pid}) listens on no TCP port")


def readyz(node: Node) -> tuple[int, str]:
    with socket.create_connection(("127.0.0.1", agent_port(node)), timeout=10) as conn:
        conn.sendall(b"GET /readyz HTTP/1.0\r\nHost: agent\r\n\r\n")
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), body.decode().strip()


def dockerd_pid(node: Node) -> int:
    """The private dockerd's pid (its ``--pidfile``)."""
    return int((node.root / "docker" / "docker.pid").read_text().strip())


@contextlib.contextmanager
def dockerd_stopped(node: Node) -> Iterator[None]:
    """dockerd stopped (SIGSTOP): its socket accepts connections and answers none; its containers run."""
    pid = dockerd_pid(node)
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def events(node: Node, since: int, name: str) -> list[dict[str, object]]:
    return [e for e in node.events(since) if e.get("event") == name]


# --- the faults -------------------------------------------------------------------------------------


def damaged_newer_slot(node: Node, rts: Runtimes, say: Say) -> None:
    """2 containers in each runtime; the agent killed; 10 bytes of the newer slot overwritten at offset
    300; after the start every held address is still its container's, and 2 more in each runtime get
    other ones."""
    started(start_across(rts, dict.fromkeys(NAMES, 2)))
    node.kill()
    path = state_file(node)
    raw = bytearray(path.read_bytes())
    at = newer_slot(path) + OFFSET
    raw[at : at + 10] = b"#" * 10
    path.write_bytes(bytes(raw))
    mark = node.log_size()
    node.start()
    lost = held_by_owner(node, rts)
    assert not lost, f"held by containers, not by them in the agent after the start: {lost}"
    seen = [e.get("event") for e in node.events(mark)]
    assert "state_slot_suspect" in seen, f"the damaged newer slot was not found suspect: {seen}"
    more = started(start_across(rts, dict.fromkeys(NAMES, 2)))
    say(f"newer slot damaged at offset {OFFSET}; {len(more)} containers started after, all held")


def older_copy_restored(node: Node, rts: Runtimes, say: Say) -> None:
    """1 container in each runtime; the state directory copied; 3 more in each; the agent killed and
    the copy put back; after the start 9 new containers across the runtimes duplicate nothing."""
    started(start_across(rts, dict.fromkeys(NAMES, 1)))
    state_dir = Path(node.config["state_dir"])
    backup = {p.name: p.read_bytes() for p in state_dir.iterdir() if p.is_file() and p.suffix == ".json"}
    started(start_across(rts, dict.fromkeys(NAMES, 3)))
    node.kill()
    for name, data in backup.items():
        (state_dir / name).write_bytes(data)
    node.start()
    lost = held_by_owner(node, rts)
    assert not lost, f"held by containers since the copy, not by them in the agent: {lost}"
    more = started(start_across(rts, dict.fromkeys(NAMES, 3)))
    say(f"an older copy of {sorted(backup)} put back; {len(more)} new starts after")


def hung_dockerd_at_start(node: Node, rts: Runtimes, say: Say) -> None:
    """Containers in each runtime; the agent killed, its state file lost, dockerd stopped; after the
    start podman and CRI starts are served from the addresses the driver did not hand Docker, the
    refusal once only those are left names the pool and Docker, /readyz says so; dockerd resumed, its
    endpoints are adopted."""
    started(start_across(rts, {"podman": 2, "docker": 3, "containerd": 2}))
    dockers = rts.docker.view()
    assert len(dockers) == 3, dockers
    node.kill()
    state_file(node).unlink()
    mark = node.log_size()
    with dockerd_stopped(node):
        node.start()
        # podman and containerd go on, from everything but what Docker was handed.
        free = len(node.pool()) - len(node.allocations()) - len(dockers)
        counts = {"podman": free // 2, "containerd": free - free // 2}
        more = started(start_across(rts, counts))
        [unread] = events(node, mark, "runtime_not_read")
        assert unread["runtime"] == "docker" and "mirror" in str(unread["withheld"]), unread
        given = set(node.allocations())
        assert not given & dockers, f"Docker's addresses handed out: {sorted(given & dockers)}"
        refused = rts.podman.try_start()
        assert refused.returncode != 0, "a start succeeded with only Docker's addresses left"
        for said in ("pool_withheld", "pool default", "withheld while Docker's API"):
            assert said in refused.stderr, refused.stderr[-1500:]
        status, why = readyz(node)
        assert status == 503 and why.startswith("not ready: pool default: no address can be handed out"), why
        code, answer, _ = plugin_status(node, rts)
        assert code != 0 and answer.get("code") == 50 and "Docker" in str(answer.get("msg")), answer
    say(f"dockerd stopped at the start: {len(more)} podman and CRI starts served, then refused: {why}")
    until("Docker read after it resumed", lambda: events(node, mark, "runtime_read"), 30)
    assert readyz(node)[0] == 200
    lost = held_by_owner(node, rts)
    assert not lost, f"Docker's endpoints not adopted: {lost}"


TRUST_FAULTS: dict[str, Callable[[Node, Runtimes, Say], None]] = {
    "damaged newer slot": damaged_newer_slot,
    "older copy restored": older_copy_restored,
    "hung dockerd at start": hung_dockerd_at_start,
}
"""The faults of decision 0034, for ``make soak`` too."""


# --- the tests --------------------------------------------------------------------------------------


def test_a_damaged_newer_slot_hands_out_no_held_address_again(node: Node, together: Runtimes) -> None:
    damaged_newer_slot(node, together, print)
    assert_invariants(node, together, "after the damaged newer slot")


def test_an_older_copy_put_back_hands_out_no_held_address_again(node: Node, together: Runtimes) -> None:
    older_copy_restored(node, together, print)
    assert_invariants(node, together, "after the older copy")


def test_with_dockerd_hung_at_the_start_podman_and_cri_are_served_from_the_rest(
    node: Node, together: Runtimes
) -> None:
    began = time.perf_counter()
    hung_dockerd_at_start(node, together, print)
    print(f"took {time.perf_counter() - began:.1f}s; sweep within {SWEPT_WITHIN:g}s")
    assert_invariants(node, together, "after dockerd resumed")
