"""podman, Docker and containerd on one agent, through a node's faults: ``python -m bench.runtimes_soak``.

ONE ``eni-ipam agent`` serves podman (CNI), a Docker network (the libnetwork driver) and a private
containerd (CRI) at once, as ``tests/e2e/test_runtimes_together.py`` sets them up, and the faults of
that test are thrown at it in random order (each fault once per shuffled round) for ``--seconds``:
the state file corrupted while every runtime holds addresses, stale libcni cache entries of failed
DELs with the state lost, quick restart bursts during container starts, a SIGSTOPped agent, a Docker
network removed while the agent is down; and those of ``tests/e2e/test_node_trust.py`` (what a start
trusts, docs/decisions/0034): the newer slot of the state file damaged, an older copy of the state
directory put back, dockerd hung at the agent's start with the state lost. Before each fault every
container is removed and the pool is empty; after it, the invariants are checked across the runtimes:

1. no address is held by two containers (each runtime's own view: ``podman inspect``, ``docker
   inspect``, CRI ``PodSandboxStatus``);
2. none is lost: every running container's address is allocated to it in the agent;
3. none leaks: once a sweep has had its time, every allocation is held by a running container.

A fault's own expectation broken (a podman or containerd start failing across the restarts, STATUS
not answering code 50 in time, the network not created again at once, a start with dockerd hung not
served from the addresses Docker was not handed) counts as a failed round.
Any violation or failed round makes the exit status 1, and is listed in the report.

The runs go through pytest (the test's fixtures: the agent of docs/node.md, podman, dockerd and
containerd relocated into a temporary directory), so this needs what that test needs: root, network
namespaces, ``make node-runtimes``. Where they are missing it says why and writes nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from bench.report import RUNTIMES_HEADING, publish_section, soak_arguments

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "RELIABILITY-node.md"
TEST = ROOT / "tests" / "e2e" / "test_runtimes_together.py"
SECONDS = 240.0
QUICK_SECONDS = 60.0
SEED = 7
TOOLS = ("podman", "dockerd", "docker", "containerd", "ctr", "ip", "nsenter")
# The test's environment variables (tests/e2e/test_runtimes_together.py): not imported, the tests are
# not a package of the product's.
SOAK_SECONDS = "ENI_IPAM_RUNTIMES_SOAK_SECONDS"
SOAK_REPORT = "ENI_IPAM_RUNTIMES_SOAK_REPORT"
SOAK_SEED = "ENI_IPAM_RUNTIMES_SOAK_SEED"
KINDS = ("duplicates", "leaks", "lost", "failed")


def missing() -> str:
    """Why the soak cannot run on this host ("" when it can, as far as can be told before trying)."""
    if os.geteuid() != 0:
        return "not root: podman, dockerd, containerd and network namespaces need root"
    absent = [tool for tool in TOOLS if shutil.which(tool) is None]
    if absent:
        return f"{', '.join(absent)} not installed (make node-runtimes)"
    return ""


class _Watch:
    """What pytest said of the soak's test: the reason of a skip, whether it failed."""

    def __init__(self) -> None:
        self.skipped = ""
        self.failed = False

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.skipped and isinstance(report.longrepr, tuple):
            self.skipped = str(report.longrepr[2])
        if report.failed:
            self.failed = True


def run_soak(seconds: float, seed: int) -> tuple[dict[str, Any] | None, str, bool]:
    """The figures of a run (None when it did not run), the reason of a skip, whether pytest failed."""
    with tempfile.TemporaryDirectory(prefix="eni-rt-soak-") as tmp:
        figures = Path(tmp) / "figures.json"
        os.environ.update({SOAK_SECONDS: f"{seconds:g}", SOAK_REPORT: str(figures), SOAK_SEED: str(seed)})
        # The agent the test starts runs this checkout's code.
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
        watch = _Watch()
        args = [f"{TEST}::test_soak", "-m", "e2e", "-rA", "-s", "-p", "no:cacheprovider", "-o", "addopts="]
        pytest.main(args, plugins=[watch])
        found = json.loads(figures.read_text()) if figures.exists() else None
        return found, watch.skipped, watch.failed


def render(figures: dict[str, Any], seconds: float, seed: int) -> str:
    rounds: dict[str, int] = figures["rounds"]
    total = {kind: sum(figures[kind].values()) for kind in KINDS}
    lines = [
        RUNTIMES_HEADING,
        "",
        "Written by `make soak` (`python -m bench.runtimes_soak`, code in `bench/runtimes_soak.py`, the",
        "faults and invariants in `tests/e2e/test_runtimes_together.py`, and the faults of what a start",
        "trusts in `tests/e2e/test_node_trust.py`): ONE agent, set up as",
        "[node.md](node.md) says, serves podman, a Docker network (the libnetwork driver) and a private",
        "containerd (CRI) at once from a pool of "
        f"{figures['pool']} addresses, while the faults are thrown at it in random",
        "order, every container removed before each and the invariants checked across the runtimes after",
        "each: no address held by two containers (podman inspect, docker inspect, CRI PodSandboxStatus),",
        "none a running container holds missing from the agent (lost), none allocated that no container",
        "holds once a sweep has run (leak). A failed round is a fault's own expectation broken.",
        "",
        f"Set-up: {seconds:g} s of faults, seed {seed}. The run took {figures['seconds']:.0f} s.",
        "",
        "| fault | rounds | duplicates | leaks | lost | failed rounds |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name in sorted(rounds):
        counts = " | ".join(str(figures[kind].get(name, 0)) for kind in KINDS)
        lines.append(f"| {name} | {rounds[name]} | {counts} |")
    lines.append(
        f"| **all** | **{sum(rounds.values())}** | " + " | ".join(f"**{total[k]}**" for k in KINDS) + " |"
    )
    notes: dict[str, int] = figures.get("notes", {})
    if notes:
        lines += [
            "",
            "Starts that failed during the restart bursts, by runtime. Docker's are reported, not counted:",
            "dockerd retries a driver call that met the agent's closed socket with an empty body",
            "([moby/moby#39331](https://github.com/moby/moby/issues/39331)), which the agent can only",
            "refuse; the container is started again. podman's and containerd's are failed rounds.",
            "",
            "| what | count |",
            "|---|---:|",
        ]
        lines += [f"| {what} | {count} |" for what, count in sorted(notes.items())]
    if figures["details"]:
        lines += ["", "### Violations and failed rounds", ""]
        lines += [f"- {' '.join(detail.split())}" for detail in figures["details"]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = soak_arguments(
        "python -m bench.runtimes_soak", (__doc__ or "").splitlines()[0], OUT, argv, seconds=SECONDS
    )
    why = missing()
    if why:
        print(f"runtimes soak: skipped: {why}")
        return 0
    seconds = QUICK_SECONDS if args.quick and args.seconds == SECONDS else args.seconds
    began = time.perf_counter()
    figures, skipped, failed = run_soak(seconds, SEED)
    if figures is None:
        took = time.perf_counter() - began
        if skipped and not failed:
            print(f"runtimes soak: skipped after {took:.0f}s: {skipped}")
            return 0
        print(f"runtimes soak: failed after {took:.0f}s before any figure (see pytest's report above)")
        return 1
    section = render(figures, seconds, SEED)
    publish_section(section, args.out, RUNTIMES_HEADING, quick=args.quick, name="runtimes soak")
    broken = sum(sum(figures[kind].values()) for kind in KINDS)
    return 0 if not broken else 1


if __name__ == "__main__":
    sys.exit(main())
