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

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from bench.report import DATAPATH_HEADING, publish_section, soak_arguments

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "RELIABILITY-node.md"
TEST = ROOT / "tests" / "e2e" / "test_datapath.py"
SECONDS = 300.0
QUICK_SECONDS = 60.0
SEED = 44
TOOLS = ("containerd", "ctr", "podman", "nft", "ip", "nsenter", "unshare")
# The test's environment variables (tests/e2e/test_datapath.py): not imported, the tests are not a
# package of the product's.
SOAK_SECONDS = "ENI_IPAM_DATAPATH_SOAK_SECONDS"
SOAK_REPORT = "ENI_IPAM_DATAPATH_SOAK_REPORT"
SOAK_SEED = "ENI_IPAM_DATAPATH_SOAK_SEED"
BROKEN = ("unreachable", "stale_or_missing", "dropped", "errors")
"""Figures that must be 0."""


def missing() -> str:
    """Why the soak cannot run on this host ("" when it can, as far as can be told before trying)."""
    if os.geteuid() != 0:
        return "not root: network namespaces, nftables, containerd and podman need root"
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
    with tempfile.TemporaryDirectory(prefix="eni-dp-soak-") as tmp:
        figures = Path(tmp) / "figures.json"
        os.environ.update({SOAK_SECONDS: f"{seconds:g}", SOAK_REPORT: str(figures), SOAK_SEED: str(seed)})
        # The agents the test starts run this checkout's code.
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
        watch = _Watch()
        args = [f"{TEST}::test_soak", "-m", "e2e", "-rA", "-s", "-p", "no:cacheprovider", "-o", "addopts="]
        pytest.main(args, plugins=[watch])
        found = json.loads(figures.read_text()) if figures.exists() else None
        return found, watch.skipped, watch.failed


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
    why = missing()
    if why:
        print(f"datapath soak: skipped: {why}")
        return 0
    seconds = QUICK_SECONDS if args.quick and args.seconds == SECONDS else args.seconds
    began = time.perf_counter()
    figures, skipped, failed = run_soak(seconds, SEED)
    if figures is None:
        took = time.perf_counter() - began
        if skipped and not failed:
            print(f"datapath soak: skipped after {took:.0f}s: {skipped}")
            return 0
        print(f"datapath soak: failed after {took:.0f}s before any figure (see pytest's report above)")
        return 1
    section = render(figures, seconds, SEED)
    publish_section(section, args.out, DATAPATH_HEADING, quick=args.quick, name="datapath soak")
    return 0 if not any(figures[k] for k in BROKEN) else 1


if __name__ == "__main__":
    sys.exit(main())
