"""Assign and unassign on one NIC: read it, amend its IP configurations, write them back conditionally,
and settle what happened whenever the answer does not say.

Writes, one per NIC per call:

* a standalone NIC: ``NetworkInterfaces.CreateOrUpdate`` (PUT of the whole NIC) with
  ``If-Match: <etag>`` of the version just read; its answer is the NIC afterwards;
* a NIC of a Uniform scale set: its configuration lives in the VM's model, so
  ``VirtualMachineScaleSetVMs.Update`` of the VM with the NIC's entry of
  ``networkProfileConfiguration`` amended, also conditional on the VM's etag (as Cilium's Azure IPAM
  does; the VM's ``imageReference`` is dropped from the update, as Cilium does, because echoing a
  gallery image back needs read permission on the gallery). Its answer is the VM's model, which has
  no addresses: they are read from the NIC.

Invariants:

* **Serialized per target.** Updates of one NIC (of one scale-set VM) run one at a time (an
  ``asyncio.Lock`` per target), so two assigns on one NIC both land instead of racing each other's
  etags.
* **One deadline.** An assign or unassign ends within ``operation_timeout``
  (:meth:`~providers.azure.client.ArmClient.deadline`): the wait for the lock, rate-limit tokens,
  reads, the write and settling it all count. The write must end :data:`SETTLE_SHARE` of
  ``operation_timeout`` before the deadline, so that there is always time left to settle it.
* **Configurations are told apart by name.** An assign names its configurations (``eni-ipam-<n>``)
  once per call. An unassign maps its addresses to configuration names on its first read, and a later
  attempt removes a configuration only while it still has that name *and* that address (a name
  already gone counts as removed: another writer may have been given the freed address since). The
  primary configuration is never removed.
* **Another writer's change is kept.** A 412 (the NIC or VM changed since it was read) re-reads and
  re-applies on the new version, at most :data:`WRITE_ATTEMPTS` times, then raises
  ``TransientError(code="PreconditionFailed")``.
* **Settled, never guessed.** A write's outcome is unknown when its answer was lost (the SDK's retry
  then met a 412, or gave up on a 5xx, a 429 or a dropped connection), when it did not end before its
  deadline, or when it succeeded but the NIC does not show the new addresses yet. The NIC (and the
  scale-set VM) is then read again, every ``polling_interval`` until the deadline, and the
  configuration names decide: all of the change there with the NIC (and VM) ``Succeeded`` is success;
  none of it there with no operation running on the NIC means the write did not land, and its own
  error is raised; anything else at the deadline raises ``TransientError(code="OutcomeUnknown")``.
* **Errors say what changed.** ``TransientError`` and ``Throttled`` mean that nothing changed, except
  code ``OutcomeUnknown``: the change may have happened, in whole or in part, and the next resync
  shows what Azure did. A write that definitely failed (ended ``Failed`` with ``SubnetIsFull``, or
  was refused) raises its translated error.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import re
import weakref
from collections.abc import AsyncIterator, Callable, Collection, Mapping, Sequence
from typing import Any, TypeVar

import structlog
from azure.core import MatchConditions
from azure.mgmt.compute.models import VirtualMachineScaleSetVM
from azure.mgmt.network.models import NetworkInterface

from eni_ipam.core import errors
from eni_ipam.core.model import address_key
from providers.azure import ids
from providers.azure import resources as r
from providers.azure.client import ArmClient, Deadline, Json, gather_all
from providers.azure.limits import IP_CONFIGURATIONS_PER_NIC

log = structlog.get_logger("eni_ipam.azure")

T = TypeVar("T")

WRITE_ATTEMPTS = 3
"""Reads and writes of one update when another writer keeps changing the NIC (412 Precondition
Failed): enough to ride out a concurrent edit, few enough to give up on a contended NIC quickly."""

SETTLE_SHARE = 0.25
"""Share of ``operation_timeout`` a write leaves for settling its outcome: a quarter of the default
two minutes is 30 s, fifteen reads at the default ``polling_interval``, longer than a NIC takes to
leave ``Updating``."""

OUTCOME_UNKNOWN = "OutcomeUnknown"
"""Code of the ``TransientError`` raised when a write may have changed the NIC, in whole or in part."""

NAME_PREFIX = "eni-ipam-"
_NAME = re.compile(rf"^{re.escape(NAME_PREFIX)}(\d+)$", re.IGNORECASE)
_AT_REST = frozenset({"succeeded", "failed", "canceled"})
_CLIENT_CLOSED = "ClientClosed"


def _name(config: Mapping[str, Any]) -> str:
    return str(config.get("name", "")).lower()


def _new_names(taken: Collection[str], count: int) -> list[str]:
    """``count`` unused names ``eni-ipam-<n>``, numbered after the highest one in use."""
    numbers = [int(m.group(1)) for name in taken if (m := _NAME.match(name))]
    names: list[str] = []
    n = max(numbers, default=0) + 1
    while len(names) < count:
        candidate = f"{NAME_PREFIX}{n}"
        if candidate not in taken:
            names.append(candidate)
        n += 1
    return names


def _stale_or_raise(ref: ids.NicRef, exc: errors.ProviderError, attempt: int) -> bool:
    """After a failed write: True when the ETag was stale (read again and retry); False when the
    write may have landed (settle it by reading); anything else is raised, nothing having changed."""
    if _is_stale(exc):
        log.info("azure_update_stale", interface=ref.id, attempt=attempt, operation=exc.operation)
        return True
    if not _may_have_landed(exc):
        raise exc
    log.info("azure_update_unsettled", interface=ref.id, error=str(exc))
    return False


def _is_stale(exc: errors.ProviderError) -> bool:
    return exc.code.lower() == "preconditionfailed"


def _retryable(exc: errors.ProviderError) -> bool:
    """Whether the same call may succeed later (on a client closed for shutdown it never will)."""
    return isinstance(exc, errors.TransientError | errors.Throttled) and exc.code != _CLIENT_CLOSED


def _may_have_landed(exc: errors.ProviderError) -> bool:
    """Whether a write that raised ``exc`` may still have changed the NIC: an earlier attempt's answer
    may have been lost (the SDK then retried and this is the retry's error), or the write did not
    end in time. A refusal, an operation that ended with a definite error, and a call on a closed
    client (nothing was sent) changed nothing."""
    return _retryable(exc)


def _write_operation(ref: ids.NicRef) -> str:
    return "VirtualMachineScaleSetVMs.Update" if ref.in_scale_set else "NetworkInterfaces.CreateOrUpdate"


def _provisioning(document: Json | None) -> str:
    # Every ARM document has the field; one without it is taken as settled rather than waited on.
    return str(r.props(document).get("provisioningState") or "Succeeded").lower()


def _outcome_unknown(ref: ids.NicRef, what: str) -> errors.TransientError:
    return errors.TransientError(
        f"{ref.id}: {what}; the next resync shows what Azure did",
        code=OUTCOME_UNKNOWN,
        operation=_write_operation(ref),
    )


@dataclasses.dataclass
class _Target:
    """One read of a NIC ready to be edited."""

    ref: ids.NicRef
    nic: Json
    """The NIC as Network reports it: addresses, provisioning state."""
    vm: Json | None
    """The scale-set VM whose model holds the NIC's configurations (``None``: a standalone NIC)."""
    configs: list[Json]
    """The configurations to edit: the NIC's own, or the VM model's entry for it."""

    @property
    def operation(self) -> str:
        return _write_operation(self.ref)

    def names(self) -> set[str]:
        """Names of the configurations, in the model being edited or on the NIC."""
        return {_name(c) for c in self.configs} | {_name(c) for c in r.ip_configurations(self.nic)}

    def addresses(self) -> dict[str, str]:
        """Address of each IPv4 configuration on the NIC that has one, by name."""
        return {
            _name(c): r.config_address(c)
            for c in r.ip_configurations(self.nic)
            if r.is_ipv4(c) and r.config_address(c)
        }

    def primary_name(self) -> str:
        primary = r.primary_config(r.ip_configurations(self.nic))
        return _name(primary) if primary is not None else ""

    def state(self) -> str:
        """``succeeded``, ``failed`` or ``busy`` (an operation is running): the NIC's provisioning
        state, and the scale-set VM's."""
        states = [_provisioning(self.nic), *([_provisioning(self.vm)] if self.vm is not None else [])]
        if any(s not in _AT_REST for s in states):
            return "busy"
        return "succeeded" if all(s == "succeeded" for s in states) else "failed"


class _Pending:
    """A settling read that decides nothing yet, and why."""

    def __init__(self, why: str) -> None:
        self.why = why


Judge = Callable[[_Target], T | _Pending]
"""What one read of the NIC says about a write: its result, ``_Pending``, or an error raised."""


class NicUpdates:
    """Assign and unassign on the NICs of one subscription (the module docstring has the rules)."""

    def __init__(self, client: ArmClient) -> None:
        self.client = client
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

    @property
    def _network(self) -> Any:
        return self.client.network

    @property
    def _compute(self) -> Any:
        return self.client.compute

    @property
    def _reserve(self) -> float:
        return self.client.settings.operation_timeout * SETTLE_SHARE

    # -- assign ------------------------------------------------------------------------------------

    async def assign(self, ref: ids.NicRef, count: int) -> list[str]:
        """``count`` new secondary IP configurations (dynamic allocation, in the NIC's subnet, with the
        primary configuration's application security groups), in one update; their addresses."""
        with self.client.deadline() as deadline:
            async with self._locked(ref, deadline):
                return await self._assign(ref, count, deadline)

    async def _assign(self, ref: ids.NicRef, count: int, deadline: Deadline) -> list[str]:
        names: list[str] | None = None
        # One read more than writes: after the last 412, a read still tells whether that write landed.
        for attempt in range(1, WRITE_ATTEMPTS + 2):
            target = await self._read(ref)
            if names is not None and set(names) & target.names():
                # After a 412: the write before landed, its answer lost and the SDK's retry refused.
                return await self._settle(ref, deadline, _assigned(names, None), first=target)
            if attempt > WRITE_ATTEMPTS:
                break
            if len(target.configs) + count > IP_CONFIGURATIONS_PER_NIC:
                raise errors.InterfaceLimitExceeded(
                    f"{ref.id} has {len(target.configs)} IP configurations; {count} more would exceed "
                    f"Azure's {IP_CONFIGURATIONS_PER_NIC} per NIC",
                    code="IpConfigurationLimit",
                    operation=target.operation,
                )
            names = names or _new_names(target.names(), count)
            primary = r.primary_config(target.configs)
            if primary is None:
                raise errors.InvalidRequest(
                    f"{ref.id} has no IP configuration",
                    code="NoPrimaryConfiguration",
                    operation=target.operation,
                )
            new = [*target.configs, *(_secondary(n, primary, scale_set=ref.in_scale_set) for n in names)]
            try:
                after = await self._write(target, new)
            except errors.ProviderError as exc:
                if _stale_or_raise(ref, exc, attempt):
                    continue
                return await self._settle(ref, deadline, _assigned(names, exc))
            # The write ended Succeeded; the addresses still have to be on the NIC.
            return await self._settle(ref, deadline, _assigned(names, None), first=after)
        raise _kept_changing(ref)

    # -- unassign ----------------------------------------------------------------------------------

    async def unassign(self, ref: ids.NicRef, addresses: Collection[str]) -> None:
        """Remove exactly the IP configurations holding ``addresses``, in one update."""
        with self.client.deadline() as deadline:
            async with self._locked(ref, deadline):
                await self._unassign(ref, set(addresses), deadline)

    async def _unassign(self, ref: ids.NicRef, wanted: set[str], deadline: Deadline) -> None:
        ours: dict[str, str] | None = None  # configuration name → address, as the first read found them
        # One read more than writes, as in _assign.
        for attempt in range(1, WRITE_ATTEMPTS + 2):
            target = await self._read(ref)
            if ours is None:
                ours = _holders(target, wanted)
                removing = set(ours)
            else:
                removing = _still_held(target, ours)
                if not removing:
                    # After a 412: the write before landed, its answer lost and the SDK's retry refused
                    # (or another writer removed them).
                    return await self._settle(ref, deadline, _removed(ours, set(ours), None), first=target)
                if attempt > WRITE_ATTEMPTS:
                    break
                if target.primary_name() in removing:
                    raise errors.InvalidRequest(
                        f"{ours[target.primary_name()]} became the primary address of {ref.id}; "
                        "nothing was removed",
                        code="PrimaryAddress",
                        operation=target.operation,
                    )
            try:
                await self._write(target, [c for c in target.configs if _name(c) not in removing])
            except errors.ProviderError as exc:
                if _stale_or_raise(ref, exc, attempt):
                    continue
                return await self._settle(ref, deadline, _removed(ours, removing, exc))
            return None
        raise _kept_changing(ref)

    # -- settling ----------------------------------------------------------------------------------

    async def _settle(
        self, ref: ids.NicRef, deadline: Deadline, judge: Judge[T], *, first: _Target | None = None
    ) -> T:
        """Read the NIC (and VM) until ``judge`` decides, every ``polling_interval``; at the deadline,
        ``OutcomeUnknown``. Runs under the target's lock, so no update of ours is in between."""
        look, why = first, "the NIC was not read"
        while True:
            if look is None:
                try:
                    look = await self._read(ref)
                except errors.NotFound:
                    raise  # the NIC is gone, and whatever it held with it
                except errors.ProviderError as exc:
                    # A read that may succeed later is tried again; one that cannot (no permission,
                    # the client closed for shutdown) ends the wait now.
                    if not _retryable(exc):
                        raise _outcome_unknown(ref, f"the NIC could not be read ({exc.code})") from exc
                    why = f"the NIC could not be read ({exc.code})"
            if look is not None:
                verdict = judge(look)
                if not isinstance(verdict, _Pending):
                    return verdict
                why = verdict.why
            wait = min(self.client.settings.polling_interval, deadline.left())
            if wait <= 0:
                raise _outcome_unknown(ref, f"{why} at the deadline")
            await asyncio.sleep(wait)
            look = None

    # -- reading and writing -----------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _locked(self, ref: ids.NicRef, deadline: Deadline) -> AsyncIterator[None]:
        # A scale-set NIC is written through its VM, so updates of all of a VM's NICs are serialized.
        key = ref.vm.id if ref.in_scale_set else ref.id
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        try:
            async with asyncio.timeout_at(deadline.when - self._reserve):
                await lock.acquire()
        except TimeoutError as exc:
            raise errors.TransientError(
                f"another update of {key} held it until the deadline (operation_timeout); nothing was sent",
                code="OperationTimeout",
                operation=_write_operation(ref),
            ) from exc
        try:
            yield
        finally:
            lock.release()

    async def read_nic(self, ref: ids.NicRef) -> Json:
        if ref.in_scale_set:
            return await self.client.get(
                "NetworkInterfaces.GetVirtualMachineScaleSetNetworkInterface",
                lambda: self._network.network_interfaces.get_virtual_machine_scale_set_network_interface(
                    ref.resource_group, ref.scale_set, ref.index, ref.name
                ),
            )
        return await self.client.get(
            "NetworkInterfaces.Get",
            lambda: self._network.network_interfaces.get(ref.resource_group, ref.name),
        )

    async def _read(self, ref: ids.NicRef) -> _Target:
        if not ref.in_scale_set:
            return _nic_target(ref, await self.read_nic(ref))
        vm_ref = ref.vm
        vm, nic = await gather_all(
            [
                self.client.get(
                    "VirtualMachineScaleSetVMs.Get",
                    lambda: self._compute.virtual_machine_scale_set_vms.get(
                        vm_ref.resource_group, vm_ref.scale_set, vm_ref.index
                    ),
                ),
                self.read_nic(ref),
            ]
        )
        entry = _scale_set_nic_entry(vm, ref.name)
        if entry is None:
            raise errors.NotFound(
                f"the model of {vm_ref.id} has no NIC configuration named {ref.name}",
                code="NotFound",
                operation="VirtualMachineScaleSetVMs.Get",
            )
        configs = copy.deepcopy(list(r.props(entry).get("ipConfigurations") or []))
        return _Target(ref=ref, nic=nic, vm=vm, configs=configs)

    async def _write(self, target: _Target, configs: list[Json]) -> _Target | None:
        """Apply ``configs`` conditionally on the version read; the NIC afterwards when the answer
        carries it (a standalone NIC's), else ``None``."""
        if target.vm is None:
            return _nic_target(target.ref, await self._write_nic(target.ref, target.nic, configs))
        await self._write_scale_set_vm(target.ref, target.vm, configs)
        return None

    async def _write_nic(self, ref: ids.NicRef, nic: Json, configs: list[Json]) -> Json:
        body = copy.deepcopy(nic)
        body.setdefault("properties", {})["ipConfigurations"] = configs
        # Always conditional: the role's networkInterfaces/write would let a PUT to a new name create
        # a NIC, and ARM answers a conditional PUT to a NIC that does not exist (deleted since the
        # read) with 412 instead. ``*`` when the read carried no ETag: "only if it exists".
        headers = {"If-Match": str(nic["etag"]) if nic.get("etag") else "*"}
        # The SDK model serializes without the read-only fields (provisioning state, MAC address,
        # the VM reference), as every Azure client sends a NIC back; unknown fields are kept.
        return await self.client.lro(
            "NetworkInterfaces.CreateOrUpdate",
            lambda: self._network.network_interfaces.begin_create_or_update(
                ref.resource_group, ref.name, NetworkInterface(body), headers=headers
            ),
            reserve=self._reserve,
        )

    async def _write_scale_set_vm(self, ref: ids.NicRef, vm: Json, configs: list[Json]) -> None:
        vm_ref = ref.vm
        body = copy.deepcopy(vm)
        entry = _scale_set_nic_entry(body, ref.name)
        assert entry is not None  # _read found it in the same document
        entry.setdefault("properties", {})["ipConfigurations"] = configs
        storage = (body.get("properties") or {}).get("storageProfile")
        if isinstance(storage, dict):
            storage.pop("imageReference", None)
        etag = vm.get("etag")
        await self.client.lro(
            "VirtualMachineScaleSetVMs.Update",
            lambda: self._compute.virtual_machine_scale_set_vms.begin_update(
                vm_ref.resource_group,
                vm_ref.scale_set,
                vm_ref.index,
                VirtualMachineScaleSetVM(body),
                etag=etag,
                match_condition=MatchConditions.IfNotModified if etag else None,
            ),
            reserve=self._reserve,
        )


# -- judges: what one read of the NIC says about a write ---------------------------------------------


def _assigned(names: Sequence[str], cause: errors.ProviderError | None) -> Judge[list[str]]:
    """Whether the configurations ``names`` were added: their addresses once they are all on the NIC
    and it (and its VM) is ``Succeeded``. ``cause``: the write's error, raised when the read shows that
    the write did not land; ``None`` when the write is known to have landed."""
    wanted = [n.lower() for n in names]

    def judge(target: _Target) -> list[str] | _Pending:
        held = [n for n in wanted if n in target.names()]
        state = target.state()
        if state == "busy":
            return _Pending(f"{target.ref.id} is still Updating")
        if len(held) == len(wanted):
            if state == "failed":
                raise _outcome_unknown(target.ref, f"{names} are on the NIC but its provisioning failed")
            addresses = target.addresses()
            if all(addresses.get(n) for n in wanted):
                return sorted((addresses[n] for n in wanted), key=address_key)
            return _Pending(f"{names} have no address yet")
        if held:
            raise _outcome_unknown(target.ref, f"only {held} of {names} are on the NIC")
        raise _not_applied(target, cause, f"none of {names} are on the NIC")

    return judge


def _removed(
    ours: Mapping[str, str], removing: Collection[str], cause: errors.ProviderError | None
) -> Judge[None]:
    """Whether the configurations ``removing`` (of ``ours``: name → address) were removed: done once
    none of them holds its address any more and the NIC (and its VM) is ``Succeeded``. ``cause`` as
    for :func:`_assigned`."""

    def judge(target: _Target) -> _Pending | None:
        left = _still_held(target, {n: a for n, a in ours.items() if n in removing})
        state = target.state()
        if state == "busy":
            return _Pending(f"{target.ref.id} is still Updating")
        if not left:
            if state == "failed":
                raise _outcome_unknown(target.ref, f"{sorted(removing)} are gone but its provisioning failed")
            return None
        if len(left) < len(removing):
            raise _outcome_unknown(target.ref, f"{sorted(left)} of {sorted(removing)} are still on the NIC")
        raise _not_applied(target, cause, f"{sorted(removing)} are all still on the NIC")

    return judge


def _not_applied(target: _Target, cause: errors.ProviderError | None, what: str) -> errors.ProviderError:
    """The write did not land (or was undone), so nothing changed: the write's own error, saying so."""
    if cause is not None:
        settled = type(cause)(
            f"{cause.message} (settled: {what}; nothing changed)",
            code=cause.code,
            operation=cause.operation,
            retry_after=cause.retry_after,
        )
        settled.__cause__ = cause
        return settled
    how = "its update ended Failed" if target.state() == "failed" else "another writer undid the update"
    return errors.TransientError(
        f"{target.ref.id}: {what}: {how}", code="NotApplied", operation=target.operation
    )


def _holders(target: _Target, wanted: set[str]) -> dict[str, str]:
    """The secondary configurations holding ``wanted``, name → address.

    Raises:
        errors.InvalidRequest: an address is the primary one, or on no configuration of the NIC.
    """
    primary = target.primary_name()
    by_address = {a: n for n, a in target.addresses().items()}
    if primary and target.addresses().get(primary) in wanted:
        raise errors.InvalidRequest(
            f"{target.addresses()[primary]} is the primary address of {target.ref.id}",
            code="PrimaryAddress",
            operation=target.operation,
        )
    missing = sorted(wanted - set(by_address), key=address_key)
    if missing:
        raise errors.InvalidRequest(
            f"{', '.join(missing)} not assigned to {target.ref.id}; nothing was removed",
            code="AddressNotAssigned",
            operation=target.operation,
        )
    return {by_address[a]: a for a in wanted}


def _still_held(target: _Target, ours: Mapping[str, str]) -> set[str]:
    """Names of ``ours`` whose configuration still holds the address it had."""
    addresses = target.addresses()
    return {n for n, a in ours.items() if addresses.get(n) == a}


def _kept_changing(ref: ids.NicRef) -> errors.TransientError:
    return errors.TransientError(
        f"{ref.id} kept changing: {WRITE_ATTEMPTS} conditional updates failed",
        code="PreconditionFailed",
        operation=_write_operation(ref),
    )


def _nic_target(ref: ids.NicRef, nic: Json) -> _Target:
    return _Target(
        ref=ref, nic=nic, vm=None, configs=[copy.deepcopy(dict(c)) for c in r.ip_configurations(nic)]
    )


def _scale_set_nic_entry(vm: Json, nic_name: str) -> Any:
    """The entry of the VM's ``networkProfileConfiguration`` for the NIC named ``nic_name`` (a Uniform
    scale set names each VM's NIC after its configuration)."""
    profile = r.props(vm).get("networkProfileConfiguration") or {}
    for entry in profile.get("networkInterfaceConfigurations") or ():
        if isinstance(entry, dict) and str(entry.get("name", "")).lower() == nic_name.lower():
            return entry
    return None


def _secondary(name: str, primary: Mapping[str, Any], *, scale_set: bool) -> Json:
    """A new secondary IPv4 configuration in the primary's subnet, with its security groups."""
    p = r.props(primary)
    properties: dict[str, Any] = {
        "primary": False,
        "privateIPAddressVersion": "IPv4",
        "subnet": {"id": (p.get("subnet") or {}).get("id")},
    }
    if not scale_set:
        properties["privateIPAllocationMethod"] = "Dynamic"
    groups = [{"id": g["id"]} for g in p.get("applicationSecurityGroups") or () if g.get("id")]
    if groups:
        properties["applicationSecurityGroups"] = groups
    return {"name": name, "properties": properties}
