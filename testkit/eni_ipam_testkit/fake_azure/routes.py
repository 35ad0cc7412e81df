"""The fake ARM's routing table: which request is which operation, and which handler answers it.

Role: :data:`ROUTES` lists, for every request the provider sends, its method, its path (a regular
expression over the lower-cased path, since ARM's paths are case-insensitive), the operation name
the provider and the tests use for it (the SDK's ``<OperationGroup>.<Method>``; fault injection and
:attr:`~eni_ipam_testkit.fake_azure.FakeAzure.requests` speak these names), and the name of the
handler method of :class:`~eni_ipam_testkit.fake_azure.FakeAzure` that answers it
(:mod:`~eni_ipam_testkit.fake_azure.handlers`, :mod:`~eni_ipam_testkit.fake_azure.operations`).

Invariants: the first route whose method and pattern match wins; every pattern captures the
subscription (``sub``), and those under a resource group capture it (``rg``); a request no route
matches is not served (the transport raises ``NotImplementedError``: a gap in the fake fails the test
loudly, never with a plausible answer).
"""

from __future__ import annotations

import re

_SUB = r"^/subscriptions/(?P<sub>[^/]+)"
_RG = _SUB + r"/resourcegroups/(?P<rg>[^/]+)/providers"
_SS = _RG + r"/microsoft\.compute/virtualmachinescalesets/(?P<ss>[^/]+)"
ROUTES: list[tuple[str, re.Pattern[str], str, str]] = [
    (method, re.compile(pattern), operation, handler)
    for method, pattern, operation, handler in (
        ("GET", _RG + r"/microsoft\.network/networkinterfaces$", "NetworkInterfaces.List", "_list_nics"),
        (
            "GET",
            _RG + r"/microsoft\.network/networkinterfaces/(?P<name>[^/]+)$",
            "NetworkInterfaces.Get",
            "_get_nic",
        ),
        (
            "PUT",
            _RG + r"/microsoft\.network/networkinterfaces/(?P<name>[^/]+)$",
            "NetworkInterfaces.CreateOrUpdate",
            "_put_nic",
        ),
        (
            "DELETE",
            _RG + r"/microsoft\.network/networkinterfaces/(?P<name>[^/]+)$",
            "NetworkInterfaces.Delete",
            "_delete_nic",
        ),
        (
            "GET",
            _SS + r"/networkinterfaces$",
            "NetworkInterfaces.ListVirtualMachineScaleSetNetworkInterfaces",
            "_list_scale_set_nics",
        ),
        (
            "GET",
            _SS + r"/virtualmachines/(?P<index>[^/]+)/networkinterfaces$",
            "NetworkInterfaces.ListVirtualMachineScaleSetVMNetworkInterfaces",
            "_list_scale_set_vm_nics",
        ),
        (
            "GET",
            _SS + r"/virtualmachines/(?P<index>[^/]+)/networkinterfaces/(?P<name>[^/]+)$",
            "NetworkInterfaces.GetVirtualMachineScaleSetNetworkInterface",
            "_get_scale_set_nic",
        ),
        (
            "GET",
            _RG + r"/microsoft\.network/virtualnetworks/(?P<name>[^/]+)$",
            "VirtualNetworks.Get",
            "_get_vnet",
        ),
        (
            "GET",
            _RG + r"/microsoft\.network/virtualnetworks/(?P<name>[^/]+)/usages$",
            "VirtualNetworks.ListUsage",
            "_vnet_usage",
        ),
        (
            "GET",
            _RG + r"/microsoft\.network/applicationsecuritygroups$",
            "ApplicationSecurityGroups.List",
            "_list_asgs",
        ),
        ("GET", _RG + r"/microsoft\.compute/virtualmachines$", "VirtualMachines.List", "_list_vms"),
        (
            "GET",
            _RG + r"/microsoft\.compute/virtualmachines/(?P<name>[^/]+)$",
            "VirtualMachines.Get",
            "_get_vm",
        ),
        (
            "GET",
            _RG + r"/microsoft\.compute/virtualmachinescalesets$",
            "VirtualMachineScaleSets.List",
            "_list_ss",
        ),
        ("GET", _SS + r"/virtualmachines$", "VirtualMachineScaleSetVMs.List", "_list_ss_vms"),
        ("GET", _SS + r"/virtualmachines/(?P<index>[^/]+)$", "VirtualMachineScaleSetVMs.Get", "_get_ss_vm"),
        (
            "PUT",
            _SS + r"/virtualmachines/(?P<index>[^/]+)$",
            "VirtualMachineScaleSetVMs.Update",
            "_put_ss_vm",
        ),
        (
            "GET",
            _SUB
            + r"/providers/microsoft\.(?P<rp>network|compute)/locations/(?P<loc>[^/]+)"
            + r"/operations/(?P<op>[^/]+)$",
            "AsyncOperation.Get",
            "_get_operation",
        ),
        (
            "GET",
            _SUB
            + r"/providers/microsoft\.(?P<rp>network|compute)/locations/(?P<loc>[^/]+)"
            + r"/operationresults/(?P<op>[^/]+)$",
            "AsyncOperation.Result",
            "_get_operation_result",
        ),
    )
]
