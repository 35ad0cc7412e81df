"""An emulated VPC in network namespaces, for the node datapath's tests.

* :mod:`~.spec` — what it is built from (:class:`VpcSpec`: VPC CIDRs, subnets, nodes and their
  interfaces), by hand or from the in-memory cloud (:meth:`VpcSpec.from_sim`).
"""

from __future__ import annotations

from eni_ipam_testkit.vpc.spec import (
    OUTSIDE_IPV4,
    ROUTER_LINK_LOCAL,
    InterfaceSpec,
    NodeSpec,
    SubnetSpec,
    VpcSpec,
    derived_mac,
)

__all__ = [
    "OUTSIDE_IPV4",
    "ROUTER_LINK_LOCAL",
    "InterfaceSpec",
    "NodeSpec",
    "SubnetSpec",
    "VpcSpec",
    "derived_mac",
]
