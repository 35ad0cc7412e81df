"""podman, Docker and containerd on one agent, through a node's faults: ``python -m bench.runtimes_soak``.

ONE ``eni-ipam agent`` serves podman (CNI), a Docker network (the libnetwork driver) and a private
containerd (CRI) at once, as ``tests/e2e/test_runtimes_together.py`` sets them up, and the faults of
that test are thrown at it in random order (each fault once per shuffled round) for ``--seconds``:
the state file corrupted while every runtime holds addresses, stale libcni cache entries of failed
DELs with the state lost, quick restart bursts during container starts, single restarts (a SIGKILL
during 20 starts on a busy node, the agent started again after the systemd unit's ``RestartSec``), a
SIGSTOPped agent, a Docker network removed while the agent is down; and those of
``tests/e2e/test_node_trust.py`` (what a start trusts, docs/decisions/0034): the newer slot of the
state file damaged, an older copy of the state directory put back, dockerd hung at the agent's start
with the state lost. Before each fault every container is removed and the pool is empty; after it,
the invariants are checked across the runtimes:

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

import sys
from pathlib import Path
from typing import Any

from bench import e2e_soak
from bench.report import RUNTIMES_HEADING, publish_section, soak_arguments

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "RELIABILITY-node.md"
TEST = ROOT / "tests" / "e2e" / "test_runtimes_together.py"
SECONDS = 240.0
QUICK_SECONDS = 60.0
SEED = 7
TOOLS = ("podman", "dockerd", "docker", "containerd", "ctr", "ip", "nsenter")
PREFIX = "ENI_IPAM_RUNTIMES_SOAK"
"""Of the test's environment variables (tests/e2e/test_runtimes_together.py; bench/e2e_soak.py)."""
KINDS = ("duplicates", "leaks", "lost", "failed")


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
            "Starts that failed across the restarts, by runtime. Docker's are reported, not counted:",
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
    why = e2e_soak.missing(TOOLS, "podman, dockerd, containerd and network namespaces")
    if why:
        print(f"runtimes soak: skipped: {why}")
        return 0
    seconds = QUICK_SECONDS if args.quick and args.seconds == SECONDS else args.seconds
    figures = e2e_soak.run(TEST, PREFIX, seconds, SEED, name="runtimes soak")
    if isinstance(figures, int):
        return figures
    section = render(figures, seconds, SEED)
    publish_section(section, args.out, RUNTIMES_HEADING, quick=args.quick, name="runtimes soak")
    broken = sum(sum(figures[kind].values()) for kind in KINDS)
    return 0 if not broken else 1


if __name__ == "__main__":
    sys.exit(main())
