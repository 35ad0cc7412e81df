"""An emulated VPC in network namespaces, for the node datapath's tests: a router that enforces EC2's
source/destination check, an outside host, and the nodes' interfaces as devices found by MAC.

* :mod:`~.spec` — what it is built from (:class:`VpcSpec`: VPC CIDRs, subnets, nodes and their
  interfaces), by hand or from the in-memory cloud (:meth:`VpcSpec.from_sim`);
* :mod:`~.harness` — :class:`EmulatedVpc`: the namespaces, built, changed as the cloud changes
  (assign, unassign, attach, detach, update) and always removed; drop counters and probes; IPv6
  (subnets' /64s, delegated /80s, the outside host's :data:`OUTSIDE_IPV6`, the nodes' default route
  as EC2's router advertisements give it) wherever a subnet has an IPv6 block;
* :mod:`~.fabric` — the router's routes, neighbours, bridges and the nftables check, as commands;
* :mod:`~.probes` — ping and a TCP echo of the peer's address;
* :mod:`~.shell` — running ``ip``, ``bridge``, ``nft`` in a namespace; the sweep of stale namespaces.

It needs root, ``ip`` (iproute2), ``nft`` (nftables) and busybox; :func:`missing` says what this
machine lacks, for a test to skip with the reason.
"""

from __future__ import annotations

import os
import shutil

from eni_ipam_testkit.vpc.harness import DEFAULT_MTU, EmulatedVpc
from eni_ipam_testkit.vpc.probes import BUSYBOX, ECHO_PORT
from eni_ipam_testkit.vpc.shell import VpcError, sweep_stale
from eni_ipam_testkit.vpc.spec import (
    OUTSIDE_IPV4,
    OUTSIDE_IPV6,
    ROUTER_LINK_LOCAL,
    InterfaceSpec,
    NodeSpec,
    SubnetSpec,
    VpcSpec,
    derived_mac,
)

__all__ = [
    "DEFAULT_MTU",
    "ECHO_PORT",
    "OUTSIDE_IPV4",
    "OUTSIDE_IPV6",
    "ROUTER_LINK_LOCAL",
    "EmulatedVpc",
    "InterfaceSpec",
    "NodeSpec",
    "SubnetSpec",
    "VpcError",
    "VpcSpec",
    "derived_mac",
    "missing",
    "sweep_stale",
]


def missing() -> str | None:
    """Why an emulated VPC cannot be built here (not root, a tool missing), or ``None``."""
    if os.geteuid() != 0:
        return "an emulated VPC needs root (network namespaces, nftables)"
    for tool in ("ip", "bridge", "nft", "sysctl"):
        if shutil.which(tool) is None:
            return f"an emulated VPC needs {tool!r} on PATH"
    if not os.access(BUSYBOX, os.X_OK):
        return f"an emulated VPC's probes need {BUSYBOX}"
    return None
