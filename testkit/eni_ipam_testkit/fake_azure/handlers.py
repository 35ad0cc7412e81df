"""The fake ARM's handlers: the Network and Compute requests the Azure provider sends.

Role: :class:`Handlers` answers each request :mod:`~eni_ipam_testkit.fake_azure.routes` maps to one
of its methods, from the store, through the long-running operations and ETags of
:mod:`~eni_ipam_testkit.fake_azure.operations`: NICs (standalone and a scale set's: reads,
listings, updates, deletes), a virtual network and its subnets' usage, application security groups,
VMs (with their power state under ``$expand=instanceView``), Uniform scale sets and their VMs'
reads and model updates.

Invariants:

* a write runs the other writer's queued change
  (:meth:`~eni_ipam_testkit.fake_azure.faults.Faults.before_next_write`) just before it checks
  ``If-Match``, and changes configurations all or nothing
  (:mod:`~eni_ipam_testkit.fake_azure.configurations`);
* a NIC ``PUT`` updates a NIC the store holds (the fake creates none through the API) and answers
  ``200`` with the NIC ``Updating``; a NIC ``DELETE`` is refused ``400 NicInUse`` while a VM holds
  the NIC, and otherwise answers ``202`` and gives the NIC's addresses back to their subnet;
* a scale-set VM's model (``networkProfileConfiguration``) is its NICs' configurations, so updating
  the model is how a configuration is added to or taken from a scale-set NIC; Compute applies the
  model through Network asynchronously, so a refusal from Network (``SubnetIsFull``) is no error
  answer: the update is accepted (``200``), changes no configuration, and its operation ends
  ``Failed`` with that code;
* a ``GET`` of a NIC or a scale-set VM moves on the operations that changed it, and a NIC's may hide
  its secondary addresses (:meth:`~eni_ipam_testkit.fake_azure.faults.Faults.delay_addresses`);
  listings do neither.
"""

from __future__ import annotations

import re

from eni_ipam_testkit.fake_azure import documents
from eni_ipam_testkit.fake_azure.configurations import Snapshot
from eni_ipam_testkit.fake_azure.model import Json, Nic, Refusal, key
from eni_ipam_testkit.fake_azure.operations import Operations, check_if_match
from eni_ipam_testkit.fake_azure.wire import Answer, Request


