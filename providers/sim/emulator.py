"""The in-memory cloud as the ``cloud:`` section of scenario files and the demo's cloud.

Registered under the ``eni_ipam.emulators`` entry points as ``cloud`` (pyproject.toml); the simulator
finds it there (:mod:`eni_ipam.simulator.emulation` states the contract). The section is a
:class:`~providers.sim.declaration.CloudDeclaration`; a ``cloud`` step is a :class:`CloudChange`:
subnets' free addresses and tags, instances' states, injected faults and latency.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Literal

from eni_ipam.config.schema import ConfigModel, Duration, FieldError, Name, NonNegativeInt, PositiveInt
from eni_ipam.core.clock import Clock
from eni_ipam.core.fields import LooseTagMap
from eni_ipam.core.model import Instance
from eni_ipam.core.observe import ApiObserver
from eni_ipam.core.records import NodeRecords
from providers.sim.cloud import SimCloud
from providers.sim.declaration import CloudDeclaration, build_cloud
from providers.sim.gate import EVERY_OPERATION
from providers.sim.provider import SimProvider

CREDENTIALS_CODE = "AuthFailure"
"""What EC2 answers every call signed with credentials it no longer accepts."""
CREDENTIALS_MESSAGE = "AWS was not able to validate the provided access credentials"


class SubnetChange(ConfigModel):
    available: NonNegativeInt | None = None
    tags: LooseTagMap | None = None


class InstanceChange(ConfigModel):
    state: Literal["running", "stopped", "terminated"] | None = None
    calls: Literal["failing", "answered"] | None = None
    """``failing``: every call naming one of the instance's interfaces fails (``InternalError``: an
    interface broken on the cloud's side) until ``answered``."""


BROKEN_CODE = "InternalError"
"""What a call naming a broken instance's interface answers."""
INTERFACE_OPERATIONS = (
    "AssignPrivateIpAddresses",
    "UnassignPrivateIpAddresses",
    "AssignIpv6Addresses",
    "AttachNetworkInterface",
)
"""The calls that name an interface of an instance (``calls: failing`` fails them)."""
QUOTA_OPERATION = "CreateNetworkInterface"
"""The one call the Region's interface quota refuses."""


QUOTA_CODE = "NetworkInterfaceLimitExceeded"
"""What EC2 answers a CreateNetworkInterface past the Region's interface quota."""
QUOTA_MESSAGE = "The maximum number of network interfaces has been reached."


class QuotaChange(ConfigModel):
    interfaces: NonNegativeInt | None
    """The Region's quota of network interfaces (every interface of the cloud counts, other tenants'
    included): a CreateNetworkInterface once the cloud holds this many fails with
    ``NetworkInterfaceLimitExceeded``; ``null`` lifts it."""


class Fault(ConfigModel):
    count: PositiveInt = 1
    """How many calls of the operation fail."""
    code: Name
    """The EC2 error code they fail with."""
    message: str = ""


class CloudChange(ConfigModel):
    """A ``cloud`` step: change the cloud under the reconciler."""

    subnets: dict[str, SubnetChange] = {}
    instances: dict[str, InstanceChange] = {}
    fail: dict[str, Fault] = {}
    latency: dict[str, Duration] = {}
    credentials: Literal["revoked", "restored"] | None = None
    """``revoked``: every call of every operation fails with ``AuthFailure`` (the controller's
    credentials expired or were revoked) until a later step says ``restored``."""
    quota: QuotaChange | None = None


class SimEmulation:
    """A :class:`SimCloud` and the :class:`SimProvider` over it."""

    def __init__(self, cloud: SimCloud, provider: SimProvider) -> None:
        self.cloud = cloud
        self.provider = provider

    @property
    def calls(self) -> Mapping[str, int]:
        return self.cloud.calls

    def instance_view(self, instance_id: str) -> Instance | None:
        try:
            return self.cloud.instance_view(instance_id)
        except KeyError:
            return None

    def set_latency(self, operation: str | None, seconds: float) -> None:
        self.cloud.set_latency(operation, seconds)

    def instance_types(self) -> Collection[str]:
        return self.cloud.limits.keys()

    def change(self, change: CloudChange) -> None:
        sim = self.cloud
        for sid, subnet in change.subnets.items():
            if subnet.available is not None:
                sim.set_subnet_available(sid, subnet.available)
            if subnet.tags is not None:
                sim.set_subnet_tags(sid, dict(subnet.tags))
        for iid, instance in change.instances.items():
            if instance.state == "terminated":
                sim.terminate_instance(iid)
            elif instance.state == "stopped":
                sim.stop_instance(iid)
            elif instance.state == "running":
                sim.start_instance(iid)
            if instance.calls == "failing":
                for op in INTERFACE_OPERATIONS:
                    sim.fail_while(op, sim.on_interfaces_of(iid), BROKEN_CODE)
            elif instance.calls == "answered":
                for op in INTERFACE_OPERATIONS:
                    sim.gate.clear_lasting(op)
        for op, fault in change.fail.items():
            sim.fail_next(op, count=fault.count, code=fault.code, message=fault.message)
        for op, seconds in change.latency.items():
            sim.set_latency(op, seconds)
        if change.credentials == "revoked":
            sim.gate.fail_while(EVERY_OPERATION, lambda request: True, CREDENTIALS_CODE, CREDENTIALS_MESSAGE)
        elif change.credentials == "restored":
            sim.gate.clear_lasting(EVERY_OPERATION)
        if change.quota is not None:
            sim.gate.clear_lasting(QUOTA_OPERATION)
            limit = change.quota.interfaces
            if limit is not None:
                sim.gate.fail_while(
                    QUOTA_OPERATION, lambda request: sim.interface_count() >= limit, QUOTA_CODE, QUOTA_MESSAGE
                )


class SimEmulator:
    """The ``cloud`` emulator (see :mod:`eni_ipam.simulator.emulation` for the contract)."""

    DECLARATION = CloudDeclaration
    CHANGE = CloudChange

    def instances(self, declaration: CloudDeclaration) -> Collection[str]:
        return declaration.instance_ids()

    def check_change(self, declaration: CloudDeclaration, change: CloudChange) -> None:
        subnets = {s.id for s in declaration.subnets}
        for sid in change.subnets:
            if sid not in subnets:
                raise FieldError(f"subnets.{sid}", f"unknown subnet {sid!r}")
        instances = declaration.instance_ids()
        for iid in change.instances:
            if iid not in instances:
                raise FieldError(f"instances.{iid}", f"unknown instance {iid!r}")

    def open(
        self,
        declaration: CloudDeclaration,
        *,
        clock: Clock,
        metrics: ApiObserver,
        records: NodeRecords,
        path: str,
    ) -> SimEmulation:
        cloud = build_cloud(declaration, clock, path=path)
        return SimEmulation(cloud, SimProvider(cloud, clock=clock, metrics=metrics))


EMULATOR = SimEmulator()
