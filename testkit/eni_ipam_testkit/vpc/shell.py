"""Running the tools the emulated VPC is made with: ``ip``, ``bridge``, ``nft`` and ``sysctl``, each in
one named network namespace, and its own namespaces' names, so that a sweep finds what a killed run
left behind.

Every namespace of a harness is called ``enivpc-<pid>-<token>-<role>``: the creating process's id
and a random token. Two harnesses never collide (the token), and :func:`sweep_stale` removes the
namespaces of processes that no longer exist, never another live harness's. A recycled process id
can only make a stale namespace wait for a later sweep.

Batches (``ip -batch``, ``bridge -batch``, ``nft -f``) keep the number of processes per change small:
building a VPC of two nodes costs about ten of them. A command that fails raises :class:`VpcError`
with the command, its input and what it printed.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

NETNS_DIR = Path("/run/netns")
PREFIX = "enivpc"
_OWN = re.compile(rf"{PREFIX}-(\d+)-[0-9a-f]{{6}}-")


class VpcError(RuntimeError):
    """A command building or changing the emulated VPC failed."""


def run(
    argv: Sequence[str], *, input: str | None = None, check: bool = True, timeout: float = 30.0
) -> subprocess.CompletedProcess[str]:
    """Run ``argv``; with ``check``, raise :class:`VpcError` (command, input, output) when it fails."""
    done = subprocess.run(
        list(argv), input=input, capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and done.returncode != 0:
        shown = f"\n--- input ---\n{input}" if input else ""
        raise VpcError(
            f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip() or done.stdout.strip()}{shown}"
        )
    return done


def in_netns(namespace: str, argv: Sequence[str]) -> list[str]:
    """``argv`` as run inside ``namespace`` (``ip netns exec``)."""
    return ["ip", "netns", "exec", namespace, *argv]


def ip_batch(namespace: str | None, lines: Sequence[str]) -> None:
    """Run ``ip`` commands (one a line, without the ``ip``) in ``namespace`` (``None``: here)."""
    if lines:
        where = ["-n", namespace] if namespace else []
        run(["ip", *where, "-batch", "-"], input="\n".join(lines) + "\n")


def bridge_batch(namespace: str, lines: Sequence[str]) -> None:
    """Run ``bridge`` commands (one a line) in ``namespace``."""
    if lines:
        run(["bridge", "-n", namespace, "-batch", "-"], input="\n".join(lines) + "\n")


def nft(namespace: str, script: str) -> None:
    """Apply an nft script in ``namespace``: one transaction, all or nothing."""
    if script.strip():
        run(in_netns(namespace, ["nft", "-f", "-"]), input=script)


def nft_json(namespace: str, *args: str) -> str:
    """``nft -j <args>`` in ``namespace``: its JSON output."""
    return run(in_netns(namespace, ["nft", "-j", *args])).stdout


def sysctl(namespace: str, settings: Mapping[str, str]) -> None:
    """Set kernel parameters of ``namespace`` (per-namespace ones: ``net.*``)."""
    if settings:
        run(in_netns(namespace, ["sysctl", "-q", "-w", *(f"{k}={v}" for k, v in settings.items())]))


def pids_in(namespace: str) -> list[int]:
    """The processes living in ``namespace``."""
    done = run(["ip", "netns", "pids", namespace], check=False)
    return [int(p) for p in done.stdout.split()] if done.returncode == 0 else []


def kill_all_in(namespace: str) -> None:
    """SIGKILL every process left in ``namespace``: a namespace whose processes live on outlives
    ``ip netns del`` (with its links), so the harness ends what ran in its own namespaces."""
    for pid in pids_in(namespace):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def remove_namespaces(names: Sequence[str]) -> None:
    """Kill what runs in each namespace, then delete them all (their links and nft tables go with
    them). Names that do not exist are passed over."""
    present = [n for n in names if (NETNS_DIR / n).exists()]
    for name in present:
        kill_all_in(name)
    if present:
        run(["ip", "-force", "-batch", "-"], input="".join(f"netns del {n}\n" for n in present), check=False)


def own_namespaces() -> list[str]:
    """Every namespace named like a harness's, live or stale."""
    try:
        return sorted(p.name for p in NETNS_DIR.iterdir() if _OWN.match(p.name))
    except FileNotFoundError:
        return []


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_stale() -> list[str]:
    """Remove the namespaces of harnesses whose process is gone (a killed test run); return their
    names. Namespaces of live processes, this one's included, are left alone."""
    stale = []
    for name in own_namespaces():
        match = _OWN.match(name)
        if match is not None and not alive(int(match.group(1))):
            stale.append(name)
    remove_namespaces(stale)
    return stale
