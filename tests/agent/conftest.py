"""Fixtures of the node side's Kubernetes tests: a pool for node n1 (the fake API server is the
suite's ``kube`` fixture)."""

from __future__ import annotations

from typing import Any


def enipool_status(addresses: list[str], *, release: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "pool": {a: {"interface": "eni-1", "subnet": "s-1"} for a in addresses},
        "subnets": {"s-1": {"cidr": "10.0.0.0/24"}},
        "release": release or {},
    }
