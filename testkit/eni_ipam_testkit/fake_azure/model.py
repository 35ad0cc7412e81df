"""The fake ARM's records: what one subscription holds, and the rules of a subnet's addresses.

Role: plain data for the other modules. A record holds its ARM resource ``id`` as written when it
was created (ARM keeps the case it was given); lookups go through :func:`key`, the id folded to
lower case without a trailing slash, because ARM's ids are case-insensitive.

Invariants:

* a :class:`Subnet`'s ``used`` maps every address in use to its owner (the IP configuration's id):
  an address has at most one owner, and every :class:`IpConfig` holds an address its subnet's
  ``used`` lists;
* a subnet hands out only its hosts minus Azure's reserves (:data:`RESERVED_PER_SUBNET`: the network
  address, the gateway, two for Azure DNS, the broadcast address), lowest free first;
* a :class:`Nic` has exactly one primary configuration (an update through the API also keeps it
  to :data:`MAX_IP_CONFIGURATIONS`, all in one subnet).

:class:`Refusal` is an ARM error answer raised from deep inside a handler; the transport turns it
into the answer.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Iterator
from typing import Any

Json = dict[str, Any]

DEFAULT_SUBSCRIPTION = "00000000-0000-4000-8000-000000000001"
BASE_URL = "https://management.azure.com"
MAX_IP_CONFIGURATIONS = 256
RESERVED_PER_SUBNET = 5
NETWORK_API = "2024-05-01"
COMPUTE_API = "2024-07-01"


def key(resource_id: str) -> str:
    """The resource id as a lookup key: ARM's ids are case-insensitive."""
    return resource_id.strip().rstrip("/").lower()


class Refusal(Exception):
    """An ARM error answer, raised from deep inside a handler."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


@dataclasses.dataclass
class IpConfig:
    name: str
    subnet_id: str
    address: str
    primary: bool
    groups: tuple[str, ...] = ()


@dataclasses.dataclass
class Nic:
    id: str
    name: str
    location: str
    configs: list[IpConfig]
    etag: str
    tags: dict[str, str] = dataclasses.field(default_factory=dict)
    vm_id: str = ""
    primary: bool = True
    state: str = "Succeeded"
    """``provisioningState``."""
    hidden_reads: int = 0
    """Reads still to answer without the secondary configurations' addresses."""
    mac: str = ""
    """The MAC address as ARM writes it (``00-0D-3A-00-00-01``); answered while the NIC is a VM's."""


@dataclasses.dataclass
class Vm:
    id: str
    name: str
    location: str
    size: str
    running: bool
    nics: list[tuple[str, bool, str]]
    """(NIC id, primary, deleteOption) in the VM's order."""


@dataclasses.dataclass
class ScaleSetVm:
    id: str
    index: str
    scale_set: ScaleSet
    running: bool
    etag: str
    nics: list[Nic]
    state: str = "Succeeded"
    """``provisioningState``."""


@dataclasses.dataclass
class ScaleSet:
    id: str
    name: str
    location: str
    size: str
    vms: dict[str, ScaleSetVm] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Subnet:
    id: str
    name: str
    network: ipaddress.IPv4Network
    used: dict[str, str] = dataclasses.field(default_factory=dict)
    """Address → owner (the IP configuration's id)."""

    @property
    def limit(self) -> int:
        return self.network.num_addresses - RESERVED_PER_SUBNET

    def free(self) -> int:
        return self.limit - len(self.used)

    def hosts(self) -> Iterator[str]:
        first = int(self.network.network_address) + 4  # .0 network, .1 gateway, .2/.3 Azure DNS
        last = int(self.network.broadcast_address)  # broadcast, reserved
        for value in range(first, last):
            yield str(ipaddress.IPv4Address(value))

    def allocate(self, owner: str) -> str | None:
        """Dynamic allocation: the lowest free address, now ``owner``'s (``None``: the subnet is full)."""
        for address in self.hosts():
            if address not in self.used:
                self.used[address] = owner
                return address
        return None


@dataclasses.dataclass
class Vnet:
    id: str
    name: str
    location: str
    prefixes: list[str]
    subnets: dict[str, Subnet] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Asg:
    id: str
    name: str
    location: str
    tags: dict[str, str]
