"""The libnetwork remote IPAM driver: Docker networks whose addresses come from the node's pools.

What Docker sees (the methods, their semantics, errors and statuses) is documented in docs/node.md,
section "The libnetwork protocol". The modules:

* :mod:`~eni_ipam.agent.libnetwork.protocol` — libnetwork's vocabulary: address spaces, option keys, its
  well-known errors, and the refusal carrying one with its HTTP status.
* :mod:`~eni_ipam.agent.libnetwork.registry` — the pools handed out (PoolID → grant), kept in a state file
  so that PoolIDs survive a restart.
* :mod:`~eni_ipam.agent.libnetwork.driver` — libnetwork's IPAM semantics over the node's allocator.
* :mod:`~eni_ipam.agent.libnetwork.http` — the plugin protocol's endpoints on the agent's socket.

All of them log under one logger name, ``eni_ipam.agent.libnetwork``, with events named ``libnetwork_*``.
"""

from __future__ import annotations

from .driver import LibnetworkDriver, PoolGrant
from .http import CONTENT_TYPE, add_routes
from .protocol import (
    GATEWAY,
    GLOBAL_ADDRESS_SPACE,
    LOCAL_ADDRESS_SPACE,
    REQUEST_ADDRESS_TYPE,
    SERIAL,
    IpamRequestError,
)
from .registry import OWNER_PREFIX, PoolRecord

__all__ = [
    "CONTENT_TYPE",
    "GATEWAY",
    "GLOBAL_ADDRESS_SPACE",
    "LOCAL_ADDRESS_SPACE",
    "OWNER_PREFIX",
    "REQUEST_ADDRESS_TYPE",
    "SERIAL",
    "IpamRequestError",
    "LibnetworkDriver",
    "PoolGrant",
    "PoolRecord",
    "add_routes",
]
