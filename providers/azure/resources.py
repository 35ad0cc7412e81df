"""ARM JSON → :mod:`eni_ipam.core.model`: pure functions over the documents the SDK returns.

The provider works on raw ARM JSON (the SDK's models are mappings over it), so what it reads is
exactly the documented REST shape, and what it writes back (a NIC, a scale-set VM) carries every
field it did not touch. The mapping:

* **Instance**: id = the VM's ARM id, normalized (:mod:`providers.azure.ids`); type = the VM size;
  zone = the region (Azure subnets span a region's zones, so zones never separate a VM from a
  subnet); vpc_id = the virtual network of the primary NIC's subnet; running iff the instance view
  says ``PowerState/running``.
* **Interface**: the VM's primary NIC (flag ``primary``, or the only one) at device index 0, the
  others at 1..n in the order the VM lists them; primary_ip = the primary IP configuration's
  address; addresses = the other IPv4 configurations' addresses, in numeric order (a configuration
  still being allocated, with no address yet, is left out); no prefixes; security_groups = the
  application security groups of the primary configuration; tags = the NIC's tags;
  delete_on_termination = the VM's ``deleteOption: Delete`` for that NIC (a Uniform scale set's NICs
  always go with their VM); the MAC address = the NIC's ``macAddress`` (ARM writes
  ``00-0D-3A-1B-2C-3D``; normalised, and dropped with a warning when it is no device's: ARM gives
  one only once the VM has started); the network card = 0 (Azure has no network cards).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from eni_ipam.core.devices import reported
from eni_ipam.core.model import DETACHED_INDEX, Instance, Interface, Subnet, address_key, frozen_tags
from providers.azure import ids

Json = Mapping[str, Any]


def props(document: Json | None) -> Json:
    """The ``properties`` object of an ARM document (``{}`` when absent)."""
    value = (document or {}).get("properties")
    return value if isinstance(value, Mapping) else {}


def ip_configurations(nic: Json) -> list[Json]:
    return [c for c in props(nic).get("ipConfigurations") or () if isinstance(c, Mapping)]


def is_primary_config(config: Json, configs: Sequence[Json]) -> bool:
    flag = props(config).get("primary")
    return bool(flag) or (flag is None and len(configs) == 1)


def primary_config(configs: Sequence[Json]) -> Json | None:
    return next((c for c in configs if is_primary_config(c, configs)), configs[0] if configs else None)


def config_address(config: Json) -> str:
    return str(props(config).get("privateIPAddress") or "")


def config_subnet(config: Json) -> str:
    subnet = props(config).get("subnet") or {}
    return ids.normalize(str(subnet.get("id", ""))) if isinstance(subnet, Mapping) else ""


def config_groups(config: Json) -> tuple[str, ...]:
    groups = props(config).get("applicationSecurityGroups") or ()
    return tuple(
        sorted(ids.normalize(str(g["id"])) for g in groups if isinstance(g, Mapping) and g.get("id"))
    )


def is_ipv4(config: Json) -> bool:
    return str(props(config).get("privateIPAddressVersion") or "IPv4").lower() == "ipv4"


def secondary_configs(nic: Json) -> list[Json]:
    """The IPv4 configurations other than the primary."""
    configs = ip_configurations(nic)
    primary = primary_config(configs)
    return [c for c in configs if c is not primary and is_ipv4(c)]


def attached_vm(nic: Json) -> str:
    """The normalized id of the VM the NIC is attached to (``""`` when detached)."""
    vm = props(nic).get("virtualMachine") or {}
    return ids.normalize(str(vm.get("id", ""))) if isinstance(vm, Mapping) else ""


def interface(
    nic: Json,
    *,
    device_index: int = DETACHED_INDEX,
    instance_id: str = "",
    delete_on_termination: bool = False,
) -> Interface:
    configs = ip_configurations(nic)
    primary = primary_config(configs)
    secondaries = [config_address(c) for c in secondary_configs(nic) if config_address(c)]
    nic_id = ids.normalize(str(nic.get("id", "")))
    return Interface(
        id=nic_id,
        device_index=device_index,
        subnet_id=config_subnet(primary) if primary else "",
        primary_ip=config_address(primary) if primary else "",
        addresses=tuple(sorted(secondaries, key=address_key)),
        security_groups=config_groups(primary) if primary else (),
        tags=frozen_tags({str(k): str(v) for k, v in (nic.get("tags") or {}).items()}),
        instance_id=instance_id,
        delete_on_termination=delete_on_termination,
        link=reported(props(nic).get("macAddress"), 0, interface_id=nic_id),
    )


@dataclasses.dataclass(frozen=True, slots=True)
class NicSlot:
    """One NIC as a VM lists it."""

    nic_id: str
    primary: bool | None
    delete_on_termination: bool


def nic_slots(vm: Json) -> list[NicSlot]:
    """The VM's NICs in the order it lists them."""
    network = props(vm).get("networkProfile") or {}
    slots = []
    for ref in network.get("networkInterfaces") or ():
        if not isinstance(ref, Mapping) or not ref.get("id"):
            continue
        p = props(ref)
        primary = p.get("primary")
        slots.append(
            NicSlot(
                nic_id=ids.normalize(str(ref["id"])),
                primary=None if primary is None else bool(primary),
                delete_on_termination=str(p.get("deleteOption", "")).lower() == "delete",
            )
        )
    return slots


