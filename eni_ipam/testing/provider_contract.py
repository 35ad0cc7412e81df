"""The Provider contract as executable checks, shipped for every provider's tests.

:mod:`eni_ipam.core.provider` states what a provider promises; this module checks it, the way
``trio.testing``'s ``check_*_stream`` helpers check a stream implementation. A provider's test
harness builds a fresh :class:`ContractEnv` (a provider over a cloud prepared as the fields below
describe) and either runs every check with :func:`check_provider`, or parametrizes over
:data:`CONTRACT_CHECKS` so each check reports on its own::

    @pytest.mark.parametrize("check", CONTRACT_CHECKS, ids=lambda c: c.__name__)
    async def test_contract(check):
        await check(await make_env())

Every check raises ``AssertionError`` with a message saying what the provider did wrong; none
depends on pytest. Checks mutate the cloud, so each needs an env of its own.

A cloud's interfaces are devices of their instance, found by the node side by MAC address; a
provider whose interfaces are not (the generic provider's virtual interface) says so with
``devices=False``, and the MAC check is skipped.

The instance type's limits say which parts of the contract apply. Where ``limits.addresses`` is
false (prefixes only), the address checks run in /28 prefixes. Where ``limits.hot_attach`` is false
(Azure, generic), ``create_interface`` must refuse with ``AttachmentLimitExceeded`` and change
nothing, and the env names an interface in the small subnet instead.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from eni_ipam.core import errors
from eni_ipam.core.devices import MAC_PATTERN, MAX_NETWORK_CARD
from eni_ipam.core.model import PREFIX_SIZE, CreateInterface, Instance, InstanceLimits, Interface
from eni_ipam.core.provider import Provider, shared_view_reader

UNKNOWN_INSTANCE = "i-0fffffffffffffff0"
UNKNOWN_INTERFACE = "eni-0fffffffffffffff0"
UNKNOWN_TYPE = "x9.contract-unknown"
TAG = "eni-ipam.io/contract"


@dataclasses.dataclass(frozen=True, kw_only=True)
class ContractEnv:
    """A provider over a cloud prepared for the contract checks."""

    provider: Provider
    instance_id: str
    """A running instance with only its primary interface (no secondary addresses yet)."""
    limits: InstanceLimits
    """Its instance type's limits; at least 3 adapters."""
    subnet_id: str
    """The instance's own subnet, with plenty of free addresses (100 or more)."""
    small_subnet_id: str
    """A subnet in the instance's VPC and zone with few free addresses (2 to 15)."""
    security_group_ids: tuple[str, ...]
    """Security groups of the instance's VPC."""
    capabilities: frozenset[str] = frozenset()
    """Optional features to check: ``prefixes`` (/28 prefix delegation on this instance type),
    ``ipv6_prefixes`` (IPv6 /80 delegation, with ``ipv6_subnet_id``)."""
    ipv6_subnet_id: str = ""
    """With ``ipv6_prefixes``: a subnet of the instance's VPC and zone with an IPv6 block."""
    small_interface_id: str = ""
    """Required where ``limits.hot_attach`` is false: an attached interface in ``small_subnet_id``
    with no secondary addresses or prefixes yet (on any instance)."""
    out_of_scope_instance_id: str = ""
    """A running instance that the provider's configured scope leaves out (another VPC, without the
    instance tags, another resource group). Empty: the scope check is not run."""
    devices: bool = True
    """The instances' interfaces are devices with a MAC address (every cloud's). ``False`` for a
    provider without devices: :func:`check_mac_addresses` is then not run."""


Check = Callable[[ContractEnv], Awaitable[None]]
E = TypeVar("E", bound=BaseException)
R = TypeVar("R")


# -- helpers --------------------------------------------------------------------------------------


async def _raises(kind: type[E], call: Awaitable[object], what: str) -> E:
    try:
        await call
    except kind as exc:
        return exc
    except Exception as exc:
        raise AssertionError(f"{what}: expected {kind.__name__}, got {type(exc).__name__}: {exc}") from exc
    raise AssertionError(f"{what}: expected {kind.__name__}, nothing was raised")


async def _succeeds(call: Awaitable[R], what: str) -> R:
    try:
        return await call
    except Exception as exc:
        raise AssertionError(f"{what}: expected success, got {type(exc).__name__}: {exc}") from exc


async def _instance(env: ContractEnv) -> Instance:
    instance = await env.provider.describe_instance(instance_id=env.instance_id)
    assert instance is not None, (
        f"describe_instance({env.instance_id!r}) returned None for a running instance"
    )
    return instance


async def _primary(env: ContractEnv) -> Interface:
    primary = (await _instance(env)).primary()
    assert primary is not None, f"instance {env.instance_id} has no interface at device index 0"
    return primary


