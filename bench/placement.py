"""Micro-benchmark: the cost of counting free /28 blocks from a resync's listing (core/blocks.py).

A resync at 100,000 nodes lists about 400,000 interfaces (four a node) of ten secondary addresses
each, already parsed into the model (:mod:`providers.aws.listings`). The count adds, per interface,
two list appends (its packed addresses, its primary), and per subnet one C-level unpack of them all
into a set and one C-level pass that finds the broken blocks. This measures both on such a listing
spread over 96 /16 subnets (4,400,000 addresses, 70 % of the subnets' space), and one dense pick of
eight addresses in the fullest subnet (what a plan names). CPU time, best of ``repeat`` runs.

``python -m bench.placement [nodes] [repeat]`` prints the figures (docs/PERFORMANCE.md quotes them).
Not part of ``make bench``.
"""

from __future__ import annotations

import sys
import time

from eni_ipam.core.blocks import count_blocks
from eni_ipam.core.model import Interface, Subnet
from eni_ipam.core.packed import Addresses

SUBNETS = 96
PER_INTERFACE = 10


def listing(nodes: int) -> tuple[dict[str, Subnet], list[Interface]]:
    """``4 × nodes`` interfaces of a primary and ten secondaries, round-robin over the subnets."""
    subnets = {
        f"subnet-{n}": Subnet(id=f"subnet-{n}", vpc_id="v", zone="z", cidr=f"10.{n}.0.0/16", available=0)
        for n in range(SUBNETS)
    }
    interfaces = []
    cursor = [16] * SUBNETS
    for n in range(4 * nodes):
        s = n % SUBNETS
        base = (10 << 24) | (s << 16)
        start = cursor[s]
        cursor[s] += PER_INTERFACE + 1
        packed = b"".join((base + start + 1 + k).to_bytes(4, "big") for k in range(PER_INTERFACE))
        interfaces.append(
            Interface(
                id=f"eni-{n}",
                device_index=0,
                subnet_id=f"subnet-{s}",
                primary_ip=".".join(str((base + start) >> sh & 255) for sh in (24, 16, 8, 0)),
                addresses=Addresses(packed),
            )
        )
    return subnets, interfaces


def measure(nodes: int, repeat: int = 3) -> dict[str, float]:
    subnets, interfaces = listing(nodes)
    best_add = best_count = best_pick = float("inf")
    free = 0
    for _ in range(repeat):
        started = time.process_time()
        counted = count_blocks(subnets, interfaces)
        added = time.process_time()
        free = sum(b.free_blocks for b in counted.values())
        done = time.process_time()
        fullest = max(counted.values(), key=lambda b: len(b.used))
        picked = time.process_time()
        fullest.pick(8)
        best_pick = min(best_pick, time.process_time() - picked)
        best_add = min(best_add, added - started)
        best_count = min(best_count, done - added)
    return {
        "interfaces": float(len(interfaces)),
        "addresses": float(len(interfaces) * (PER_INTERFACE + 1)),
        "add_s": best_add,
        "count_s": best_count,
        "pick_s": best_pick,
        "free_blocks": float(free),
    }


def main(argv: list[str]) -> None:
    nodes = int(argv[0]) if argv else 100_000
    repeat = int(argv[1]) if len(argv) > 1 else 3
    r = measure(nodes, repeat)
    print(
        f"{nodes} nodes, {r['interfaces']:.0f} interfaces, {r['addresses']:.0f} addresses over {SUBNETS} "
        f"subnets: listing into sets {r['add_s']:.3f} s, free blocks {r['count_s']:.3f} s, "
        f"one pick of 8 {r['pick_s'] * 1000:.1f} ms ({r['free_blocks']:.0f} free blocks)"
    )


if __name__ == "__main__":
    main(sys.argv[1:])
