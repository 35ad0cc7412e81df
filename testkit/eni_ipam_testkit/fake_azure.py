"""A fake Azure Resource Manager behind the real Azure SDK: an azure-core async transport.

:class:`FakeAzure` plugs into the SDK clients (``transport=``) and answers the HTTP requests they
really send, from an in-memory model of one subscription, with JSON shaped like ARM's. Everything
above the socket is the real SDK: URL building, serialization, paging, long-running-operation
polling, azure-core's retry policy and the credential policy. Only what the Azure provider uses is
served; any other request raises ``NotImplementedError`` so a gap shows up as a loud test failure,
never as a plausible answer.

It needs the ``azure`` extra (``pip install 'eni-ipam[azure]'``): the transport subclasses
azure-core's, so importing this module imports azure-core, and nothing else of the Azure SDK.

The model:

* resource groups; a virtual network with subnets (Azure reserves five addresses per subnet: the
  network address, the first three hosts, the broadcast address); application security groups;
* standalone NICs with IP configurations and an ETag that changes on every write; VMs referencing
  NICs (``primary``, ``deleteOption``), with a power state;
* Uniform scale sets whose VMs each have NICs; a scale-set VM's model
  (``networkProfileConfiguration``) is derived from its NICs, and updating the model re-allocates the
  NICs' configurations, as Compute does through Network.

What it does like ARM (the parts the provider's correctness rests on):

* **Dynamic allocation** takes the lowest free address of the subnet; all of a NIC's configurations
  must be in one subnet; 256 configurations per NIC; a NIC update that needs more addresses than the
  subnet has left answers ``400 SubnetIsFull`` and changes nothing (a scale-set VM update ends its
  long-running operation ``Failed`` with ``SubnetIsFull`` instead, since Compute calls Network
  asynchronously).
* **ETags**: ``If-Match`` with a stale ETag answers ``412 PreconditionFailed``.
* **Long-running operations**: a write answers ``200``/``202`` with ``Azure-AsyncOperation`` (a
  delete also with ``Location``, an ``operationResults`` URL); its status document says
  ``InProgress`` for ``lro_polls`` polls, then ``Succeeded`` (or ``Failed`` with an error object);
  the poller then reads the resource (or the operation result). Changes apply when the write is
  accepted.
* **Provisioning states**: while an operation that changed a NIC (or a scale-set VM and its NICs)
  runs, their documents say ``provisioningState: Updating``; when it ends they say ``Succeeded``
  (or ``Failed``). An operation makes progress when its status is polled *or* when a resource it
  changes is read (``GET``), so an operation whose poller went away (its answer was lost) still
  ends after ``lro_polls`` such reads.
* **Paging**: every listing returns ``page_size`` items and a ``nextLink``.
* **Usage**: ``virtualNetworks/usages`` reports each subnet's ``limit`` (size minus 5) and
  ``currentValue`` (addresses in use).

Fault injection, all one-shot or counted, keyed by the operation names the provider uses
(``NetworkInterfaces.CreateOrUpdate``; a status poll is ``<operation>.Poll``):

* :meth:`FakeAzure.throttle` — the next ``times`` requests answer ``429`` with ``Retry-After``;
* :meth:`FakeAzure.fail_next_lro` — the next such operation is accepted and ends ``Failed`` (or
  ``Canceled``) with the given code (or no error object); it changes nothing, or with ``apply`` its
  change is visible while it runs and undone when it ends, leaving the resource ``Failed``;
* :meth:`FakeAzure.stall_next_lro` — the next such operation never ends; it changes nothing, or with
  ``apply`` its change is carried out (the change landed, only its status never says so);
* :meth:`FakeAzure.delay_addresses` — the next reads of a NIC show its secondary configurations
  without their addresses (Azure still allocating them);
* :meth:`FakeAzure.before_next_write` — run a change (another writer) just before the next write to
  a resource is handled, after the caller read it: the stale-ETag race (the changes another writer
  can make: :meth:`~FakeAzure.add_ip_configuration`, :meth:`~FakeAzure.set_primary`,
  :meth:`~FakeAzure.set_tags`);
* :meth:`FakeAzure.lose_next_answer` — carry out the next such write but answer ``500``;
* :meth:`FakeAzure.disconnect` — drop requests before ARM sees them (``ServiceRequestError``);
* ``latency`` — seconds every request takes, on the event loop (virtual under looptime).

:attr:`FakeAzure.requests` records every request (method, URL, operation, status, ``If-Match``, JSON
body) for assertions. :class:`FakeCredential` is a token credential that needs no network.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import ipaddress
import itertools
import json
import re
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, MutableMapping, Sequence
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs, urlsplit

from azure.core.credentials import AccessToken
from azure.core.exceptions import HttpResponseError, ServiceRequestError
from azure.core.pipeline.transport import AsyncHttpTransport
from azure.core.rest import AsyncHttpResponse, HttpRequest
from azure.core.utils import case_insensitive_dict

Json = dict[str, Any]

DEFAULT_SUBSCRIPTION = "00000000-0000-4000-8000-000000000001"
BASE_URL = "https://management.azure.com"
MAX_IP_CONFIGURATIONS = 256
RESERVED_PER_SUBNET = 5
_NETWORK_API = "2024-05-01"
_COMPUTE_API = "2024-07-01"


# -- the HTTP side -------------------------------------------------------------------------------


class FakeResponse(AsyncHttpResponse):
    """A complete, already-read ARM answer."""

    def __init__(self, request: HttpRequest, status: int, body: bytes, headers: Mapping[str, str]) -> None:
        self._request = request
        self._status = status
        self._content = body
        self._headers: MutableMapping[str, str] = case_insensitive_dict(dict(headers))
        self._closed = False
        self._encoding: str | None = "utf-8"

    @property
    def request(self) -> HttpRequest:
        return self._request

    @property
    def status_code(self) -> int:
        return self._status

    @property
    def headers(self) -> MutableMapping[str, str]:
        return self._headers

    @property
    def reason(self) -> str:
        return _REASONS.get(self._status, "Unknown")

    @property
    def content_type(self) -> str | None:
        return self._headers.get("Content-Type")

    @property
    def is_closed(self) -> bool:
        return self._closed

    @property
    def is_stream_consumed(self) -> bool:
        return self._closed

    @property
    def encoding(self) -> str | None:
        return self._encoding

    @encoding.setter
    def encoding(self, value: str | None) -> None:
        self._encoding = value

    @property
    def url(self) -> str:
        return str(self._request.url)

    @property
    def content(self) -> bytes:
        return self._content

    def text(self, encoding: str | None = None) -> str:
        return self._content.decode(encoding or self._encoding or "utf-8")

    def json(self) -> Any:
        return json.loads(self.text()) if self._content else None

    def raise_for_status(self) -> None:
        if self._status >= 400:
            raise HttpResponseError(response=self)

    async def read(self) -> bytes:
        self._closed = True
        return self._content

    async def iter_raw(self, **kwargs: Any) -> AsyncIterator[bytes]:
        yield self._content

    async def iter_bytes(self, **kwargs: Any) -> AsyncIterator[bytes]:
        yield self._content

    async def close(self) -> None:
        self._closed = True

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc_value: BaseException | None = None,
        traceback: TracebackType | None = None,
    ) -> None:
        await self.close()


_REASONS = {
    200: "OK",
    201: "Created",
    202: "Accepted",
    204: "No Content",
    400: "Bad Request",
    404: "Not Found",
    409: "Conflict",
    412: "Precondition Failed",
    429: "Too Many Requests",
}


class FakeCredential:
    """An async token credential answering a fixed token; counts requests and remembers ``close``."""

    def __init__(self) -> None:
        self.requests = 0
        self.closed = False

    async def get_token(
        self,
        *scopes: str,
        claims: str | None = None,
        tenant_id: str | None = None,
        enable_cae: bool = False,
        **kwargs: Any,
    ) -> AccessToken:
        self.requests += 1
        return AccessToken("fake-token", 4_102_444_800)  # 2100-01-01: never refreshed during a test

    async def close(self) -> None:
        self.closed = True

    async def __aenter__(self) -> FakeCredential:
        return self

    async def __aexit__(self, *args: Any) -> None:
        await self.close()


@dataclasses.dataclass(frozen=True)
class RecordedRequest:
    """One request the fake answered (``status`` 0: the connection was dropped)."""

    method: str
    url: str
    operation: str
    """The provider's name for it (``NetworkInterfaces.CreateOrUpdate``, ``<operation>.Poll``)."""
    status: int
    if_match: str | None
    body: Any