async def _interface(env: ContractEnv, interface_id: str) -> Interface:
    iface = (await _instance(env)).interface(interface_id)
    assert iface is not None, f"interface {interface_id} is not attached to {env.instance_id}"
    return iface


async def _cidr(env: ContractEnv, subnet_id: str) -> ipaddress.IPv4Network:
    subnets = (await env.provider.resync()).subnets
    assert subnet_id in subnets, f"resync does not report subnet {subnet_id}"
    return ipaddress.IPv4Network(subnets[subnet_id].cidr)


def _tags(check: str) -> dict[str, str]:
    return {TAG: check}


async def _create(
    env: ContractEnv,
    *,
    check: str,
    index: int,
    count: int = 1,
    subnet: str = "",
    token: str = "",
    ipv6: bool = False,
) -> Interface:
    """Create an interface tagged for ``check`` (with an IPv6 /80 when ``ipv6``); its token is the
    check's and the index's unless given."""
    return await env.provider.create_interface(
        instance_id=env.instance_id,
        request=CreateInterface(
            subnet_id=subnet or env.subnet_id,
            security_groups=env.security_group_ids,
            device_index=index,
            count=count,
            ipv6_prefixes=1 if ipv6 else 0,
        ),
        tags=_tags(check),
        token=token or f"contract-{check}-{index}",
    )


async def _no_leak(env: ContractEnv, check: str, attached: int) -> None:
    leaked = await env.provider.list_detached_interfaces(tags=_tags(check))
    assert not leaked, f"failed create leaked detached interfaces {[i.id for i in leaked]}"
    count = len((await _instance(env)).interfaces)
    assert count == attached, (
        f"expected {attached} interfaces attached after the failed create, found {count}"
    )


def _unit(env: ContractEnv) -> dict[str, Any]:
    """Keyword arguments for assigning in the provider's unit: addresses, or /28 prefixes."""
    return {} if env.limits.addresses else {"prefixes": True}


def _unit_size(env: ContractEnv) -> int:
    return 1 if env.limits.addresses else PREFIX_SIZE


def _held(env: ContractEnv, iface: Interface) -> Sequence[str]:
    """What the interface holds in the provider's unit."""
    return iface.addresses if env.limits.addresses else iface.prefixes


def _unassign(env: ContractEnv, interface_id: str, items: Sequence[str]) -> Awaitable[None]:
    if env.limits.addresses:
        return env.provider.unassign_addresses(interface_id=interface_id, addresses=items)
    return env.provider.unassign_addresses(interface_id=interface_id, prefixes=items)


def _within(item: str, cidr: ipaddress.IPv4Network) -> bool:
    return ipaddress.IPv4Network(item, strict=False).subnet_of(cidr)


async def _create_refused(env: ContractEnv, check: str) -> None:
    """Where the cloud cannot attach to a running instance, create is refused and changes nothing."""
    before = len((await _instance(env)).interfaces)
    await _raises(
        errors.AttachmentLimitExceeded,
        _create(env, check=check, index=before),
        "create_interface on a provider that cannot attach to a running instance",
    )
    await _no_leak(env, check, attached=before)


async def _small_interface(env: ContractEnv) -> Interface:
    assert env.small_interface_id, "small_interface_id is required where limits.hot_attach is false"
    for instance in (await env.provider.resync()).instances.values():
        iface = instance.interface(env.small_interface_id)
        if iface is not None:
            assert iface.subnet_id == env.small_subnet_id, (
                f"small_interface_id {iface.id} is in {iface.subnet_id}, not {env.small_subnet_id}"
            )
            return iface
    raise AssertionError(f"resync does not report the small interface {env.small_interface_id}")


def _in_order(addresses: Sequence[str]) -> bool:
    keys = [int(ipaddress.IPv4Address(a.split("/", 1)[0])) for a in addresses]
    return keys == sorted(keys)


# -- checks ---------------------------------------------------------------------------------------


async def check_resync_shape(env: ContractEnv) -> None:
    """resync reports the instance with its primary at index 0, the subnets, groups and limits."""
    snap = await env.provider.resync()
    instance = snap.instances.get(env.instance_id)
    assert instance is not None, f"resync does not report instance {env.instance_id}"
    assert instance.running, "a running instance is reported as not running"
    assert [i.device_index for i in instance.interfaces] == [0], (
        f"expected only a primary interface at index 0, got {[i.device_index for i in instance.interfaces]}"
    )
    primary = instance.interfaces[0]
    assert primary.instance_id == env.instance_id, (
        f"primary interface reports instance {primary.instance_id!r}"
    )
    assert primary.primary_ip not in primary.addresses, "the primary address is listed among the secondaries"
    for subnet in (env.subnet_id, env.small_subnet_id):
        assert subnet in snap.subnets, f"resync does not report subnet {subnet}"
    cidr = ipaddress.IPv4Network(snap.subnets[primary.subnet_id].cidr)
    # A virtual interface (the generic provider's) may have no address of its own.
    if primary.primary_ip:
        assert ipaddress.IPv4Address(primary.primary_ip) in cidr, f"{primary.primary_ip} is outside {cidr}"
    for group in env.security_group_ids:
        assert group in snap.security_groups, f"resync does not report security group {group}"
    assert snap.limits.get(instance.type) == env.limits, (
        f"limits of {instance.type}: expected {env.limits}, got {snap.limits.get(instance.type)}"
    )


