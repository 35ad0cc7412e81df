"""The fake ARM's documents: each record as the JSON ARM answers for it.

Role: pure functions from the records of :mod:`~eni_ipam_testkit.fake_azure.model` to the bodies
the handlers answer with, in ARM's shapes: the fields the SDK's deserializers and the provider
read, and enough of the others to look like ARM.

Invariants: a document is built afresh on every call (the handlers may hand it out and forget it),
and building one changes nothing: what a read changes (moving an operation on, a delayed address)
is the handlers' business. A NIC's configurations each carry the NIC's ETag, as ARM's do; a
scale-set VM's model (``networkProfileConfiguration``) is derived from its NICs, never stored apart.
"""

from __future__ import annotations

from eni_ipam_testkit.fake_azure.model import Asg, Json, Nic, ScaleSet, ScaleSetVm, Subnet, Vm, Vnet


def nic(nic: Nic, *, state: str = "", hide_addresses: bool = False) -> Json:
    state = state or nic.state
    configs = []
    for c in nic.configs:
        properties: Json = {
            "provisioningState": state,
            **({} if hide_addresses and not c.primary else {"privateIPAddress": c.address}),
            "privateIPAllocationMethod": "Dynamic",
            "subnet": {"id": c.subnet_id},
            "primary": c.primary,
            "privateIPAddressVersion": "IPv4",
        }
        if c.groups:
            properties["applicationSecurityGroups"] = [{"id": g} for g in c.groups]
        configs.append(
            {
                "name": c.name,
                "id": f"{nic.id}/ipConfigurations/{c.name}",
                "etag": nic.etag,
                "type": "Microsoft.Network/networkInterfaces/ipConfigurations",
                "properties": properties,
            }
        )
    document: Json = {
        "name": nic.name,
        "id": nic.id,
        "etag": nic.etag,
        "type": "Microsoft.Network/networkInterfaces",
        "location": nic.location,
        "properties": {
            "provisioningState": state,
            "resourceGuid": "00000000-0000-0000-0000-000000000000",
            "ipConfigurations": configs,
            "dnsSettings": {"dnsServers": [], "appliedDnsServers": []},
            "enableAcceleratedNetworking": True,
            "enableIPForwarding": False,
            "nicType": "Standard",
        },
    }
    if nic.tags:
        document["tags"] = dict(nic.tags)
    if nic.vm_id:
        document["properties"]["virtualMachine"] = {"id": nic.vm_id}
        document["properties"]["primary"] = nic.primary
        # ARM reports a MAC address once the NIC is in a VM (none for a NIC never attached).
        if nic.mac:
            document["properties"]["macAddress"] = nic.mac
    return document


def statuses(running: bool) -> Json:
    power = "PowerState/running" if running else "PowerState/deallocated"
    return {
        "statuses": [
            {"code": "ProvisioningState/succeeded", "level": "Info"},
            {"code": power, "level": "Info"},
        ]
    }


def vm(vm: Vm, view: bool) -> Json:
    properties: Json = {
        "vmId": "00000000-0000-0000-0000-000000000000",
        "hardwareProfile": {"vmSize": vm.size},
        "provisioningState": "Succeeded",
        "networkProfile": {
            "networkInterfaces": [
                {"id": nic_id, "properties": {"primary": primary, "deleteOption": delete}}
                for nic_id, primary, delete in vm.nics
            ]
        },
    }
    if view:
        properties["instanceView"] = statuses(vm.running)
    return {
        "name": vm.name,
        "id": vm.id,
        "type": "Microsoft.Compute/virtualMachines",
        "location": vm.location,
        "properties": properties,
    }


def scale_set_vm(vm: ScaleSetVm, view: bool, *, state: str = "") -> Json:
    model = [
        {
            "name": nic.name,
            "properties": {
                "primary": nic.primary,
                "enableAcceleratedNetworking": True,
                "ipConfigurations": [
                    {
                        "name": c.name,
                        "properties": {
                            "subnet": {"id": c.subnet_id},
                            "primary": c.primary,
                            "privateIPAddressVersion": "IPv4",
                            **(
                                {"applicationSecurityGroups": [{"id": g} for g in c.groups]}
                                if c.groups
                                else {}
                            ),
                        },
                    }
                    for c in nic.configs
                ],
            },
        }
        for nic in vm.nics
    ]
    properties: Json = {
        "latestModelApplied": True,
        "vmId": "00000000-0000-0000-0000-000000000000",
        "provisioningState": state or vm.state,
        "storageProfile": {
            "imageReference": {
                "publisher": "Canonical",
                "offer": "ubuntu-24_04-lts",
                "sku": "server",
                "version": "latest",
            },
            "osDisk": {"osType": "Linux", "createOption": "FromImage"},
        },
        "networkProfile": {"networkInterfaces": [{"id": nic.id} for nic in vm.nics]},
        "networkProfileConfiguration": {"networkInterfaceConfigurations": model},
    }
    if view:
        properties["instanceView"] = statuses(vm.running)
    return {
        "name": f"{vm.scale_set.name}_{vm.index}",
        "id": vm.id,
        "type": "Microsoft.Compute/virtualMachineScaleSets/virtualMachines",
        "location": vm.scale_set.location,
        "instanceId": vm.index,
        "etag": vm.etag,
        "sku": {"name": vm.scale_set.size, "tier": "Standard"},
        "properties": properties,
    }


def vnet(vnet: Vnet) -> Json:
    subnets = [
        {
            "name": s.name,
            "id": s.id,
            "etag": 'W/"1"',
            "type": "Microsoft.Network/virtualNetworks/subnets",
            "properties": {"provisioningState": "Succeeded", "addressPrefix": str(s.network)},
        }
        for s in vnet.subnets.values()
    ]
    return {
        "name": vnet.name,
        "id": vnet.id,
        "etag": 'W/"1"',
        "type": "Microsoft.Network/virtualNetworks",
        "location": vnet.location,
        "properties": {
            "provisioningState": "Succeeded",
            "addressSpace": {"addressPrefixes": vnet.prefixes},
            "subnets": subnets,
        },
    }


def usage(subnet: Subnet) -> Json:
    """A subnet's row of ``virtualNetworks/usages``: its size minus Azure's reserves, and what is used."""
    return {
        "currentValue": float(len(subnet.used)),
        "id": subnet.id,
        "limit": float(subnet.limit),
        "name": {"localizedValue": "Subnet size and usage", "value": "Subnet size and usage"},
        "unit": "Count",
    }


def asg(asg: Asg) -> Json:
    return {
        "name": asg.name,
        "id": asg.id,
        "location": asg.location,
        "tags": asg.tags,
        "etag": 'W/"1"',
        "type": "Microsoft.Network/applicationSecurityGroups",
        "properties": {
            "provisioningState": "Succeeded",
            "resourceGuid": "00000000-0000-0000-0000-000000000000",
        },
    }


def scale_set(scale_set: ScaleSet) -> Json:
    return {
        "name": scale_set.name,
        "id": scale_set.id,
        "location": scale_set.location,
        "type": "Microsoft.Compute/virtualMachineScaleSets",
        "sku": {"name": scale_set.size, "tier": "Standard", "capacity": len(scale_set.vms)},
        "properties": {"orchestrationMode": "Uniform", "provisioningState": "Succeeded"},
    }
