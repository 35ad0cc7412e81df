"""The Kubernetes side of the scale benchmark: a fake API server in its own process, seeded.

``python -m bench.scale_kube --nodes N --kubeconfig FILE`` serves the test kit's fake API server with
N realistic Nodes (about 12 KB of JSON each, as a kubelet and a cloud controller leave them) of the
EC2 fleet the benchmark's cloud holds (:func:`eni_ipam_testkit.ec2_wire.fleet.fleet_nodes`: the same
instances, zones and provider ids), the chart's ENIPool CRD, and each Node's ENIPool as the controller
creates it (spec only: no status yet, a controller starting afresh). A share of the pools ask for more
than their node holds (``--deficit``) and a share of the nodes have pods waiting for an address
(``--pending``), so the order of the first status writes can be checked.

It runs in its own process so that the server's memory (a 12 KB Node is ~40 KB as Python objects) and
CPU never count as the controller's. It prints one ``ready <url>`` line, then serves until SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from eni_ipam.kube.resources import pool_for_node
from eni_ipam_testkit.ec2_wire.fleet import FleetNode, FleetSpec, fleet_nodes
from eni_ipam_testkit.fake_kube import FakeKube
from eni_ipam_testkit.fake_kube.realistic import realistic_node, realistic_pending_pod

CRD = (
    Path(__file__).resolve().parents[1]
    / "deploy"
    / "helm"
    / "eni-ipam"
    / "crds"
    / "enipools.eni-ipam.io.yaml"
)
READY = "ready "
INSTANCE_TYPE = "m5.4xlarge"
DEFICIT_SPEC = {"firstInterfaceIndex": 4, "subnetIDs": ["subnet-elsewhere"]}
"""A pool in deficit that no pass can fill: its node's interfaces are all below its first index,
and the only subnet it may create one in does not exist."""


def node_name(n: int) -> str:
    return f"ip-10-{n // 65536}-{(n // 256) % 256}-{n % 256}.ec2.internal"


def every(share: float, nodes: int) -> int:
    """Every how many nodes one is picked, for ``share`` of them (0: none)."""
    return max(round(1 / share), 1) if share > 0 else nodes + 1


def deficit_node(n: int, nodes: int, share: float = 0.005) -> bool:
    """Whether node ``n`` of ``nodes`` is one of the ``share`` whose pool asks for more."""
    k = every(share, nodes)
    return n % k == k // 2


def pending_node(n: int, nodes: int, share: float = 0.005) -> bool:
    """Whether node ``n`` of ``nodes`` is one of the ``share`` with a pod waiting for an address."""
    k = every(share, nodes)
    return n % k == k // 3


def expected_first(nodes: int) -> set[str]:
    """The nodes a fresh start must write first: those with a pending pod or asking for more (as
    :func:`seed` picks them with the default shares)."""
    return {node_name(n) for n in range(nodes) if deficit_node(n, nodes) or pending_node(n, nodes)}


def _node(n: int, fleet_node: FleetNode) -> dict[str, Any]:
    return realistic_node(
        node_name(n),
        provider_id=f"aws:///{fleet_node.zone}/{fleet_node.instance_id}",
        zone=fleet_node.zone,
        instance_type=INSTANCE_TYPE,
    )


def node_bytes(nodes: int) -> int:
    """Bytes of JSON of the first Node seeded for a cluster of ``nodes`` (as the API server sends it)."""
    first = fleet_nodes(FleetSpec(instances=nodes, instance_type=INSTANCE_TYPE))[0]
    return len(json.dumps(_node(0, first), separators=(",", ":")))


async def seed(kube: FakeKube, nodes: int, *, deficit: float, pending: float) -> dict[str, Any]:
    await kube.apply_manifest(CRD.read_text())
    spec = FleetSpec(instances=nodes, instance_type=INSTANCE_TYPE)
    started = time.perf_counter()
    deficits, waiting = [], []
    for n, fleet_node in enumerate(fleet_nodes(spec)):
        name = node_name(n)
        node = _node(n, fleet_node)
        stored = kube.add_object("nodes", node)  # with its uid: the pool's owner reference names it
        pool = pool_for_node(stored, None)
        assert pool is not None
        if deficit_node(n, nodes, deficit):
            pool["spec"].update(DEFICIT_SPEC)
            deficits.append(name)
        kube.add_object("enipools", pool)
        if pending_node(n, nodes, pending):
            kube.add_object("pods", realistic_pending_pod(f"web-{n}", "default", name))
            waiting.append(name)
    return {"seconds": time.perf_counter() - started, "deficit": deficits, "pending": waiting}


async def serve(args: argparse.Namespace) -> None:
    kube = FakeKube(history=100_000)
    await kube.start()
    seeded = await seed(kube, args.nodes, deficit=args.deficit, pending=args.pending)
    kube.write_kubeconfig(args.kubeconfig)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    print(f"{READY}{kube.url} (seeded {args.nodes} nodes in {seeded['seconds']:.1f} s)", flush=True)
    try:
        await stop.wait()
    finally:
        await kube.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scale_kube", description=__doc__)
    parser.add_argument("--nodes", type=int, required=True)
    parser.add_argument("--kubeconfig", required=True, help="where to write the admin kubeconfig")
    parser.add_argument("--deficit", type=float, default=0.005, help="share of pools asking for more")
    parser.add_argument("--pending", type=float, default=0.005, help="share of nodes with a pending pod")
    asyncio.run(serve(parser.parse_args(argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