async def check_shared_view(env: ContractEnv) -> None:
    """A provider offering the shared view (:class:`~eni_ipam.core.provider.SharedViewReader`)
    reports the subnets and groups its resync does, with the same free counts, and no instance;
    one that offers none passes."""
    reader = shared_view_reader(env.provider)
    if reader is None:
        return
    shared = await reader.shared_view()
    full = await env.provider.resync()
    assert not shared.instances, "the shared view reports instances"
    assert dict(shared.subnets) == dict(full.subnets), (
        f"the shared view's subnets differ from the resync's: {shared.subnets} != {full.subnets}"
    )
    assert set(shared.security_groups) == set(full.security_groups), (
        f"the shared view's groups differ: {sorted(shared.security_groups)} != {sorted(full.security_groups)}"
    )


async def check_mac_addresses(env: ContractEnv) -> None:
    """(``devices``) Every interface attached to an instance carries a device's MAC address
    (lowercase, colon-separated, unicast, not all zeros), unique on its instance, the same in
    resync and in describe_instance, and a network card in bounds; so does a created interface."""
    if not env.devices:
        return
    if env.limits.hot_attach:
        await _create(env, check="mac", index=1)
    snap = await env.provider.resync()
    for instance in snap.instances.values():
        seen: dict[str, str] = {}
        for iface in instance.interfaces:
            mac = iface.mac_address
            assert re.fullmatch(MAC_PATTERN, mac) and mac != "00:00:00:00:00:00", (
                f"interface {iface.id} of {instance.id} has no device's MAC address: {mac!r}"
            )
            assert mac not in seen, f"interfaces {seen.get(mac)} and {iface.id} of {instance.id} share {mac}"
            seen[mac] = iface.id
            assert 0 <= iface.network_card <= MAX_NETWORK_CARD, (
                f"interface {iface.id} is on network card {iface.network_card}"
            )
    described = await _instance(env)
    listed = snap.instances[env.instance_id]
    assert [(i.id, i.mac_address) for i in described.interfaces] == [
        (i.id, i.mac_address) for i in listed.interfaces
    ], "describe_instance and resync disagree on the interfaces' MAC addresses"


async def check_resync_changes(env: ContractEnv) -> None:
    """A resync that says what changed names every instance that is not the object its base held
    (the reconciler looks at no other node): the one whose addresses changed, at least."""
    first = await env.provider.resync()
    primary = await _primary(env)
    await env.provider.assign_addresses(interface_id=primary.id, count=1, **_unit(env))
    snap = await env.provider.resync()
    changes = snap.changes
    if changes is None:
        return  # the provider does not say: every node is looked at
    since, named = changes.since, changes.instance_ids
    unnamed = sorted(
        {i for i, instance in snap.instances.items() if since.get(i) is not instance and i not in named}
        | {i for i in since if i not in snap.instances and i not in named}
    )
    assert not unnamed, f"instances not the objects of the snapshot changes name as base, unnamed: {unnamed}"
    if since is first.instances:
        assert env.instance_id in named, f"{env.instance_id} gained an address and is not named as changed"


async def check_describe_instance(env: ContractEnv) -> None:
    """describe_instance agrees with resync, and answers None for an instance that does not exist."""
    want = (await env.provider.resync()).instances[env.instance_id]
    got = await _instance(env)
    for field in ("id", "type", "vpc_id", "zone", "subnet_id", "running"):
        assert getattr(got, field) == getattr(want, field), (
            f"describe_instance {field}={getattr(got, field)!r}, resync says {getattr(want, field)!r}"
        )
    assert [(i.id, i.device_index, i.primary_ip) for i in got.interfaces] == [
        (i.id, i.device_index, i.primary_ip) for i in want.interfaces
    ], "describe_instance and resync disagree on the interfaces"
    missing = await _succeeds(
        env.provider.describe_instance(instance_id=UNKNOWN_INSTANCE), "describe_instance of an unknown id"
    )
    assert missing is None, f"describe_instance of an unknown id returned {missing!r}, not None"


