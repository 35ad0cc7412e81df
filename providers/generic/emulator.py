"""The generic provider as the ``generic:`` section of scenario files.

Registered under the ``eni_ipam.emulators`` entry points as ``generic`` (pyproject.toml; the contract
is :mod:`eni_ipam.simulator.emulation`'s). There is no cloud to change: a node is its own instance,
and the provider keeps its state in the node store the simulator hands it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from eni_ipam.core.clock import Clock
from eni_ipam.core.model import Instance
from eni_ipam.core.observe import ApiObserver
from eni_ipam.core.records import NodeRecords
from providers.generic.provider import INSTANCE_TYPE, GenericProvider
from providers.generic.settings import GenericSettings


class GenericEmulation:
    def __init__(self, provider: GenericProvider) -> None:
        self.provider = provider

    @property
    def calls(self) -> Mapping[str, int]:
        return self.provider.calls

    def instance_view(self, instance_id: str) -> Instance | None:
        return self.provider.instance_view(instance_id)

    def set_latency(self, operation: str | None, seconds: float) -> None:
        raise NotImplementedError("the generic provider makes no cloud calls to slow down")

    def instance_types(self) -> Collection[str]:
        return (INSTANCE_TYPE,)

    def change(self, change: Any) -> None:
        raise NotImplementedError("the generic provider has no cloud to change")


class GenericEmulator:
    """The ``generic`` emulator."""

    DECLARATION = GenericSettings
    CHANGE = None

    def instances(self, declaration: GenericSettings) -> None:
        return None  # any: a generic node is its own instance

    def check_change(self, declaration: GenericSettings, change: Any) -> None:
        raise NotImplementedError("the generic provider has no cloud to change")

    def open(
        self,
        declaration: GenericSettings,
        *,
        clock: Clock,
        metrics: ApiObserver,
        records: NodeRecords,
        path: str,
    ) -> GenericEmulation:
        return GenericEmulation(GenericProvider(declaration, records=records, clock=clock, metrics=metrics))


EMULATOR = GenericEmulator()
