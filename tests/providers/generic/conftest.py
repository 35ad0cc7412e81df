"""A node store for the generic provider's tests: records set by hand, terms bumped by hand."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from eni_ipam.adapters.metrics import Metrics
from eni_ipam.config.schema import validate
from eni_ipam.core.clock import LoopClock
from eni_ipam.core.records import NodeRecord
from providers.generic.provider import GenericProvider
from providers.generic.settings import GenericSettings


def _generic_settings(data: Any) -> GenericSettings:
    """The ``generic:`` section read as the run configuration reads it."""
    return validate(GenericSettings, data, path="generic")


@dataclasses.dataclass
class Records:
    """A NodeRecords whose contents the test controls."""

    records: dict[str, NodeRecord] = dataclasses.field(default_factory=dict)
    term: int = 0
    synced: bool = True

    def node_records(self) -> list[NodeRecord] | None:
        return list(self.records.values()) if self.synced else None

    def add(self, name: str, *, subnets: tuple[str, ...] = (), **fields: tuple[str, ...]) -> NodeRecord:
        record = NodeRecord(name=name, instance_id=name, subnet_ids=subnets, **fields)
        self.records[name] = record
        return record

    def publish(self, provider: GenericProvider, name: str) -> None:
        """Record what the provider says the node holds, as a published status would."""
        instance = provider._instance(provider._nodes[name])
        iface = instance.interfaces[0]
        self.records[name] = dataclasses.replace(
            self.records[name], prefixes=iface.prefixes, ipv6_prefixes=iface.ipv6_prefixes
        )


def settings(**data: object) -> GenericSettings:
    return _generic_settings({"cluster_cidrs": ["10.244.0.0/16"], **data})


@pytest.fixture
def records() -> Records:
    return Records()


@pytest.fixture
def make_provider(records: Records):
    def make(s: GenericSettings | None = None, **data: object) -> GenericProvider:
        return GenericProvider(s or settings(**data), records=records, clock=LoopClock(), metrics=Metrics())

    return make