class Handlers(Operations):
    """The handlers of the routes, over the store, its faults and its operations."""

    # -- Microsoft.Network -------------------------------------------------------------------------

    def _list_nics(self, m: re.Match[str], req: Request) -> Answer:
        rg = self._group(m)
        return self._page([documents.nic(n) for n in self._nics.values() if self._in_group(n.id, rg)], req)

    def _get_nic(self, m: re.Match[str], req: Request) -> Answer:
        self._group(m)
        return Answer(200, self._read_nic(self._nic_or_404(req.path)))

    def _read_nic(self, nic: Nic) -> Json:
        """The NIC as one ``GET`` of it answers (a read moves the operations that changed it on)."""
        self._progress(nic)
        hide = nic.hidden_reads > 0
        if hide:
            nic.hidden_reads -= 1
        return documents.nic(nic, hide_addresses=hide)

    def _put_nic(self, m: re.Match[str], req: Request) -> Answer:
        self._group(m)
        nic = self._find_nic(req.path)
        if nic is None or key(req.path) not in self._nics:
            raise NotImplementedError("the fake Azure does not create NICs through PUT")
        self._run_hooks(nic.id)
        check_if_match(req, nic.etag)
        wanted = ((req.body or {}).get("properties") or {}).get("ipConfigurations") or []
        lro, headers, apply = self._start_lro("NetworkInterfaces.CreateOrUpdate", "Network")
        if apply:
            before = Snapshot.take([nic], self._subnets)
            self._configure(nic, wanted)
            nic.tags = dict((req.body or {}).get("tags") or {})
            self._follow(lro, [nic], before)
        return Answer(200, documents.nic(nic, state="Updating"), headers)

    def _delete_nic(self, m: re.Match[str], req: Request) -> Answer:
        self._group(m)
        nic = self._nic_or_404(req.path)
        self._run_hooks(nic.id)
        if nic.vm_id:
            raise Refusal(
                400,
                "NicInUse",
                f"Network Interface {nic.id} is used by existing resource {nic.vm_id}. In order to delete "
                "the network interface, it must be dissociated from the resource.",
            )
        _, headers, apply = self._start_lro("NetworkInterfaces.Delete", "Network")
        # Network answers a delete with a Location too; the poller's final read follows it.
        headers["Location"] = headers["Azure-AsyncOperation"].replace("/operations/", "/operationResults/")
        if apply:
            for config in nic.configs:
                self._subnets[key(config.subnet_id)].used.pop(config.address, None)
            del self._nics[key(nic.id)]
        return Answer(202, None, headers)

    def _list_scale_set_nics(self, m: re.Match[str], req: Request) -> Answer:
        ss = self._scale_set_or_404(m)
        return self._page([documents.nic(n) for vm in ss.vms.values() for n in vm.nics], req)

    def _list_scale_set_vm_nics(self, m: re.Match[str], req: Request) -> Answer:
        vm = self._scale_set_vm_or_404(m)
        return self._page([documents.nic(n) for n in vm.nics], req)

    def _get_scale_set_nic(self, m: re.Match[str], req: Request) -> Answer:
        self._scale_set_vm_or_404(m)
        return Answer(200, self._read_nic(self._nic_or_404(req.path)))

    def _get_vnet(self, m: re.Match[str], req: Request) -> Answer:
        return Answer(200, documents.vnet(self._vnet_or_404(req.path)))

    def _vnet_usage(self, m: re.Match[str], req: Request) -> Answer:
        vnet = self._vnet_or_404(req.path.rsplit("/usages", 1)[0])
        return self._page([documents.usage(s) for s in vnet.subnets.values()], req)

    def _list_asgs(self, m: re.Match[str], req: Request) -> Answer:
        rg = self._group(m)
        return self._page([documents.asg(a) for a in self._asgs.values() if self._in_group(a.id, rg)], req)

    # -- Microsoft.Compute -------------------------------------------------------------------------

    def _list_vms(self, m: re.Match[str], req: Request) -> Answer:
        rg = self._group(m)
        view = req.query.get("$expand", "").lower() == "instanceview"
        return self._page(
            [documents.vm(v, view) for v in self._vms.values() if self._in_group(v.id, rg)], req
        )

    def _get_vm(self, m: re.Match[str], req: Request) -> Answer:
        self._group(m)
        vm = self._vms.get(key(req.path))
        if vm is None:
            raise Refusal(
                404,
                "ResourceNotFound",
                f"The Resource 'Microsoft.Compute/virtualMachines/{m['name']}' was not found.",
            )
        return Answer(200, documents.vm(vm, req.query.get("$expand", "").lower() == "instanceview"))

    def _list_ss(self, m: re.Match[str], req: Request) -> Answer:
        rg = self._group(m)
        items = [documents.scale_set(s) for s in self._scale_sets.values() if self._in_group(s.id, rg)]
        return self._page(items, req)

    def _list_ss_vms(self, m: re.Match[str], req: Request) -> Answer:
        ss = self._scale_set_or_404(m)
        view = req.query.get("$expand", "").lower() == "instanceview"
        return self._page([documents.scale_set_vm(v, view) for v in ss.vms.values()], req)

    def _get_ss_vm(self, m: re.Match[str], req: Request) -> Answer:
        vm = self._scale_set_vm_or_404(m)
        self._progress(vm)
        return Answer(200, documents.scale_set_vm(vm, req.query.get("$expand", "").lower() == "instanceview"))

    def _put_ss_vm(self, m: re.Match[str], req: Request) -> Answer:
        vm = self._scale_set_vm_or_404(m)
        self._run_hooks(vm.id)
        check_if_match(req, vm.etag)
        operation = "VirtualMachineScaleSetVMs.Update"
        profile = ((req.body or {}).get("properties") or {}).get("networkProfileConfiguration") or {}
        entries = {
            str(e.get("name", "")).lower(): e for e in profile.get("networkInterfaceConfigurations") or ()
        }
        lro, headers, apply = self._start_lro(operation, "Compute")
        if apply:
            # Compute applies the model through Network asynchronously: a refusal ends the operation
            # Failed, and nothing changes.
            snapshot = Snapshot.take(vm.nics, self._subnets)
            try:
                for nic in vm.nics:
                    entry = entries.get(nic.name.lower())
                    if entry is not None:
                        self._configure(nic, (entry.get("properties") or {}).get("ipConfigurations") or [])
                vm.etag = self._etag(weak=False)
            except Refusal as refusal:
                snapshot.restore(self._subnets)
                lro.ends, lro.error = "Failed", (refusal.code, refusal.message)
            else:
                self._follow(lro, [vm, *vm.nics], snapshot)
        return Answer(200, documents.scale_set_vm(vm, False, state="Updating"), headers)