async def check_out_of_scope_instance(env: ContractEnv) -> None:
    """An instance outside the configured scope is never listed, and describe_instance by its id (a
    node's providerID) refuses it with InstanceOutOfScope naming it, never answering its view."""
    if not env.out_of_scope_instance_id:
        return
    outside = env.out_of_scope_instance_id
    assert outside not in (await env.provider.resync()).instances, (
        f"resync lists {outside}, outside the scope"
    )
    call = env.provider.describe_instance(instance_id=outside)
    refused = await _raises(
        errors.InstanceOutOfScope, call, f"describe_instance of {outside}, outside the scope"
    )
    assert refused.instance_id == outside and outside in str(refused), str(refused)
    assert refused.check, "InstanceOutOfScope says which check failed"
    inside = await _instance(env)  # the refusal cached nothing wrong: an instance in scope still reads
    assert inside.id == env.instance_id


async def check_instance_limits(env: ContractEnv) -> None:
    """instance_limits returns the type's limits, and raises LimitsUnknown for an unknown type."""
    instance = await _instance(env)
    got = await env.provider.instance_limits(instance_type=instance.type)
    assert got == env.limits, f"instance_limits({instance.type!r}) = {got}, expected {env.limits}"
    await _raises(
        errors.LimitsUnknown, env.provider.instance_limits(instance_type=UNKNOWN_TYPE), "unknown type"
    )


async def check_assign_exact_count(env: ContractEnv) -> None:
    """assign returns exactly the new addresses: distinct, ordered, in the subnet, not held before."""
    primary = await _primary(env)
    cidr = await _cidr(env, primary.subnet_id)
    held = {primary.primary_ip, *_held(env, primary)}
    first = await env.provider.assign_addresses(interface_id=primary.id, count=3, **_unit(env))
    second = await env.provider.assign_addresses(interface_id=primary.id, count=2, **_unit(env))
    for new, count in ((first, 3), (second, 2)):
        assert len(new) == count == len(set(new)), f"asked for {count} addresses, got {new}"
        assert _in_order(new), f"new addresses are not in address order: {new}"
        assert not held & set(new), f"assign returned addresses already held: {sorted(held & set(new))}"
        outside = [a for a in new if not _within(a, cidr)]
        assert not outside, f"addresses {outside} are outside the interface's subnet {cidr}"
        held |= set(new)
    after = set(_held(env, await _primary(env)))
    assert after == held - {primary.primary_ip}, (
        f"the interface holds {sorted(after)}, expected {sorted(held - {primary.primary_ip})}"
    )


async def check_assign_named_addresses(env: ContractEnv) -> None:
    """assign with named ``addresses`` assigns exactly those, or is refused with
    ``ExplicitAddressesNotSupported`` changing nothing; a named address another interface holds
    raises AddressInUse, assigning nothing."""
    primary = await _primary(env)
    cidr = await _cidr(env, primary.subnet_id)
    held: set[str] = set()
    for instance in (await env.provider.resync()).instances.values():
        for iface in instance.interfaces:
            if iface.subnet_id == primary.subnet_id:
                held.update((iface.primary_ip, *iface.addresses))
    # From the top of the subnet (below the broadcast, which the cloud reserves): clouds hand out
    # the lowest addresses first, so these are free.
    candidates = [str(a) for a in list(cidr.hosts())[-40:][::-1] if str(a) not in held]
    named = sorted(candidates[:2], key=lambda a: int(ipaddress.IPv4Address(a)))
    call = env.provider.assign_addresses(interface_id=primary.id, count=2, addresses=named)
    if not env.limits.addresses:
        refused = await _raises(errors.InvalidRequest, call, "named addresses on a prefix-only provider")
        assert refused.code == "ExplicitAddressesNotSupported", f"refused with code {refused.code!r}"
        return
    try:
        new = await call
    except errors.InvalidRequest as exc:
        assert exc.code == "ExplicitAddressesNotSupported", (
            f"named free addresses {named} were refused: {type(exc).__name__}: {exc}"
        )
        after = await _primary(env)
        assert after.addresses == primary.addresses, f"a refused assign changed the interface to {after}"
        return
    assert new == named, f"asked for {named}, assign returned {new}"
    holds = set((await _primary(env)).addresses)
    assert holds == set(primary.addresses) | set(named), f"the interface holds {sorted(holds)}"
    if not env.limits.hot_attach:
        return
    other = await _create(env, check="named", index=1, count=0)
    taken = await _raises(
        errors.AddressInUse,
        env.provider.assign_addresses(interface_id=other.id, count=1, addresses=[named[0]]),
        f"assign of {named[0]}, which another interface holds",
    )
    assert isinstance(taken, errors.InvalidRequest)
    seen = await _interface(env, other.id)
    assert not seen.addresses, f"a refused named assign left {seen.addresses} on {other.id}"


