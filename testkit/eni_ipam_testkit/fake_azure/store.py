"""The fake ARM's resource store: one subscription's resources, built by the test, read by the handlers.

Role: :class:`Store` holds resource groups, virtual networks and their subnets, application security
groups, NICs, VMs and scale sets (the records of :mod:`~eni_ipam_testkit.fake_azure.model`), and
answers three kinds of callers:

* the test building the world (``add_*``) before the provider starts;
* the test playing another writer behind the provider's back (:meth:`~Store.add_ip_configuration`,
  :meth:`~Store.set_primary`, :meth:`~Store.set_tags`, :meth:`~Store.set_running`);
* the test inspecting the world (:meth:`~Store.secondary_addresses`, :meth:`~Store.free_addresses`,
  ...), and the handlers looking resources up, refusing as ARM does (``404`` with ARM's codes) when
  one is not there.

Invariants:

* the dictionaries are keyed by :func:`~eni_ipam_testkit.fake_azure.model.key`; a scale-set VM's NICs
  live in the VM (not in ``_nics``, which holds the standalone NICs), so NIC lookups search both;
* every change to a NIC gives it a new ETag (:meth:`~Store._touch`), and a scale-set VM's NIC change
  gives its VM a new one too: ETags, operation ids and generated names share one counter, so a test
  sees the same values on every run;
* an address is taken from its subnet when a configuration is made and given back when it goes.
"""

from __future__ import annotations

import ipaddress
import itertools
import re
from collections.abc import Mapping, Sequence

from eni_ipam_testkit.fake_azure import configurations, documents
from eni_ipam_testkit.fake_azure.model import (
    Asg,
    IpConfig,
    Json,
    Nic,
    Refusal,
    ScaleSet,
    ScaleSetVm,
    Subnet,
    Vm,
    Vnet,
    key,
)
from eni_ipam_testkit.fake_azure.wire import Answer, Request, page