# -- the model -----------------------------------------------------------------------------------


@dataclasses.dataclass
class _IpConfig:
    name: str
    subnet_id: str
    address: str
    primary: bool
    groups: tuple[str, ...] = ()


@dataclasses.dataclass
class _Nic:
    id: str
    name: str
    location: str
    configs: list[_IpConfig]
    etag: str
    tags: dict[str, str] = dataclasses.field(default_factory=dict)
    vm_id: str = ""
    primary: bool = True
    state: str = "Succeeded"
    """``provisioningState``."""
    hidden_reads: int = 0
    """Reads still to answer without the secondary configurations' addresses."""


@dataclasses.dataclass
class _Vm:
    id: str
    name: str
    location: str
    size: str
    running: bool
    nics: list[tuple[str, bool, str]]
    """(NIC id, primary, deleteOption) in the VM's order."""


@dataclasses.dataclass
class _ScaleSetVm:
    id: str
    index: str
    scale_set: _ScaleSet
    running: bool
    etag: str
    nics: list[_Nic]
    state: str = "Succeeded"
    """``provisioningState``."""


@dataclasses.dataclass
class _ScaleSet:
    id: str
    name: str
    location: str
    size: str
    vms: dict[str, _ScaleSetVm] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class _Subnet:
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


@dataclasses.dataclass
class _Vnet:
    id: str
    name: str
    location: str
    prefixes: list[str]
    subnets: dict[str, _Subnet] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class _Asg:
    id: str
    name: str
    location: str
    tags: dict[str, str]


@dataclasses.dataclass
class _Fault:
    """How the next long-running operation of an operation goes wrong."""

    ends: str
    """``Failed`` or ``Canceled``; ``""``: it never ends."""
    code: str = ""
    """The error object's code (``""``: the status document has no error object)."""
    message: str = ""
    apply: bool = False
    """Whether the change is carried out (and, when the operation ends, undone)."""
    state: str = "Updating"
    """Provisioning state of the changed resources while a stalled operation never ends."""


@dataclasses.dataclass
class _Lro:
    id: str
    operation: str
    provider: str
    polls_left: int
    ends: str = "Succeeded"
    """Its final status: ``Succeeded``, ``Failed`` or ``Canceled``."""
    error: tuple[str, str] | None = None
    """``(code, message)`` of the error object of a failed end (``None``: no error object)."""
    stalled: bool = False
    state: str = "Updating"
    """Provisioning state of the resources it changed while it runs."""
    changed: list[_Nic | _ScaleSetVm] = dataclasses.field(default_factory=list)
    """Resources whose provisioning state follows it."""
    undo: _Snapshot | None = None
    """What to restore when it ends failed."""
    ended: bool = False


@dataclasses.dataclass
class _Throttle:
    times: int
    retry_after: float
    code: str
    after: int = 0