async def check_assign_beyond_interface_limit(env: ContractEnv) -> None:
    """assigning more than the interface's free slots raises InterfaceLimitExceeded, assigning nothing."""
    primary = await _primary(env)
    too_many = env.limits.slots_per_interface - primary.slots_used + 1
    await _raises(
        errors.InterfaceLimitExceeded,
        env.provider.assign_addresses(interface_id=primary.id, count=too_many, **_unit(env)),
        f"assign {too_many} addresses on an interface with {too_many - 1} free slots",
    )
    after = await _primary(env)
    assert (after.addresses, after.prefixes) == (primary.addresses, primary.prefixes), (
        f"a failed assign changed the interface to {after}"
    )


async def check_assign_unknown_interface(env: ContractEnv) -> None:
    """assign on an interface that does not exist raises NotFound."""
    call = env.provider.assign_addresses(interface_id=UNKNOWN_INTERFACE, count=1, **_unit(env))
    await _raises(errors.NotFound, call, "assign on an unknown interface")


async def check_unassign(env: ContractEnv) -> None:
    """unassign removes exactly the given addresses; an address not held fails and removes nothing."""
    primary = await _primary(env)
    new = await env.provider.assign_addresses(interface_id=primary.id, count=4, **_unit(env))
    await _unassign(env, primary.id, new[:2])
    after = set(_held(env, await _primary(env)))
    assert after == set(_held(env, primary)) | set(new[2:]), (
        f"after unassigning {new[:2]} the interface holds {sorted(after)}"
    )
    await _raises(
        errors.ProviderError,
        _unassign(env, primary.id, [new[2], new[0]]),
        f"unassign of {new[0]}, which the interface no longer holds",
    )
    final = set(_held(env, await _primary(env)))
    assert final == after, f"a failed unassign removed addresses: {sorted(final)}"


async def check_create_interface(env: ContractEnv) -> None:
    """create_interface attaches a tagged interface with its addresses; the same token reuses it."""
    if not env.limits.hot_attach:
        return await _create_refused(env, "create_interface")
    iface = await _create(env, check="create", index=1, count=2)
    assert (iface.instance_id, iface.device_index) == (env.instance_id, 1), (
        f"created interface is attached to {iface.instance_id!r} at {iface.device_index}, not at index 1"
    )
    assert len(iface.addresses) == 2, f"created interface carries {iface.addresses}, expected 2 addresses"
    assert iface.subnet_id == env.subnet_id, f"created interface is in {iface.subnet_id}, not {env.subnet_id}"
    assert dict(iface.tags).items() >= _tags("create").items(), (
        f"created interface lacks its tags: {iface.tags}"
    )
    assert set(iface.security_groups) == set(env.security_group_ids), f"groups {iface.security_groups}"
    assert iface.delete_on_termination, "created interface is not marked delete-on-termination"
    seen = await _interface(env, iface.id)
    assert (seen.device_index, set(seen.addresses)) == (1, set(iface.addresses)), (
        f"describe_instance shows {seen}, create returned {iface}"
    )
    again = await _succeeds(
        _create(env, check="create", index=1, count=2), "create retried with the same token"
    )
    assert again.id == iface.id, f"a create retried with the same token made a second interface {again.id}"
    assert len((await _instance(env)).interfaces) == 2, "a retried create changed the number of interfaces"


async def check_create_on_occupied_index(env: ContractEnv) -> None:
    """create at an occupied device index (a stale view) attaches at the next free index instead."""
    if not env.limits.hot_attach:
        return await _create_refused(env, "create_on_occupied_index")
    iface = await _succeeds(_create(env, check="occupied", index=0), "create at device index 0 (taken)")
    assert (iface.instance_id, iface.device_index) == (env.instance_id, 1), (
        f"create at the taken index 0 gave {iface.instance_id!r} index {iface.device_index}, not index 1"
    )
    indexes = [i.device_index for i in (await _instance(env)).interfaces]
    assert indexes == [0, 1], f"after the create the instance has interfaces at {indexes}, expected [0, 1]"
    await _no_leak(env, "occupied", attached=2)


async def check_create_past_adapter_limit(env: ContractEnv) -> None:
    """create beyond the instance's adapters raises AttachmentLimitExceeded and leaks nothing."""
    if not env.limits.hot_attach:
        return await _create_refused(env, "create_past_adapter_limit")
    for index in range(1, env.limits.adapters):
        await _create(env, check="adapters", index=index)
    call = _create(env, check="adapters", index=env.limits.adapters)
    await _raises(errors.AttachmentLimitExceeded, call, f"create interface {env.limits.adapters + 1}")
    await _no_leak(env, "adapters", attached=env.limits.adapters)


