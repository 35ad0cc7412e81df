"""The allocator's vocabulary: address families, pool members and allocations (immutable data)."""

from __future__ import annotations

import dataclasses
import enum
import ipaddress

DEFAULT_POOL = "default"
"""The pool fed from the node's ENIPool (the addresses the reconciler put on the node's interfaces)."""


class Family(enum.StrEnum):
    IPV4 = "ipv4"
    IPV6 = "ipv6"

    @classmethod
    def of(cls, address: str) -> Family:
        """The family of ``address`` (raises ValueError for something that is not an address)."""
        return cls.IPV6 if ipaddress.ip_address(address).version == 6 else cls.IPV4


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class PoolAddress:
    """One address a pool may hand out, with what a workload needs to use it."""

    address: str
    prefix_length: int
    """Of the subnet the address lives in (a pod's address is configured with it)."""
    gateway: str
    """The subnet's router (in a VPC: the subnet's base address + 1)."""
    interface_id: str = ""
    subnet_id: str = ""

    @property
    def family(self) -> Family:
        return Family.of(self.address)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Allocation:
    """An address handed to an owner (a container id, ``claim:<ns>/<name>``, a libnetwork endpoint)."""

    address: str
    pool: str
    owner: str
    prefix_length: int
    gateway: str
    interface_id: str = ""
    subnet_id: str = ""
    expiration_uuid: str = ""
    """Set while an expiration timer runs (allocate-with-expiration); empty otherwise."""
    network: str = ""
    """The CNI network configuration's name the address was added for (``GC`` is per network)."""
    netns: str = ""
    """The network namespace the runtime named at ADD (the sweep: gone namespace, gone owner)."""
    pod_uid: str = ""
    """The Kubernetes pod the runtime named at ADD (``K8S_POD_UID``): gone pod, gone owner."""
    pod: str = ""
    """``namespace/name`` of that pod, for people reading logs and the status."""

    @property
    def family(self) -> Family:
        return Family.of(self.address)

    def attachment(self) -> Attachment:
        return Attachment(network=self.network, netns=self.netns, pod_uid=self.pod_uid, pod=self.pod)

    def with_attachment(self, attachment: Attachment) -> Allocation:
        return dataclasses.replace(
            self,
            network=attachment.network,
            netns=attachment.netns,
            pod_uid=attachment.pod_uid,
            pod=attachment.pod,
        )


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Attachment:
    """What the runtime said about the container an allocation is for (all optional)."""

    network: str = ""
    netns: str = ""
    pod_uid: str = ""
    pod: str = ""

    def fields(self) -> dict[str, str]:
        return {"network": self.network, "netns": self.netns, "pod_uid": self.pod_uid, "pod": self.pod}


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class RuntimeEntry:
    """One address the container runtime says is in use: by whom, and what it said of the container."""

    owner: str
    attachment: Attachment = Attachment()
    pool: str = ""
    """The pool the owner's addresses come from, when the runtime knows it (a libnetwork pool's);
    empty: the first pool listing the address."""
    alive: bool | None = None
    """Whether the owner is proven alive (True: a Docker endpoint, a libcni entry whose namespace or
    container exists) or gone (False); None: nothing could tell."""
