"""Azure resource ids as eni-ipam uses them: normalized, parsed, compared case-insensitively.

Azure Resource Manager treats resource ids as case-insensitive (``resourceGroups`` and
``resourcegroups`` name the same group), and the same id comes back from different APIs in
different cases: the VM lists ``.../Microsoft.Network/networkInterfaces/Nic1``, the NIC says
``.../microsoft.network/networkinterfaces/nic1``. Every id eni-ipam reports is therefore the
lowercased ARM id with no trailing slash (:func:`normalize`), and ids are only ever compared in that
form. A Kubernetes ``providerID`` (``azure:///subscriptions/...``) carries exactly this path, which
the node source lowercases, so a node's instance id and the provider's instance id agree.

Lowercased names in request URLs are fine: ARM resolves resource names case-insensitively.

The parsers below accept exactly the id shapes the provider handles and return ``None`` for anything
else (an EC2 id, a malformed string, a resource of another type), which callers turn into "not
found" without a request.
"""

from __future__ import annotations

import dataclasses
import re

_SUB = r"^/subscriptions/(?P<sub>[^/]+)/resourcegroups/(?P<rg>[^/]+)/providers/"
_VM = re.compile(_SUB + r"microsoft\.compute/virtualmachines/(?P<name>[^/]+)$")
_SCALE_SET_VM = re.compile(
    _SUB + r"microsoft\.compute/virtualmachinescalesets/(?P<ss>[^/]+)/virtualmachines/(?P<index>[^/]+)$"
)
_NIC = re.compile(_SUB + r"microsoft\.network/networkinterfaces/(?P<name>[^/]+)$")
_SCALE_SET_NIC = re.compile(
    _SUB + r"microsoft\.compute/virtualmachinescalesets/(?P<ss>[^/]+)/virtualmachines/(?P<index>[^/]+)"
    r"/networkinterfaces/(?P<name>[^/]+)$"
)
_VNET = re.compile(_SUB + r"microsoft\.network/virtualnetworks/(?P<name>[^/]+)$")
_SUBNET = re.compile(_SUB + r"microsoft\.network/virtualnetworks/(?P<vnet>[^/]+)/subnets/(?P<name>[^/]+)$")


def normalize(resource_id: str) -> str:
    """The canonical form of an ARM resource id: lowercased, no trailing slash."""
    return resource_id.strip().rstrip("/").lower()


def same(a: str, b: str) -> bool:
    """True when two ARM ids name the same resource."""
    return normalize(a) == normalize(b)


@dataclasses.dataclass(frozen=True, slots=True)
class VmRef:
    """A standalone VM (or a VM of a scale set in Flexible orchestration, which is one)."""

    subscription: str
    resource_group: str
    name: str

    @property
    def id(self) -> str:
        return (
            f"/subscriptions/{self.subscription}/resourcegroups/{self.resource_group}"
            f"/providers/microsoft.compute/virtualmachines/{self.name}"
        )


@dataclasses.dataclass(frozen=True, slots=True)
class ScaleSetVmRef:
    """A VM of a scale set in Uniform orchestration; ``index`` is its instance id (``"3"``)."""

    subscription: str
    resource_group: str
    scale_set: str
    index: str

    @property
    def id(self) -> str:
        return (
            f"/subscriptions/{self.subscription}/resourcegroups/{self.resource_group}"
            f"/providers/microsoft.compute/virtualmachinescalesets/{self.scale_set}"
            f"/virtualmachines/{self.index}"
        )


@dataclasses.dataclass(frozen=True, slots=True)
class NicRef:
    """A NIC: a Microsoft.Network resource of its own, or (``scale_set`` set) one of a Uniform scale
    set's VMs, whose configuration lives in the VM's model and changes only through the VM."""

    subscription: str
    resource_group: str
    name: str
    scale_set: str = ""
    index: str = ""

    @property
    def in_scale_set(self) -> bool:
        return bool(self.scale_set)

    @property
    def vm(self) -> ScaleSetVmRef:
        """The scale-set VM owning this NIC (``in_scale_set`` only)."""
        return ScaleSetVmRef(self.subscription, self.resource_group, self.scale_set, self.index)

    @property
    def id(self) -> str:
        if self.scale_set:
            return f"{self.vm.id}/networkinterfaces/{self.name}"
        return (
            f"/subscriptions/{self.subscription}/resourcegroups/{self.resource_group}"
            f"/providers/microsoft.network/networkinterfaces/{self.name}"
        )


@dataclasses.dataclass(frozen=True, slots=True)
class VnetRef:
    subscription: str
    resource_group: str
    name: str

    @property
    def id(self) -> str:
        return (
            f"/subscriptions/{self.subscription}/resourcegroups/{self.resource_group}"
            f"/providers/microsoft.network/virtualnetworks/{self.name}"
        )


def parse_instance(resource_id: str) -> VmRef | ScaleSetVmRef | None:
    """A VM id (standalone or scale-set), or ``None`` for anything else."""
    rid = normalize(resource_id)
    if m := _VM.match(rid):
        return VmRef(m["sub"], m["rg"], m["name"])
    if m := _SCALE_SET_VM.match(rid):
        return ScaleSetVmRef(m["sub"], m["rg"], m["ss"], m["index"])
    return None


def parse_nic(resource_id: str) -> NicRef | None:
    """A NIC id (standalone or scale-set), or ``None`` for anything else."""
    rid = normalize(resource_id)
    if m := _NIC.match(rid):
        return NicRef(m["sub"], m["rg"], m["name"])
    if m := _SCALE_SET_NIC.match(rid):
        return NicRef(m["sub"], m["rg"], m["name"], scale_set=m["ss"], index=m["index"])
    return None


def parse_vnet(resource_id: str) -> VnetRef | None:
    """A virtual network id, or ``None``."""
    if m := _VNET.match(normalize(resource_id)):
        return VnetRef(m["sub"], m["rg"], m["name"])
    return None


def vnet_of_subnet(subnet_id: str) -> str:
    """The id of the virtual network a subnet id belongs to (``""`` if it is not a subnet id)."""
    rid = normalize(subnet_id)
    if _SUBNET.match(rid):
        return rid.rsplit("/subnets/", 1)[0]
    return ""