async def check_create_retried_after_a_rollback(env: ContractEnv) -> None:
    """A create that failed and was rolled back succeeds when retried with the same token."""
    if not env.limits.hot_attach:
        return await _create_refused(env, "create_retried_after_a_rollback")
    for index in range(1, env.limits.adapters):
        await _create(env, check="retry", index=index)

    def create(index: int) -> Awaitable[Interface]:
        return _create(env, check="retry", index=index, token="contract-retry-after-rollback")

    await _raises(errors.AttachmentLimitExceeded, create(env.limits.adapters), "create past the adapters")
    freed = (await _instance(env)).interfaces[1]
    await env.provider.delete_interface(interface_id=freed.id)
    iface = await _succeeds(create(1), "the same create, retried once a slot is free")
    attached = await _interface(env, iface.id)
    assert attached.device_index == 1, f"the retried create is attached at {attached.device_index}, not 1"


async def check_subnet_exhaustion(env: ContractEnv) -> None:
    """assign beyond the subnet's free addresses raises SubnetExhausted, assigning nothing."""
    if not env.limits.hot_attach:
        return await _exhaust_small_interface(env)
    free = (await env.provider.resync()).subnets[env.small_subnet_id].available
    assert 2 <= free < 16, f"small_subnet_id must have 2 to 15 free addresses, it has {free}"
    slots = env.limits.slots_per_interface
    # When the subnet holds more than one interface can, a second interface takes the surplus first,
    # so that the limit the request hits is the subnet's, not the interface's.
    surplus = max(free - slots, 0)
    assert surplus <= slots, f"small_subnet_id has too many free addresses ({free}) for this instance type"
    if surplus:
        await _create(env, check="exhaust", index=2, count=surplus, subnet=env.small_subnet_id)
    iface = await _create(env, check="exhaust", index=1, count=0, subnet=env.small_subnet_id)
    remaining = (await env.provider.resync()).subnets[env.small_subnet_id].available
    expected = free - 1 - (surplus + 1 if surplus else 0)
    assert remaining == expected, f"the subnet reports {remaining} free addresses, expected {expected}"
    before = await _interface(env, iface.id)
    call = env.provider.assign_addresses(interface_id=iface.id, count=remaining + 1)
    await _raises(errors.SubnetExhausted, call, f"assign {remaining + 1} in a subnet with {remaining} free")
    after = await _interface(env, iface.id)
    assert after.addresses == before.addresses, f"a failed assign changed the addresses to {after.addresses}"


async def _exhaust_small_interface(env: ContractEnv) -> None:
    before = await _small_interface(env)
    free = (await env.provider.resync()).subnets[env.small_subnet_id].available
    units = free // _unit_size(env)
    assert units < env.limits.slots_per_interface - before.slots_used, (
        f"small_subnet_id has room for {units}, no fewer than the interface has: no subnet limit to hit"
    )
    kind: tuple[type[errors.CapacityError], ...] = (
        (errors.SubnetExhausted,)
        if env.limits.addresses
        else (errors.SubnetExhausted, errors.PrefixesExhausted)
    )
    call = env.provider.assign_addresses(interface_id=before.id, count=units + 1, **_unit(env))
    try:
        await call
    except kind:
        pass
    except Exception as exc:
        raise AssertionError(
            f"assign {units + 1} in a subnet with room for {units}: expected SubnetExhausted, "
            f"got {type(exc).__name__}: {exc}"
        ) from exc
    else:
        raise AssertionError(f"assign {units + 1} in a subnet with room for {units}: nothing was raised")
    after = await _small_interface(env)
    assert (after.addresses, after.prefixes) == (before.addresses, before.prefixes), (
        f"a failed assign changed the interface to {after}"
    )


async def check_prefixes(env: ContractEnv) -> None:
    """(``prefixes``) assign 1 prefix returns one aligned /28 in the subnet; none left → PrefixesExhausted."""
    if "prefixes" not in env.capabilities:
        return
    assert env.limits.supports_prefixes, "capability 'prefixes' on an instance type without prefix support"
    primary = await _primary(env)
    cidr = await _cidr(env, primary.subnet_id)
    new = await env.provider.assign_addresses(interface_id=primary.id, count=1, prefixes=True)
    assert len(new) == 1, f"asked for 1 prefix, got {new}"
    block = ipaddress.IPv4Network(new[0], strict=False)
    assert block.prefixlen == 28 and str(block) == new[0], f"{new[0]} is not an aligned /28"
    assert block.subnet_of(cidr), f"prefix {block} is outside the interface's subnet {cidr}"
    assert new[0] in (await _primary(env)).prefixes, f"prefix {new[0]} is not on the interface afterwards"
    if not env.limits.hot_attach:
        small = await _small_interface(env)
        free = (await env.provider.resync()).subnets[env.small_subnet_id].available
        if free >= PREFIX_SIZE:  # take every whole /28 first
            await env.provider.assign_addresses(
                interface_id=small.id, count=free // PREFIX_SIZE, prefixes=True
            )
        before = await _small_interface(env)
        call = env.provider.assign_addresses(interface_id=small.id, count=1, prefixes=True)
        await _raises(errors.PrefixesExhausted, call, "assign a prefix in a subnet with no whole /28 left")
        after = await _small_interface(env)
        assert after.prefixes == before.prefixes, f"a failed prefix assign left {after}"
        return
    small = await _create(env, check="prefixes", index=1, count=0, subnet=env.small_subnet_id)
    call = env.provider.assign_addresses(interface_id=small.id, count=1, prefixes=True)
    await _raises(errors.PrefixesExhausted, call, "assign a prefix in a subnet with under 16 free addresses")
    after = await _interface(env, small.id)
    assert not after.prefixes and not after.addresses, f"a failed prefix assign left {after}"


