"""The node datapath under churn, for minutes: ``python -m bench.datapath_soak``.

Two nodes of an emulated VPC (``tests/e2e/vpc_nodes.py``: the in-memory cloud, the router with EC2's
source/destination check, the fake API server, per node the real agent with the datapath on, a
private containerd over CRI and podman), as ``tests/e2e/test_datapath.py`` sets them up. Pods are
started and stopped on both nodes by both runtimes, each new pod connecting to a pod of each node
and to a host outside the VPC, while, in turn, one node's agent is SIGKILLed (started again a second
later, as systemd's ``RestartSec=1``), an interface is attached to that node, the other node's agent
is killed, and the interface is detached again through the release handshake; the next round starts
with the other node. After each fault and at the end the soak checks:

1. each node's rules, routes and SNAT table are exactly what the addresses its agent holds need:
   nothing stale, nothing missing;
2. the router's source/destination check dropped nothing;
3. every new pod reached both nodes' pods with its own address and the outside host with its
   node's primary address.

Any violation makes the exit status 1, and is listed in the report. The runs go through pytest
(``test_soak`` of that test), so this needs what it needs: root, network namespaces, nftables,
busybox-static, containerd, podman and containernetworking-plugins (``make node-runtimes``). Where
they are missing it says why and writes nothing.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from bench import e2e_soak
from bench.report import DATAPATH_HEADING, publish_section, soak_arguments

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "RELIABILITY-node.md"
TEST = ROOT / "tests" / "e2e" / "test_datapath.py"
SECONDS = 300.0
QUICK_SECONDS = 60.0
SEED = 44
TOOLS = ("containerd", "ctr", "podman", "nft", "ip", "nsenter", "unshare")
PREFIX = "ENI_IPAM_DATAPATH_SOAK"
"""Of the test's environment variables (tests/e2e/test_datapath.py; bench/e2e_soak.py)."""
BROKEN = ("unreachable", "stale_or_missing", "dropped", "errors")
"""Figures that must be 0."""


def render(figures: dict[str, Any], seconds: float, seed: int) -> str:
    starts: dict[str, int] = figures["starts"]
    kills: dict[str, int] = figures["kills"]
    refused: dict[str, int] = figures["refused"]
    rows = [
        ("pods started (containerd over CRI)", starts.get("containerd", 0)),
        ("pods started (podman)", starts.get("podman", 0)),
        ("pods stopped", figures["stops"]),
        (
            "starts and stops refused while an agent was down or its pool taken, tried again",
            sum(refused.values()),
        ),
        ("agents killed (SIGKILL, started again after 1 s)", sum(kills.values())),
        ("interfaces attached", len(figures["attached"])),
        ("interfaces detached (release handshake first)", len(figures["detached"])),
        ("probes of new pods (a pod of each node, the outside host)", figures["probes"]),
        ("allocations no pod held at the end (a DEL lost to a kill), released", figures["leaked"]),
        ("**probes that failed or saw another source**", figures["unreachable"]),
        ("**stale or missing rules, routes and SNAT entries**", figures["stale_or_missing"]),
        ("**packets dropped by the source/destination check**", figures["dropped"]),
        ("**other errors**", figures["errors"]),
    ]
    lines = [
        DATAPATH_HEADING,
        "",
        "Written by `make soak` (`python -m bench.datapath_soak`, code in `bench/datapath_soak.py`, the",
        "topology in `tests/e2e/vpc_nodes.py` and the churn in `tests/e2e/test_datapath.py`): two nodes",
        "of three interfaces in an emulated VPC whose router drops, as EC2's source/destination check",
        "does, every packet leaving through an interface that does not own its source; per node the",
        "agent with the datapath on, a private containerd over CRI and podman, their network `ptp` with",
        "`eni-ipam-cni`. Pods start and stop on both nodes, each new pod connecting to a pod of each",
        "node and to the outside host, while in turn a node's agent is killed, an interface attached to",
        "it, the other node's agent killed and the interface detached again (release handshake first).",
        "After each fault and at the end, each node's rules, routes and SNAT table are compared with the",
        "addresses its agent holds. The bold rows must be 0.",
        "",
        f"Set-up: {seconds:g} s of churn, seed {seed}, 4 pods at a time per node. The run took "
        f"{figures['seconds']:.0f} s.",
        "",
        "| what | count |",
        "|---|---:|",
        *(f"| {what} | {count} |" for what, count in rows),
    ]
    if figures["details"]:
        lines += ["", "### Violations", ""]
        lines += [f"- {' '.join(detail.split())}" for detail in figures["details"]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = soak_arguments(
        "python -m bench.datapath_soak", (__doc__ or "").splitlines()[0], OUT, argv, seconds=SECONDS
    )
    why = e2e_soak.missing(TOOLS, "network namespaces, nftables, containerd and podman")
    if why:
        print(f"datapath soak: skipped: {why}")
        return 0
    seconds = QUICK_SECONDS if args.quick and args.seconds == SECONDS else args.seconds
    figures = e2e_soak.run(TEST, PREFIX, seconds, SEED, name="datapath soak")
    if isinstance(figures, int):
        return figures
    section = render(figures, seconds, SEED)
    publish_section(section, args.out, DATAPATH_HEADING, quick=args.quick, name="datapath soak")
    return 0 if not any(figures[k] for k in BROKEN) else 1


if __name__ == "__main__":
    sys.exit(main())