def device_order(slots: Sequence[NicSlot], nics: Mapping[str, Json]) -> list[tuple[int, NicSlot]]:
    """``(device index, slot)``: the primary NIC at 0, the others from 1 in the VM's order.

    The VM's own ``primary`` flag decides; when the VM does not say, the NIC's ``primary`` property;
    when nothing says, a lone NIC is the primary, and otherwise the first one listed.
    """
    if not slots:
        return []

    def flagged(slot: NicSlot) -> bool:
        if slot.primary is not None:
            return slot.primary
        return bool(props(nics.get(slot.nic_id)).get("primary"))

    primary = next((s for s in slots if flagged(s)), slots[0])
    others = [s for s in slots if s is not primary]
    return [(0, primary), *((i, s) for i, s in enumerate(others, start=1))]


def vm_size(vm: Json) -> str:
    hardware = props(vm).get("hardwareProfile") or {}
    size = hardware.get("vmSize") if isinstance(hardware, Mapping) else None
    if not size:
        sku = vm.get("sku") or {}
        size = sku.get("name") if isinstance(sku, Mapping) else None
    return str(size or "")


def running(vm: Json) -> bool:
    """``PowerState/running`` in the instance view (a VM read without one counts as not running)."""
    view = props(vm).get("instanceView") or {}
    statuses = view.get("statuses") if isinstance(view, Mapping) else None
    return any(
        isinstance(s, Mapping) and str(s.get("code", "")).lower() == "powerstate/running"
        for s in statuses or ()
    )


def instance(
    vm: Json, nics: Mapping[str, Json], *, scale_set_nic_ids: Iterable[str] = (), location: str = ""
) -> Instance:
    """An :class:`Instance` from a VM document and its NICs (by normalized id; missing ones are
    skipped). ``scale_set_nic_ids``: NICs of a Uniform scale set, always deleted with their VM."""
    vm_id = ids.normalize(str(vm.get("id", "")))
    in_scale_set = set(scale_set_nic_ids)
    slots = nic_slots(vm)
    if not slots and in_scale_set:  # a scale-set VM read without its network profile
        slots = [NicSlot(nic_id, None, True) for nic_id in sorted(in_scale_set)]
    interfaces = []
    for index, slot in device_order(slots, nics):
        nic = nics.get(slot.nic_id)
        if nic is None:
            continue
        interfaces.append(
            interface(
                nic,
                device_index=index,
                instance_id=vm_id,
                delete_on_termination=slot.delete_on_termination or slot.nic_id in in_scale_set,
            )
        )
    primary = next((i for i in interfaces if i.device_index == 0), None)
    subnet_id = primary.subnet_id if primary else ""
    return Instance(
        id=vm_id,
        type=vm_size(vm),
        vpc_id=ids.vnet_of_subnet(subnet_id),
        zone=str(vm.get("location") or location).lower(),
        subnet_id=subnet_id,
        interfaces=tuple(interfaces),
        running=running(vm),
    )


def subnets(vnet: Json, usage: Iterable[Json]) -> dict[str, Subnet]:
    """The VNet's subnets with their free addresses (``limit - currentValue`` of the usage list,
    which already excludes Azure's five reserved addresses per subnet)."""
    free: dict[str, int] = {}
    for row in usage:
        rid = ids.normalize(str(row.get("id", "")))
        try:
            free[rid] = max(int(float(row.get("limit", 0))) - int(float(row.get("currentValue", 0))), 0)
        except (TypeError, ValueError):
            continue
    vnet_id = ids.normalize(str(vnet.get("id", "")))
    zone = str(vnet.get("location", "")).lower()
    out: dict[str, Subnet] = {}
    for entry in props(vnet).get("subnets") or ():
        if not isinstance(entry, Mapping) or not entry.get("id"):
            continue
        p = props(entry)
        prefixes = [p["addressPrefix"]] if p.get("addressPrefix") else list(p.get("addressPrefixes") or ())
        cidr = next((str(x) for x in prefixes if ":" not in str(x)), "")
        sid = ids.normalize(str(entry["id"]))
        out[sid] = Subnet(id=sid, vpc_id=vnet_id, zone=zone, cidr=cidr, available=free.get(sid, 0))
    return out