async def check_ipv6_prefixes(env: ContractEnv) -> None:
    """assign_ipv6_prefix on an interface whose subnet has no IPv6 block (the env's own subnet) raises
    InvalidRequest and delegates nothing. (``ipv6_prefixes``) a new interface created with
    ``ipv6_prefixes=1`` and an interface given one by assign_ipv6_prefix each hold a /80 of their
    subnet's block, two different ones."""
    primary = await _primary(env)
    call = env.provider.assign_ipv6_prefix(interface_id=primary.id)
    await _raises(errors.InvalidRequest, call, "an IPv6 prefix on an interface of an IPv4-only subnet")
    assert not (await _primary(env)).ipv6_prefixes, "a refused IPv6 prefix left one on the interface"
    if "ipv6_prefixes" not in env.capabilities:
        return
    assert env.limits.ipv6_prefixes, "capability 'ipv6_prefixes' on an instance type that takes none"
    block = ipaddress.IPv6Network((await env.provider.resync()).subnets[env.ipv6_subnet_id].ipv6_cidr)
    carried = await _create(env, check="ipv6", index=1, count=0, subnet=env.ipv6_subnet_id, ipv6=True)
    later = await _create(env, check="ipv6", index=2, count=0, subnet=env.ipv6_subnet_id)
    given = await env.provider.assign_ipv6_prefix(interface_id=later.id)
    held = [
        *(await _interface(env, carried.id)).ipv6_prefixes,
        *(await _interface(env, later.id)).ipv6_prefixes,
    ]
    assert len(held) == 2 and len(set(held)) == 2 and given in held, f"the two interfaces hold {held}"
    for prefix in held:
        network = ipaddress.IPv6Network(prefix)
        assert network.prefixlen == 80 and network.subnet_of(block), f"{prefix} is no /80 of {block}"


async def check_delete_interface(env: ContractEnv) -> None:
    """delete_interface removes an attached interface for good; deleting it again raises NotFound."""
    if not env.limits.hot_attach:
        # Nothing can be created to delete: the primary is refused, an unknown interface is NotFound.
        primary = await _primary(env)
        call = env.provider.delete_interface(interface_id=primary.id)
        await _raises(errors.ProviderError, call, "delete of the primary interface")
        assert (await _instance(env)).interface(primary.id) is not None, (
            f"{primary.id} is gone after a refusal"
        )
        missing = env.provider.delete_interface(interface_id=UNKNOWN_INTERFACE)
        await _raises(errors.NotFound, missing, "delete of an unknown interface")
        return
    iface = await _create(env, check="delete", index=1)
    await env.provider.delete_interface(interface_id=iface.id)
    assert (await _instance(env)).interface(iface.id) is None, f"{iface.id} is still attached after delete"
    leftovers = await env.provider.list_detached_interfaces(tags=_tags("delete"))
    assert not leftovers, f"{iface.id} was detached but not deleted"
    await _raises(errors.NotFound, env.provider.delete_interface(interface_id=iface.id), "delete twice")


async def check_delete_without_detach(env: ContractEnv) -> None:
    """delete_interface(detach=False) refuses an attached interface and keeps it attached."""
    iface = await _create(env, check="keep", index=1) if env.limits.hot_attach else await _primary(env)
    call = env.provider.delete_interface(interface_id=iface.id, detach=False)
    await _raises(errors.ProviderError, call, "delete of an attached interface with detach=False")
    assert (await _instance(env)).interface(iface.id) is not None, f"{iface.id} is gone or detached"


async def _create_ready(env: ContractEnv, check: str, count: int = 2) -> Interface:
    return await env.provider.create_ready_interface(
        subnet_id=env.subnet_id,
        security_groups=env.security_group_ids,
        count=count,
        tags=_tags(check),
        token=f"contract-{check}-ready",
        **_unit(env),
    )