class Store:
    """One subscription's resources, and where and how they are served."""

    def __init__(self, *, subscription_id: str, location: str, page_size: int, base_url: str) -> None:
        self.subscription_id = subscription_id
        self.location = location
        self.page_size = page_size
        self.base_url = base_url.rstrip("/")
        self._groups: dict[str, str] = {}
        self._vnets: dict[str, Vnet] = {}
        self._subnets: dict[str, Subnet] = {}
        self._asgs: dict[str, Asg] = {}
        self._nics: dict[str, Nic] = {}
        self._vms: dict[str, Vm] = {}
        self._scale_sets: dict[str, ScaleSet] = {}
        self._counter = itertools.count(1)
        self._macs = itertools.count(1)  # apart from the ETags' counter, so those stay as they were

    # -- building the world ------------------------------------------------------------------------

    def _rg_prefix(self, rg: str) -> str:
        if rg.lower() not in self._groups:
            raise KeyError(f"no resource group {rg!r}: add_resource_group first")
        return f"/subscriptions/{self.subscription_id}/resourceGroups/{self._groups[rg.lower()]}"

    def _mac(self) -> str:
        """A MAC address of Azure's own block (``00-0D-3A``), as ARM writes one, unique in the store."""
        n = next(self._macs)
        return f"00-0D-3A-{n >> 16 & 0xFF:02X}-{n >> 8 & 0xFF:02X}-{n & 0xFF:02X}"

    def _etag(self, weak: bool = True) -> str:
        n = next(self._counter)
        return f'W/"{n:08d}-0000-4000-8000-{n:012d}"' if weak else f'"{n}"'

    def add_resource_group(self, name: str) -> str:
        self._groups[name.lower()] = name
        return f"/subscriptions/{self.subscription_id}/resourceGroups/{name}"

    def add_vnet(self, rg: str, name: str, cidr: str) -> str:
        vid = f"{self._rg_prefix(rg)}/providers/Microsoft.Network/virtualNetworks/{name}"
        self._vnets[key(vid)] = Vnet(vid, name, self.location, [cidr])
        return vid

    def add_subnet(self, vnet_id: str, name: str, cidr: str) -> str:
        vnet = self._vnets[key(vnet_id)]
        sid = f"{vnet.id}/subnets/{name}"
        subnet = Subnet(sid, name, ipaddress.IPv4Network(cidr))
        vnet.subnets[key(sid)] = subnet
        self._subnets[key(sid)] = subnet
        return sid

    def add_asg(self, rg: str, name: str, tags: Mapping[str, str] | None = None) -> str:
        aid = f"{self._rg_prefix(rg)}/providers/Microsoft.Network/applicationSecurityGroups/{name}"
        self._asgs[key(aid)] = Asg(aid, name, self.location, dict(tags or {}))
        return aid

    def add_nic(
        self,
        rg: str,
        name: str,
        subnet_id: str,
        *,
        asgs: Sequence[str] = (),
        tags: Mapping[str, str] | None = None,
    ) -> str:
        """A detached NIC with its primary configuration ``ipconfig1`` (a dynamic address)."""
        nid = f"{self._rg_prefix(rg)}/providers/Microsoft.Network/networkInterfaces/{name}"
        nic = Nic(nid, name, self.location, [], self._etag(), dict(tags or {}), mac=self._mac())
        nic.configs.append(self._new_config(nic, "ipconfig1", subnet_id, primary=True, groups=tuple(asgs)))
        self._nics[key(nid)] = nic
        return nid

    def add_vm(
        self,
        rg: str,
        name: str,
        size: str,
        nics: Sequence[str],
        *,
        running: bool = True,
        delete_option: str = "Delete",
        primary: int = 0,
    ) -> str:
        """A VM with ``nics`` attached in that order, ``nics[primary]`` the primary one."""
        vid = f"{self._rg_prefix(rg)}/providers/Microsoft.Compute/virtualMachines/{name}"
        refs = []
        for i, nic_id in enumerate(nics):
            nic = self._nics[key(nic_id)]
            nic.vm_id, nic.primary = vid, i == primary
            nic.etag = self._etag()
            refs.append((nic.id, i == primary, delete_option))
        self._vms[key(vid)] = Vm(vid, name, self.location, size, running, refs)
        return vid

    def reference_nic(self, vm_id: str, nic_id: str, *, delete_option: str = "Delete") -> None:
        """Make a VM list ``nic_id`` as one more (secondary) NIC, whether or not the fake holds it
        (a NIC id of another subscription, as a hand-edited VM could carry)."""
        self._vms[key(vm_id)].nics.append((nic_id, False, delete_option))

    def add_scale_set(self, rg: str, name: str, size: str) -> str:
        sid = f"{self._rg_prefix(rg)}/providers/Microsoft.Compute/virtualMachineScaleSets/{name}"
        self._scale_sets[key(sid)] = ScaleSet(sid, name, self.location, size)
        return sid

    def add_scale_set_vm(
        self,
        scale_set_id: str,
        subnet_id: str,
        *,
        asgs: Sequence[str] = (),
        nic_names: Sequence[str] = ("nic",),
        running: bool = True,
    ) -> str:
        """A VM of the scale set with one NIC per name (the first primary), each with ``ipconfig1``."""
        ss = self._scale_sets[key(scale_set_id)]
        index = str(len(ss.vms))
        vid = f"{ss.id}/virtualMachines/{index}"
        vm = ScaleSetVm(vid, index, ss, running, self._etag(weak=False), [])
        for i, nic_name in enumerate(nic_names):
            nid = f"{vid}/networkInterfaces/{nic_name}"
            nic = Nic(
                nid, nic_name, self.location, [], self._etag(), vm_id=vid, primary=i == 0, mac=self._mac()
            )
            nic.configs.append(
                self._new_config(nic, "ipconfig1", subnet_id, primary=True, groups=tuple(asgs))
            )
            vm.nics.append(nic)
        ss.vms[index] = vm
        return vid

    def _new_config(
        self, nic: Nic, name: str, subnet_id: str, *, primary: bool, groups: tuple[str, ...] = ()
    ) -> IpConfig:
        subnet = self._subnets[key(subnet_id)]
        address = subnet.allocate(f"{nic.id}/ipConfigurations/{name}")
        if address is None:
            raise Refusal(400, "SubnetIsFull", f"Subnet {subnet.id} is already full.")
        return IpConfig(name, subnet.id, address, primary, groups)

    # -- other writers, behind the provider's back -------------------------------------------------

    def add_ip_configuration(self, nic_id: str, name: str | None = None) -> str:
        """Another writer adds a secondary configuration to a NIC (its ETag changes); its address."""
        nic = self._nic(nic_id)
        config = self._new_config(
            nic, name or f"other-{next(self._counter)}", nic.configs[0].subnet_id, primary=False
        )
        nic.configs.append(config)
        self._touch(nic)
        return config.address

    def set_primary(self, nic_id: str, name: str) -> None:
        """Another writer makes the configuration ``name`` the NIC's primary one (its ETag changes)."""
        nic = self._nic(nic_id)
        if not any(c.name.lower() == name.lower() for c in nic.configs):
            raise KeyError(name)
        for config in nic.configs:
            config.primary = config.name.lower() == name.lower()
        self._touch(nic)

    def set_tags(self, resource_id: str, tags: Mapping[str, str]) -> None:
        nic = self._nic(resource_id)
        nic.tags = dict(tags)
        self._touch(nic)

    def set_running(self, vm_id: str, running: bool) -> None:
        vm = self._vms.get(key(vm_id))
        if vm is not None:
            vm.running = running
        else:
            self._scale_set_vm(vm_id).running = running

    def _configure(self, nic: Nic, wanted: Sequence[Json]) -> None:
        """Make ``wanted`` (ARM IP configurations) the NIC's configurations, all or nothing, and give it
        a new ETag (:func:`~eni_ipam_testkit.fake_azure.configurations.apply` says what is refused)."""
        configurations.apply(nic, wanted, self._subnets)
        self._touch(nic)

    def _touch(self, nic: Nic) -> None:
        nic.etag = self._etag()
        if nic.vm_id and (vm := self._find_scale_set_vm(nic.vm_id)) is not None:
            vm.etag = self._etag(weak=False)

    # -- inspecting the world ----------------------------------------------------------------------

    def _nic(self, nic_id: str) -> Nic:
        found = self._find_nic(nic_id)
        if found is None:
            raise KeyError(nic_id)
        return found

    def _find_nic(self, nic_id: str) -> Nic | None:
        wanted = key(nic_id)
        if wanted in self._nics:
            return self._nics[wanted]
        for ss in self._scale_sets.values():
            for vm in ss.vms.values():
                for nic in vm.nics:
                    if key(nic.id) == wanted:
                        return nic
        return None

    def _find_scale_set_vm(self, vm_id: str) -> ScaleSetVm | None:
        wanted = key(vm_id)
        for ss in self._scale_sets.values():
            for vm in ss.vms.values():
                if key(vm.id) == wanted:
                    return vm
        return None

    def _scale_set_vm(self, vm_id: str) -> ScaleSetVm:
        found = self._find_scale_set_vm(vm_id)
        if found is None:
            raise KeyError(vm_id)
        return found

    def nic_document(self, nic_id: str) -> Json:
        """The NIC as ``GET`` returns it."""
        return documents.nic(self._nic(nic_id))

    def secondary_addresses(self, nic_id: str) -> list[str]:
        """The NIC's secondary addresses, in numeric order."""
        nic = self._nic(nic_id)
        return sorted(
            (c.address for c in nic.configs if not c.primary), key=lambda a: int(ipaddress.IPv4Address(a))
        )

    def configuration_names(self, nic_id: str) -> list[str]:
        return [c.name for c in self._nic(nic_id).configs]

    def free_addresses(self, subnet_id: str) -> int:
        return self._subnets[key(subnet_id)].free()

    def nic_exists(self, nic_id: str) -> bool:
        return self._find_nic(nic_id) is not None

    # -- what the handlers look up -----------------------------------------------------------------

    def _group(self, m: re.Match[str]) -> str:
        if m["rg"] not in self._groups:
            raise Refusal(404, "ResourceGroupNotFound", f"Resource group '{m['rg']}' could not be found.")
        return m["rg"]

    def _in_group(self, resource_id: str, rg: str) -> bool:
        return f"/resourcegroups/{rg}/" in key(resource_id)

    def _nic_or_404(self, nic_id: str) -> Nic:
        nic = self._find_nic(nic_id)
        if nic is None:
            kind = "Microsoft.Network/networkInterfaces"
            raise Refusal(
                404, "ResourceNotFound", f"The Resource '{kind}/{nic_id.rsplit('/', 1)[-1]}' was not found."
            )
        return nic

    def _scale_set_or_404(self, m: re.Match[str]) -> ScaleSet:
        self._group(m)
        for ss in self._scale_sets.values():
            if key(ss.id).endswith(f"/virtualmachinescalesets/{m['ss']}") and self._in_group(ss.id, m["rg"]):
                return ss
        raise Refusal(
            404,
            "ResourceNotFound",
            f"The Resource 'Microsoft.Compute/virtualMachineScaleSets/{m['ss']}' was not found.",
        )

    def _scale_set_vm_or_404(self, m: re.Match[str]) -> ScaleSetVm:
        ss = self._scale_set_or_404(m)
        vm = ss.vms.get(m["index"])
        if vm is None:
            raise Refusal(404, "NotFound", f"The entity was not found in this Azure location: {m['index']}.")
        return vm

    def _vnet_or_404(self, vnet_id: str) -> Vnet:
        vnet = self._vnets.get(key(vnet_id))
        if vnet is None:
            raise Refusal(404, "ResourceNotFound", f"The Resource '{vnet_id}' was not found.")
        return vnet

    def _page(self, items: list[Json], req: Request) -> Answer:
        return page(items, req, self.page_size, self.base_url)
