"""Fixtures: a node whose default pool has one IPv4 and one IPv6 subnet, and one with two IPv4 subnets."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from eni_ipam.agent.types import PoolAddress
from tests.agent.libnetwork import DEFAULT_V4, DEFAULT_V6, Node, started_node


@pytest.fixture
async def node() -> AsyncIterator[Node]:
    async for n in started_node(DEFAULT_V4 + DEFAULT_V6):
        yield n


@pytest.fixture
async def two_subnet_node() -> AsyncIterator[Node]:
    small = [PoolAddress(address=f"10.0.0.{i}", prefix_length=24, gateway="10.0.0.1") for i in (10, 11)]
    large = [PoolAddress(address=f"10.0.1.{i}", prefix_length=24, gateway="10.0.1.1") for i in range(10, 15)]
    async for n in started_node(small + large):
        yield n