async def _ready_refused(env: ContractEnv, check: str) -> None:
    """Where the cloud cannot attach to a running instance, ready interfaces are refused by code."""
    exc = await _raises(errors.InvalidRequest, _create_ready(env, check), "create_ready_interface")
    assert exc.code == "ReadyInterfacesNotSupported", f"refused with code {exc.code!r}"
    primary = await _primary(env)
    detached = dataclasses.replace(primary, instance_id="", device_index=-1)
    call = env.provider.attach_interface(interface=detached, instance_id=env.instance_id, device_index=1)
    exc = await _raises(errors.InvalidRequest, call, "attach_interface")
    assert exc.code == "ReadyInterfacesNotSupported", f"refused with code {exc.code!r}"
    await _no_leak(env, check, attached=len((await _instance(env)).interfaces))


async def check_ready_interface(env: ContractEnv) -> None:
    """create_ready_interface leaves a tagged interface detached with its addresses (the same token
    reuses it); attach_interface attaches it, as it is, in one step."""
    if not env.limits.hot_attach:
        return await _ready_refused(env, "ready")
    iface = await _succeeds(_create_ready(env, "ready"), "create_ready_interface")
    assert not iface.instance_id and iface.device_index < 0, (
        f"a ready interface is attached to {iface.instance_id!r} at {iface.device_index}"
    )
    assert len(_held(env, iface)) == 2, f"a ready interface carries {_held(env, iface)}, expected 2"
    assert dict(iface.tags).items() >= _tags("ready").items(), f"a ready interface lacks tags: {iface.tags}"
    assert set(iface.security_groups) == set(env.security_group_ids), f"groups {iface.security_groups}"
    listed = [i.id for i in await env.provider.list_detached_interfaces(tags=_tags("ready"))]
    assert listed == [iface.id], f"the detached listing shows {listed}, expected [{iface.id}]"
    again = await _succeeds(_create_ready(env, "ready"), "create_ready_interface retried with its token")
    assert again.id == iface.id, f"a retried create_ready_interface made a second interface {again.id}"
    attached = await _succeeds(
        env.provider.attach_interface(interface=iface, instance_id=env.instance_id, device_index=1),
        "attach_interface of a ready interface",
    )
    assert (attached.id, attached.instance_id, attached.device_index) == (iface.id, env.instance_id, 1), (
        f"attach_interface returned {attached}, expected {iface.id} on {env.instance_id} at index 1"
    )
    seen = await _interface(env, iface.id)
    assert set(_held(env, seen)) == set(_held(env, iface)), (
        f"the attached interface holds {_held(env, seen)}, it was made with {_held(env, iface)}"
    )
    left = await env.provider.list_detached_interfaces(tags=_tags("ready"))
    assert not left, f"an attached interface is still listed as detached: {[i.id for i in left]}"


async def check_ready_interface_failed_attach(env: ContractEnv) -> None:
    """A failed attach_interface never deletes the interface: it stays detached, with its addresses."""
    if not env.limits.hot_attach:
        return await _ready_refused(env, "ready_failed")
    iface = await _create_ready(env, "ready_failed")
    call = env.provider.attach_interface(interface=iface, instance_id=UNKNOWN_INSTANCE, device_index=1)
    await _raises(errors.ProviderError, call, "attach_interface to an unknown instance")
    left = await env.provider.list_detached_interfaces(tags=_tags("ready_failed"))
    assert [i.id for i in left] == [iface.id], f"after a failed attach the detached listing shows {left}"
    assert set(_held(env, left[0])) == set(_held(env, iface)), "a failed attach changed the addresses"


CONTRACT_CHECKS: tuple[Check, ...] = (
    check_resync_shape,
    check_shared_view,
    check_mac_addresses,
    check_resync_changes,
    check_describe_instance,
    check_out_of_scope_instance,
    check_instance_limits,
    check_assign_exact_count,
    check_assign_named_addresses,
    check_assign_beyond_interface_limit,
    check_assign_unknown_interface,
    check_unassign,
    check_create_interface,
    check_create_on_occupied_index,
    check_create_past_adapter_limit,
    check_create_retried_after_a_rollback,
    check_subnet_exhaustion,
    check_prefixes,
    check_ipv6_prefixes,
    check_delete_interface,
    check_delete_without_detach,
    check_ready_interface,
    check_ready_interface_failed_attach,
)
"""Every contract check, in a stable order."""


async def check_provider(make_env: Callable[[], Awaitable[ContractEnv]]) -> None:
    """Run every contract check, each on a fresh env from ``make_env``.

    Raises:
        ExceptionGroup: one ``AssertionError`` (or unexpected error) per failed check, each noting
            the check's name.
    """
    failures: list[Exception] = []
    for check in CONTRACT_CHECKS:
        try:
            await check(await make_env())
        except Exception as exc:
            exc.add_note(f"provider contract check {check.__name__} failed")
            failures.append(exc)
    if failures:
        raise ExceptionGroup(
            f"{len(failures)} of {len(CONTRACT_CHECKS)} provider contract checks failed", failures
        )