@dataclasses.dataclass
class _Request:
    method: str
    path: str
    query: dict[str, str]
    headers: Mapping[str, str]
    body: Any
    api_version: str


@dataclasses.dataclass
class _Answer:
    status: int
    body: Any = None
    headers: dict[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class _Snapshot:
    nics: list[tuple[_Nic, list[_IpConfig], str]]
    used: dict[str, dict[str, str]]


class _Dropped(Exception):
    def __init__(self, operation: str) -> None:
        super().__init__(operation)
        self.operation = operation


class _Refusal(Exception):
    """An ARM error answer, raised from deep inside a handler."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


def _key(resource_id: str) -> str:
    return resource_id.strip().rstrip("/").lower()


_SUB = r"^/subscriptions/(?P<sub>[^/]+)"
_RG = _SUB + r"/resourcegroups/(?P<rg>[^/]+)/providers"
_SS = _RG + r"/microsoft\.compute/virtualmachinescalesets/(?P<ss>[^/]+)"
_ROUTES: list[tuple[str, re.Pattern[str], str, str]] = [
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


class FakeAzure(AsyncHttpTransport[HttpRequest, AsyncHttpResponse]):
    """One subscription of Azure Resource Manager, in memory, served over azure-core's transport API."""

    def __init__(
        self,
        *,
        subscription_id: str = DEFAULT_SUBSCRIPTION,
        location: str = "westeurope",
        page_size: int = 100,
        lro_polls: int = 1,
        latency: float = 0.0,
        base_url: str = BASE_URL,
    ) -> None:
        """Args:
        subscription_id: the only subscription served (others answer ``SubscriptionNotFound``).
        location: region of everything created.
        page_size: items per page of every listing.
        lro_polls: ``InProgress`` answers of a long-running operation's status before it ends.
        latency: seconds each request takes, slept on the event loop.
        base_url: the endpoint the clients are configured with (``nextLink``s and status URLs use it).
        """
        self.subscription_id = subscription_id
        self.location = location
        self.page_size = page_size
        self.lro_polls = lro_polls
        self.latency = latency
        self.base_url = base_url.rstrip("/")
        self.requests: list[RecordedRequest] = []
        self.closed = False
        self._groups: dict[str, str] = {}
        self._vnets: dict[str, _Vnet] = {}
        self._subnets: dict[str, _Subnet] = {}
        self._asgs: dict[str, _Asg] = {}
        self._nics: dict[str, _Nic] = {}
        self._vms: dict[str, _Vm] = {}
        self._scale_sets: dict[str, _ScaleSet] = {}
        self._lros: dict[str, _Lro] = {}
        self._throttles: dict[str, list[_Throttle]] = {}
        self._lro_faults: dict[str, list[_Fault]] = {}
        self._hooks: dict[str, list[Callable[[], None]]] = {}
        self._lost: dict[str, int] = {}
        self._drops: dict[str, int] = {}
        self._counter = itertools.count(1)

    # -- building the world ------------------------------------------------------------------------

    def _rg_prefix(self, rg: str) -> str:
        if rg.lower() not in self._groups:
            raise KeyError(f"no resource group {rg!r}: add_resource_group first")
        return f"/subscriptions/{self.subscription_id}/resourceGroups/{self._groups[rg.lower()]}"

    def _etag(self, weak: bool = True) -> str:
        n = next(self._counter)
        return f'W/"{n:08d}-0000-4000-8000-{n:012d}"' if weak else f'"{n}"'

    def add_resource_group(self, name: str) -> str:
        self._groups[name.lower()] = name
        return f"/subscriptions/{self.subscription_id}/resourceGroups/{name}"

    def add_vnet(self, rg: str, name: str, cidr: str) -> str:
        vid = f"{self._rg_prefix(rg)}/providers/Microsoft.Network/virtualNetworks/{name}"
        self._vnets[_key(vid)] = _Vnet(vid, name, self.location, [cidr])
        return vid

    def add_subnet(self, vnet_id: str, name: str, cidr: str) -> str:
        vnet = self._vnets[_key(vnet_id)]
        sid = f"{vnet.id}/subnets/{name}"
        subnet = _Subnet(sid, name, ipaddress.IPv4Network(cidr))
        vnet.subnets[_key(sid)] = subnet
        self._subnets[_key(sid)] = subnet
        return sid

    def add_asg(self, rg: str, name: str, tags: Mapping[str, str] | None = None) -> str:
        aid = f"{self._rg_prefix(rg)}/providers/Microsoft.Network/applicationSecurityGroups/{name}"
        self._asgs[_key(aid)] = _Asg(aid, name, self.location, dict(tags or {}))
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
        nic = _Nic(nid, name, self.location, [], self._etag(), dict(tags or {}))
        nic.configs.append(self._new_config(nic, "ipconfig1", subnet_id, primary=True, groups=tuple(asgs)))
        self._nics[_key(nid)] = nic
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
            nic = self._nics[_key(nic_id)]
            nic.vm_id, nic.primary = vid, i == primary
            nic.etag = self._etag()
            refs.append((nic.id, i == primary, delete_option))
        self._vms[_key(vid)] = _Vm(vid, name, self.location, size, running, refs)
        return vid

    def reference_nic(self, vm_id: str, nic_id: str, *, delete_option: str = "Delete") -> None:
        """Make a VM list ``nic_id`` as one more (secondary) NIC, whether or not the fake holds it
        (a NIC id of another subscription, as a hand-edited VM could carry)."""
        self._vms[_key(vm_id)].nics.append((nic_id, False, delete_option))

    def add_scale_set(self, rg: str, name: str, size: str) -> str:
        sid = f"{self._rg_prefix(rg)}/providers/Microsoft.Compute/virtualMachineScaleSets/{name}"
        self._scale_sets[_key(sid)] = _ScaleSet(sid, name, self.location, size)
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
        ss = self._scale_sets[_key(scale_set_id)]
        index = str(len(ss.vms))
        vid = f"{ss.id}/virtualMachines/{index}"
        vm = _ScaleSetVm(vid, index, ss, running, self._etag(weak=False), [])
        for i, nic_name in enumerate(nic_names):
            nid = f"{vid}/networkInterfaces/{nic_name}"
            nic = _Nic(nid, nic_name, self.location, [], self._etag(), vm_id=vid, primary=i == 0)
            nic.configs.append(
                self._new_config(nic, "ipconfig1", subnet_id, primary=True, groups=tuple(asgs))
            )
            vm.nics.append(nic)
        ss.vms[index] = vm
        return vid

    def _new_config(
        self, nic: _Nic, name: str, subnet_id: str, *, primary: bool, groups: tuple[str, ...] = ()
    ) -> _IpConfig:
        subnet = self._subnets[_key(subnet_id)]
        address = self._allocate(subnet, f"{nic.id}/ipConfigurations/{name}")
        if address is None:
            raise _Refusal(400, "SubnetIsFull", f"Subnet {subnet.id} is already full.")
        return _IpConfig(name, subnet.id, address, primary, groups)

    @staticmethod
    def _allocate(subnet: _Subnet, owner: str) -> str | None:
        for address in subnet.hosts():
            if address not in subnet.used:
                subnet.used[address] = owner
                return address
        return None

    # -- changing the world behind the provider's back ---------------------------------------------

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
        vm = self._vms.get(_key(vm_id))
        if vm is not None:
            vm.running = running
        else:
            self._scale_set_vm(vm_id).running = running

    def _touch(self, nic: _Nic) -> None:
        nic.etag = self._etag()
        if nic.vm_id and (vm := self._find_scale_set_vm(nic.vm_id)) is not None:
            vm.etag = self._etag(weak=False)

    # -- inspecting the world ----------------------------------------------------------------------

    def _nic(self, nic_id: str) -> _Nic:
        found = self._find_nic(nic_id)
        if found is None:
            raise KeyError(nic_id)
        return found

    def _find_nic(self, nic_id: str) -> _Nic | None:
        key = _key(nic_id)
        if key in self._nics:
            return self._nics[key]
        for ss in self._scale_sets.values():
            for vm in ss.vms.values():
                for nic in vm.nics:
                    if _key(nic.id) == key:
                        return nic
        return None

    def _find_scale_set_vm(self, vm_id: str) -> _ScaleSetVm | None:
        key = _key(vm_id)
        for ss in self._scale_sets.values():
            for vm in ss.vms.values():
                if _key(vm.id) == key:
                    return vm
        return None

    def _scale_set_vm(self, vm_id: str) -> _ScaleSetVm:
        found = self._find_scale_set_vm(vm_id)
        if found is None:
            raise KeyError(vm_id)
        return found

    def nic_document(self, nic_id: str) -> Json:
        """The NIC as ``GET`` returns it."""
        return self._nic_json(self._nic(nic_id))

    def secondary_addresses(self, nic_id: str) -> list[str]:
        """The NIC's secondary addresses, in numeric order."""
        nic = self._nic(nic_id)
        return sorted(
            (c.address for c in nic.configs if not c.primary), key=lambda a: int(ipaddress.IPv4Address(a))
        )

    def configuration_names(self, nic_id: str) -> list[str]:
        return [c.name for c in self._nic(nic_id).configs]

    def free_addresses(self, subnet_id: str) -> int:
        return self._subnets[_key(subnet_id)].free()

    def nic_exists(self, nic_id: str) -> bool:
        return self._find_nic(nic_id) is not None

    def operations(self, *, method: str | None = None) -> list[str]:
        """Operations of the recorded requests, in order (``method`` filters)."""
        return [r.operation for r in self.requests if method is None or r.method == method]

    def count(self, operation: str, *, status: int | None = None) -> int:
        return sum(
            1 for r in self.requests if r.operation == operation and (status is None or r.status == status)
        )

    # -- fault injection ---------------------------------------------------------------------------

    def throttle(
        self,
        operation: str,
        *,
        times: int = 1,
        retry_after: float = 5,
        code: str = "TooManyRequests",
        after: int = 0,
    ) -> None:
        """Answer ``times`` requests of ``operation`` with ``429`` and ``Retry-After``, once ``after``
        more of them have been served (``after=1``: from the second page of a listing on)."""
        self._throttles.setdefault(operation, []).append(_Throttle(times, retry_after, code, after))

    def lose_next_answer(self, operation: str) -> None:
        """Carry out the next ``operation`` but answer ``500`` (the answer was lost on the way back):
        the SDK's retry then meets the changed resource."""
        self._lost[operation] = self._lost.get(operation, 0) + 1

    def disconnect(self, operation: str, *, times: int = 1) -> None:
        """Drop the next ``times`` requests of ``operation`` before ARM sees them: azure-core raises
        ``ServiceRequestError``."""
        self._drops[operation] = self._drops.get(operation, 0) + times

    def fail_next_lro(
        self, operation: str, code: str, message: str = "", *, apply: bool = False, ends: str = "Failed"
    ) -> None:
        """The next ``operation`` is accepted and ends ``ends`` (``Failed`` or ``Canceled``) with an
        error object carrying ``code`` (none when ``code`` is empty).

        Without ``apply`` it changes nothing. With ``apply`` its change is carried out when it is
        accepted (readers see it, ``Updating``) and undone when it ends, leaving the resource
        ``Failed``: what a reader saw while it ran is not what stays.
        """
        if ends not in ("Failed", "Canceled"):
            raise ValueError(f"an operation ends Failed or Canceled, not {ends!r}")
        message = message or f"{operation} failed: {code}"
        self._lro_faults.setdefault(operation, []).append(_Fault(ends, code, message, apply))

    def stall_next_lro(self, operation: str, *, apply: bool = False, state: str = "Succeeded") -> None:
        """The next ``operation`` is accepted and never ends: its status says ``InProgress`` forever.

        Without ``apply`` it changes nothing. With ``apply`` its change is carried out and the changed
        resources read ``state``: ``Succeeded`` (the change landed; only the operation's status never
        says so) or ``Updating`` (still in progress, for good).
        """
        self._lro_faults.setdefault(operation, []).append(_Fault("", apply=apply, state=state))

    def delay_addresses(self, nic_id: str, *, reads: int = 1) -> None:
        """The next ``reads`` reads (``GET``) of the NIC show its secondary configurations without a
        private address, as Azure does while it still allocates them."""
        self._nic(nic_id).hidden_reads += reads

    def before_next_write(self, resource_id: str, change: Callable[[], None]) -> None:
        """Run ``change`` just before the next write (PUT or DELETE) to ``resource_id`` is handled."""
        self._hooks.setdefault(_key(resource_id), []).append(change)

    # -- transport ---------------------------------------------------------------------------------

    async def open(self) -> None:
        self.closed = False

    async def close(self) -> None:
        self.closed = True

    async def __aenter__(self) -> FakeAzure:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc_value: BaseException | None = None,
        traceback: TracebackType | None = None,
    ) -> None:
        await self.close()

    async def send(self, request: HttpRequest, **kwargs: Any) -> AsyncHttpResponse:
        if self.latency:
            await asyncio.sleep(self.latency)
        parts = urlsplit(str(request.url))
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        raw = request.content
        body = json.loads(raw) if raw else None
        req = _Request(
            method=str(request.method).upper(),
            path=parts.path.rstrip("/"),
            query=query,
            headers=request.headers,
            body=body,
            api_version=query.get("api-version", ""),
        )
        try:
            operation, answer = self._dispatch(req)
        except _Dropped as dropped:
            if_match = request.headers.get("If-Match")
            self.requests.append(
                RecordedRequest(req.method, str(request.url), dropped.operation, 0, if_match, body)
            )
            raise ServiceRequestError(f"connection dropped before ARM answered {dropped.operation}") from None
        self.requests.append(
            RecordedRequest(
                method=req.method,
                url=str(request.url),
                operation=operation,
                status=answer.status,
                if_match=request.headers.get("If-Match"),
                body=body,
            )
        )
        payload = b"" if answer.body is None else json.dumps(answer.body).encode()
        headers = {"Content-Type": "application/json; charset=utf-8", **answer.headers}
        return FakeResponse(request, answer.status, payload, headers)

    def _dispatch(self, req: _Request) -> tuple[str, _Answer]:
        path = req.path.lower()
        for method, pattern, operation, handler in _ROUTES:
            if method != req.method or not (m := pattern.match(path)):
                continue
            if m["sub"] != self.subscription_id.lower():
                return operation, _error(
                    404, "SubscriptionNotFound", f"The subscription '{m['sub']}' could not be found."
                )
            if operation in ("AsyncOperation.Get", "AsyncOperation.Result"):
                lro = self._lros.get(m["op"])
                operation = f"{lro.operation}.Poll" if lro else operation
            if self._drops.get(operation):
                self._drops[operation] -= 1
                raise _Dropped(operation)
            if (throttled := self._throttled(operation)) is not None:
                return operation, throttled
            try:
                answer: _Answer = getattr(self, handler)(m, req)
            except _Refusal as refusal:
                answer = _error(refusal.status, refusal.code, refusal.message)
            if answer.status < 400 and self._lost.get(operation):
                self._lost[operation] -= 1
                answer = _error(500, "InternalServerError", "The answer was lost on its way back.")
            return operation, answer
        raise NotImplementedError(f"the fake Azure does not serve {req.method} {req.path}")

    def _throttled(self, operation: str) -> _Answer | None:
        queue = self._throttles.get(operation)
        if not queue:
            return None
        throttle = queue[0]
        if throttle.after > 0:
            throttle.after -= 1
            return None
        throttle.times -= 1
        if throttle.times <= 0:
            queue.pop(0)
        answer = _error(429, throttle.code, "The request is being throttled.")
        answer.headers["Retry-After"] = f"{throttle.retry_after:g}"
        return answer

    def _page(self, items: list[Json], req: _Request) -> _Answer:
        start = int(req.query.get("$skiptoken", "0"))
        chunk = items[start : start + self.page_size]
        body: Json = {"value": chunk}
        if start + self.page_size < len(items):
            version = req.api_version or _NETWORK_API
            body["nextLink"] = (
                f"{self.base_url}{req.path}?api-version={version}&$skiptoken={start + self.page_size}"
            )
        return _Answer(200, body)

    def _group(self, m: re.Match[str]) -> str:
        if m["rg"] not in self._groups:
            raise _Refusal(404, "ResourceGroupNotFound", f"Resource group '{m['rg']}' could not be found.")
        return m["rg"]

    def _in_group(self, resource_id: str, rg: str) -> bool:
        return f"/resourcegroups/{rg}/" in _key(resource_id)

    def _run_hooks(self, resource_id: str) -> None:
        """Run the oldest change registered for the resource's next write (one per write)."""
        queue = self._hooks.get(_key(resource_id))
        if queue:
            queue.pop(0)()

    def _start_lro(self, operation: str, provider: str) -> tuple[_Lro, dict[str, str], bool]:
        """A new long-running operation, its status URL header, and whether its change must be applied
        (not when a fault that changes nothing was injected for it)."""
        queue = self._lro_faults.get(operation)
        fault = queue.pop(0) if queue else None
        lro = _Lro(f"{next(self._counter):08d}-op", operation, provider, self.lro_polls)
        if fault is not None:
            if fault.ends:
                lro.ends = fault.ends
                lro.error = (fault.code, fault.message) if fault.code else None
            else:
                lro.stalled, lro.state = True, fault.state
        self._lros[lro.id] = lro
        version = _NETWORK_API if provider == "Network" else _COMPUTE_API
        url = (
            f"{self.base_url}/subscriptions/{self.subscription_id}/providers/Microsoft.{provider}"
            f"/locations/{self.location}/operations/{lro.id}?api-version={version}"
        )
        return lro, {"Azure-AsyncOperation": url}, fault is None or fault.apply

    def _follow(self, lro: _Lro, changed: Sequence[_Nic | _ScaleSetVm], before: _Snapshot) -> None:
        """The operation changed ``changed`` (from ``before``): their provisioning state follows it."""
        lro.changed = list(changed)
        lro.undo = before if lro.ends != "Succeeded" else None
        for resource in changed:
            resource.state = lro.state

    def _end(self, lro: _Lro) -> None:
        """The operation is over: a failed one's change is undone; the changed resources settle."""
        if lro.ended:
            return
        lro.ended = True
        if lro.undo is not None:
            self._restore(lro.undo)
            for nic, _, _ in lro.undo.nics:
                self._touch(nic)
        for resource in lro.changed:
            resource.state = "Succeeded" if lro.ends == "Succeeded" else "Failed"

    def _progress(self, resource: _Nic | _ScaleSetVm) -> None:
        """A read of ``resource``: the running operations that changed it move on, as a status poll
        would move them."""
        for lro in list(self._lros.values()):
            if lro.ended or lro.stalled or not any(r is resource for r in lro.changed):
                continue
            if lro.polls_left > 0:
                lro.polls_left -= 1
            else:
                self._end(lro)

    # -- handlers: Network -------------------------------------------------------------------------

    def _list_nics(self, m: re.Match[str], req: _Request) -> _Answer:
        rg = self._group(m)
        return self._page([self._nic_json(n) for n in self._nics.values() if self._in_group(n.id, rg)], req)

    def _nic_or_404(self, nic_id: str) -> _Nic:
        nic = self._find_nic(nic_id)
        if nic is None:
            kind = "Microsoft.Network/networkInterfaces"
            raise _Refusal(
                404, "ResourceNotFound", f"The Resource '{kind}/{nic_id.rsplit('/', 1)[-1]}' was not found."
            )
        return nic

    def _get_nic(self, m: re.Match[str], req: _Request) -> _Answer:
        self._group(m)
        return _Answer(200, self._read_nic(self._nic_or_404(req.path)))

    def _read_nic(self, nic: _Nic) -> Json:
        """The NIC as one ``GET`` of it answers (a read moves the operations that changed it on)."""
        self._progress(nic)
        hide = nic.hidden_reads > 0
        if hide:
            nic.hidden_reads -= 1
        return self._nic_json(nic, hide_addresses=hide)

    def _put_nic(self, m: re.Match[str], req: _Request) -> _Answer:
        self._group(m)
        nic = self._find_nic(req.path)
        if nic is None or _key(req.path) not in self._nics:
            raise NotImplementedError("the fake Azure does not create NICs through PUT")
        self._run_hooks(nic.id)
        _check_if_match(req, nic.etag)
        wanted = ((req.body or {}).get("properties") or {}).get("ipConfigurations") or []
        lro, headers, apply = self._start_lro("NetworkInterfaces.CreateOrUpdate", "Network")
        if apply:
            before = self._snapshot([nic])
            self._apply_configurations(nic, wanted)
            nic.tags = dict((req.body or {}).get("tags") or {})
            self._follow(lro, [nic], before)
        return _Answer(200, self._nic_json(nic, state="Updating"), headers)

    def _delete_nic(self, m: re.Match[str], req: _Request) -> _Answer:
        self._group(m)
        nic = self._nic_or_404(req.path)
        self._run_hooks(nic.id)
        if nic.vm_id:
            raise _Refusal(
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
                self._subnets[_key(config.subnet_id)].used.pop(config.address, None)
            del self._nics[_key(nic.id)]
        return _Answer(202, None, headers)

    def _list_scale_set_nics(self, m: re.Match[str], req: _Request) -> _Answer:
        ss = self._scale_set_or_404(m)
        return self._page([self._nic_json(n) for vm in ss.vms.values() for n in vm.nics], req)

    def _list_scale_set_vm_nics(self, m: re.Match[str], req: _Request) -> _Answer:
        vm = self._scale_set_vm_or_404(m)
        return self._page([self._nic_json(n) for n in vm.nics], req)

    def _get_scale_set_nic(self, m: re.Match[str], req: _Request) -> _Answer:
        self._scale_set_vm_or_404(m)
        return _Answer(200, self._read_nic(self._nic_or_404(req.path)))

    def _get_vnet(self, m: re.Match[str], req: _Request) -> _Answer:
        vnet = self._vnet_or_404(req.path)
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
        return _Answer(
            200,
            {
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
            },
        )

    def _vnet_usage(self, m: re.Match[str], req: _Request) -> _Answer:
        vnet = self._vnet_or_404(req.path.rsplit("/usages", 1)[0])
        rows = [
            {
                "currentValue": float(len(s.used)),
                "id": s.id,
                "limit": float(s.limit),
                "name": {"localizedValue": "Subnet size and usage", "value": "Subnet size and usage"},
                "unit": "Count",
            }
            for s in vnet.subnets.values()
        ]
        return self._page(rows, req)

    def _vnet_or_404(self, vnet_id: str) -> _Vnet:
        vnet = self._vnets.get(_key(vnet_id))
        if vnet is None:
            raise _Refusal(404, "ResourceNotFound", f"The Resource '{vnet_id}' was not found.")
        return vnet

    def _list_asgs(self, m: re.Match[str], req: _Request) -> _Answer:
        rg = self._group(m)
        items = [
            {
                "name": a.name,
                "id": a.id,
                "location": a.location,
                "tags": a.tags,
                "etag": 'W/"1"',
                "type": "Microsoft.Network/applicationSecurityGroups",
                "properties": {
                    "provisioningState": "Succeeded",
                    "resourceGuid": "00000000-0000-0000-0000-000000000000",
                },
            }
            for a in self._asgs.values()
            if self._in_group(a.id, rg)
        ]
        return self._page(items, req)

    # -- handlers: Compute -------------------------------------------------------------------------

    def _list_vms(self, m: re.Match[str], req: _Request) -> _Answer:
        rg = self._group(m)
        view = req.query.get("$expand", "").lower() == "instanceview"
        return self._page(
            [self._vm_json(v, view) for v in self._vms.values() if self._in_group(v.id, rg)], req
        )

    def _get_vm(self, m: re.Match[str], req: _Request) -> _Answer:
        self._group(m)
        vm = self._vms.get(_key(req.path))
        if vm is None:
            raise _Refusal(
                404,
                "ResourceNotFound",
                f"The Resource 'Microsoft.Compute/virtualMachines/{m['name']}' was not found.",
            )
        return _Answer(200, self._vm_json(vm, req.query.get("$expand", "").lower() == "instanceview"))

    def _list_ss(self, m: re.Match[str], req: _Request) -> _Answer:
        rg = self._group(m)
        items = [
            {
                "name": s.name,
                "id": s.id,
                "location": s.location,
                "type": "Microsoft.Compute/virtualMachineScaleSets",
                "sku": {"name": s.size, "tier": "Standard", "capacity": len(s.vms)},
                "properties": {"orchestrationMode": "Uniform", "provisioningState": "Succeeded"},
            }
            for s in self._scale_sets.values()
            if self._in_group(s.id, rg)
        ]
        return self._page(items, req)

    def _scale_set_or_404(self, m: re.Match[str]) -> _ScaleSet:
        self._group(m)
        for ss in self._scale_sets.values():
            if _key(ss.id).endswith(f"/virtualmachinescalesets/{m['ss']}") and self._in_group(ss.id, m["rg"]):
                return ss
        raise _Refusal(
            404,
            "ResourceNotFound",
            f"The Resource 'Microsoft.Compute/virtualMachineScaleSets/{m['ss']}' was not found.",
        )

    def _scale_set_vm_or_404(self, m: re.Match[str]) -> _ScaleSetVm:
        ss = self._scale_set_or_404(m)
        vm = ss.vms.get(m["index"])
        if vm is None:
            raise _Refusal(404, "NotFound", f"The entity was not found in this Azure location: {m['index']}.")
        return vm

    def _list_ss_vms(self, m: re.Match[str], req: _Request) -> _Answer:
        ss = self._scale_set_or_404(m)
        view = req.query.get("$expand", "").lower() == "instanceview"
        return self._page([self._ss_vm_json(v, view) for v in ss.vms.values()], req)

    def _get_ss_vm(self, m: re.Match[str], req: _Request) -> _Answer:
        vm = self._scale_set_vm_or_404(m)
        self._progress(vm)
        return _Answer(200, self._ss_vm_json(vm, req.query.get("$expand", "").lower() == "instanceview"))

    def _put_ss_vm(self, m: re.Match[str], req: _Request) -> _Answer:
        vm = self._scale_set_vm_or_404(m)
        self._run_hooks(vm.id)
        _check_if_match(req, vm.etag)
        operation = "VirtualMachineScaleSetVMs.Update"
        profile = ((req.body or {}).get("properties") or {}).get("networkProfileConfiguration") or {}
        entries = {
            str(e.get("name", "")).lower(): e for e in profile.get("networkInterfaceConfigurations") or ()
        }
        lro, headers, apply = self._start_lro(operation, "Compute")
        if apply:
            # Compute applies the model through Network asynchronously: a refusal ends the operation
            # Failed, and nothing changes.
            snapshot = self._snapshot(vm.nics)
            try:
                for nic in vm.nics:
                    entry = entries.get(nic.name.lower())
                    if entry is not None:
                        self._apply_configurations(
                            nic, (entry.get("properties") or {}).get("ipConfigurations") or []
                        )
                vm.etag = self._etag(weak=False)
            except _Refusal as refusal:
                self._restore(snapshot)
                lro.ends, lro.error = "Failed", (refusal.code, refusal.message)
            else:
                self._follow(lro, [vm, *vm.nics], snapshot)
        return _Answer(200, self._ss_vm_json(vm, False, state="Updating"), headers)

    def _get_operation(self, m: re.Match[str], req: _Request) -> _Answer:
        lro = self._lros.get(m["op"])
        if lro is None:
            raise _Refusal(404, "NotFound", f"operation {m['op']} not found")
        if lro.stalled or (not lro.ended and lro.polls_left > 0):
            lro.polls_left -= 1
            return _Answer(200, {"status": "InProgress", "name": lro.id})
        self._end(lro)
        document: Json = {"status": lro.ends, "name": lro.id}
        if lro.error is not None:
            code, message = lro.error
            document["error"] = {"code": code, "message": message}
        return _Answer(200, document)

    def _get_operation_result(self, m: re.Match[str], req: _Request) -> _Answer:
        if m["op"] not in self._lros:
            raise _Refusal(404, "NotFound", f"operation {m['op']} not found")
        return _Answer(204)

    # -- configurations ----------------------------------------------------------------------------

    def _snapshot(self, nics: Sequence[_Nic]) -> _Snapshot:
        return _Snapshot(
            nics=[(n, copy.deepcopy(n.configs), n.etag) for n in nics],
            used={k: dict(s.used) for k, s in self._subnets.items()},
        )

    def _restore(self, snapshot: _Snapshot) -> None:
        for nic, configs, etag in snapshot.nics:
            nic.configs, nic.etag = configs, etag
        for key, used in snapshot.used.items():
            self._subnets[key].used = used

    def _apply_configurations(self, nic: _Nic, wanted: Sequence[Json]) -> None:
        """Make ``wanted`` (ARM IP configurations) the NIC's configurations, all or nothing.

        Raises:
            _Refusal: invalid request, or not enough free addresses (``SubnetIsFull``).
        """
        if not wanted:
            raise _Refusal(
                400, "InvalidRequestFormat", "A network interface needs at least one IP configuration."
            )
        if len(wanted) > MAX_IP_CONFIGURATIONS:
            raise _Refusal(
                400,
                "InvalidRequestFormat",
                f"Network interface {nic.id} has {len(wanted)} IP configurations; at most "
                f"{MAX_IP_CONFIGURATIONS} are allowed.",
            )
        names = [str(c.get("name", "")) for c in wanted]
        if "" in names or len({n.lower() for n in names}) != len(names):
            raise _Refusal(400, "InvalidRequestFormat", "IP configuration names must be present and unique.")
        subnet_ids = {
            _key(str(((c.get("properties") or {}).get("subnet") or {}).get("id", ""))) for c in wanted
        }
        if len(subnet_ids) != 1:
            raise _Refusal(
                400,
                "InvalidRequestFormat",
                f"IPConfigurations on a Nic {nic.id} cannot belong to different subnets. Subnets referred: "
                f"{';'.join(sorted(subnet_ids))}",
            )
        subnet_key = subnet_ids.pop()
        subnet = self._subnets.get(subnet_key)
        if subnet is None:
            raise _Refusal(
                400,
                "InvalidResourceReference",
                f"Resource {subnet_key} referenced by {nic.id} was not found.",
            )
        flags = [bool((c.get("properties") or {}).get("primary")) for c in wanted]
        if sum(flags) > 1:
            raise _Refusal(400, "InvalidRequestFormat", "Only one IP configuration can be primary.")
        if not any(flags):
            flags[0] = True
        existing = {c.name.lower(): c for c in nic.configs}
        kept = {
            n.lower()
            for n in names
            if n.lower() in existing and _key(existing[n.lower()].subnet_id) == subnet_key
        }
        new_count = len(names) - len(kept)
        released = [c for c in nic.configs if c.name.lower() not in kept]
        if new_count > subnet.free() + sum(1 for c in released if _key(c.subnet_id) == subnet_key):
            raise _Refusal(
                400,
                "SubnetIsFull",
                f"Subnet {subnet.name} with address prefix {subnet.network} does not have enough "
                f"capacity for {new_count} IP addresses.",
            )
        for config in released:
            self._subnets[_key(config.subnet_id)].used.pop(config.address, None)
        configs: list[_IpConfig] = []
        for name, primary, spec in zip(names, flags, wanted, strict=True):
            groups = tuple(
                str(g["id"]) for g in (spec.get("properties") or {}).get("applicationSecurityGroups") or ()
            )
            if name.lower() in kept:
                old = existing[name.lower()]
                configs.append(_IpConfig(old.name, old.subnet_id, old.address, primary, groups))
                continue
            address = self._allocate(subnet, f"{nic.id}/ipConfigurations/{name}")
            assert address is not None  # capacity was checked above
            configs.append(_IpConfig(name, subnet.id, address, primary, groups))
        nic.configs = configs
        self._touch(nic)

    # -- documents ---------------------------------------------------------------------------------

    def _nic_json(self, nic: _Nic, *, state: str = "", hide_addresses: bool = False) -> Json:
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
                "macAddress": "00-0D-3A-00-00-00",
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
        return document

    @staticmethod
    def _statuses(running: bool) -> Json:
        power = "PowerState/running" if running else "PowerState/deallocated"
        return {
            "statuses": [
                {"code": "ProvisioningState/succeeded", "level": "Info"},
                {"code": power, "level": "Info"},
            ]
        }

    def _vm_json(self, vm: _Vm, view: bool) -> Json:
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
            properties["instanceView"] = self._statuses(vm.running)
        return {
            "name": vm.name,
            "id": vm.id,
            "type": "Microsoft.Compute/virtualMachines",
            "location": vm.location,
            "properties": properties,
        }

    def _ss_vm_json(self, vm: _ScaleSetVm, view: bool, *, state: str = "") -> Json:
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
            properties["instanceView"] = self._statuses(vm.running)
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


def _error(status: int, code: str, message: str) -> _Answer:
    return _Answer(status, {"error": {"code": code, "message": message}})


def _check_if_match(req: _Request, etag: str) -> None:
    wanted = req.headers.get("If-Match")
    if wanted is not None and wanted != "*" and wanted != etag:
        raise _Refusal(
            412,
            "PreconditionFailed",
            f"Precondition failed: the resource changed since it was read "
            f"(If-Match {wanted}, current {etag}).",
        )
