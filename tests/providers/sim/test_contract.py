"""SimProvider passes the shipped Provider contract, and the contract's checks catch broken providers."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, cast

import pytest

from eni_ipam.adapters.metrics import Metrics
from eni_ipam.core import errors
from eni_ipam.core.clock import LoopClock
from eni_ipam.core.model import InstanceLimits, Interface
from eni_ipam.core.provider import Provider
from eni_ipam.testing.provider_contract import (
    CONTRACT_CHECKS,
    Check,
    ContractEnv,
    check_assign_exact_count,
    check_assign_named_addresses,
    check_create_interface,
    check_create_on_occupied_index,
    check_create_past_adapter_limit,
    check_create_retried_after_a_rollback,
    check_delete_interface,
    check_delete_without_detach,
    check_describe_instance,
    check_instance_limits,
    check_out_of_scope_instance,
    check_provider,
    check_ready_interface,
    check_ready_interface_failed_attach,
    check_subnet_exhaustion,
    check_unassign,
)
from providers.ec2.provider import Scope, TableLimits
from providers.sim.cloud import SimCloud
from providers.sim.provider import SimProvider

CONFIGS = {
    # name: (instance type, page size, capabilities)
    "nitro": ("m5.large", 1000, frozenset({"prefixes", "ipv6_prefixes"})),
    "xen-paged": ("m4.xlarge", 1, frozenset()),
}


def as_provider(provider: SimProvider) -> Provider:
    """Statically proves that SimProvider satisfies the Provider protocol."""
    return provider


async def make_env(
    config: str = "nitro", provider_class: type[SimProvider] = SimProvider, small_cidr: str = "10.0.16.0/28"
) -> ContractEnv:
    instance_type, page_size, capabilities = CONFIGS[config]
    clock = LoopClock()
    cloud = SimCloud(clock, page_size=page_size)
    cloud.add_vpc("vpc-1", "10.0.0.0/16")
    cloud.add_subnet("subnet-big", vpc="vpc-1", zone="us-east-1a", cidr="10.0.0.0/20")
    cloud.add_subnet("subnet-small", vpc="vpc-1", zone="us-east-1a", cidr=small_cidr)
    cloud.add_subnet(
        "subnet-dual", vpc="vpc-1", zone="us-east-1a", cidr="10.0.32.0/24", ipv6_cidr="2600:1f18:aaaa:1::/64"
    )
    cloud.add_security_group("sg-1", vpc="vpc-1")
    cloud.add_security_group("sg-2", vpc="vpc-1")
    cloud.add_instance(
        "i-contract", type=instance_type, subnet="subnet-big", security_groups=["sg-1", "sg-2"]
    )
    cloud.add_instance("i-neighbour", type="m5.large", subnet="subnet-big", security_groups=["sg-1"])
    cloud.add_vpc("vpc-2", "10.1.0.0/16")  # another tier's: a providerID naming its instance is refused
    cloud.add_subnet("subnet-elsewhere", vpc="vpc-2", zone="us-east-1a", cidr="10.1.0.0/20")
    cloud.add_security_group("sg-elsewhere", vpc="vpc-2")
    cloud.add_instance(
        "i-elsewhere", type="m5.large", subnet="subnet-elsewhere", security_groups=["sg-elsewhere"]
    )
    return ContractEnv(
        provider=as_provider(provider_class(cloud, clock=clock, metrics=Metrics(), vpc_id="vpc-1")),
        instance_id="i-contract",
        limits=cloud.limits[instance_type],
        subnet_id="subnet-big",
        small_subnet_id="subnet-small",
        security_group_ids=("sg-1", "sg-2"),
        capabilities=capabilities,
        ipv6_subnet_id="subnet-dual",
        out_of_scope_instance_id="i-elsewhere",
    )


@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("check", CONTRACT_CHECKS, ids=lambda c: c.__name__)
async def test_sim_provider_passes_contract_check(check: Check, config: str) -> None:
    env = await make_env(config)
    await check(env)
    env.provider.cloud.check_invariants()  # type: ignore[attr-defined]


async def test_check_provider_runs_every_check_on_a_fresh_env() -> None:
    made = 0

    async def counting_env() -> ContractEnv:
        nonlocal made
        made += 1
        return await make_env()

    await check_provider(counting_env)
    assert made == len(CONTRACT_CHECKS)


# -- the checks can fail: each broken provider below breaks one promise ------------------------


class ReturnsTooFew(SimProvider):
    async def assign_addresses(self, *, interface_id: str, count: int, prefixes: bool = False) -> list[str]:
        return (await super().assign_addresses(interface_id=interface_id, count=count, prefixes=prefixes))[1:]


class IgnoresNamedAddresses(SimProvider):
    async def assign_addresses(
        self, *, interface_id: str, count: int, prefixes: bool = False, addresses: Sequence[str] = ()
    ) -> list[str]:
        return await super().assign_addresses(interface_id=interface_id, count=count, prefixes=prefixes)


class NoRollback(SimProvider):
    async def _roll_back(self, interface_id: str, attachment_id: str, cause: BaseException) -> None:
        return None


class NoIndexRetry(SimProvider):
    async def _attach(self, interface_id: str, instance_id: str, device_index: int) -> tuple[int, str]:
        attachment = await self.api.attach_network_interface(
            interface_id=interface_id, instance_id=instance_id, device_index=device_index
        )
        return device_index, attachment


class DeleteAlwaysDetaches(SimProvider):
    async def delete_interface(self, *, interface_id: str, detach: bool = True) -> None:
        await super().delete_interface(interface_id=interface_id, detach=True)


class NoIdempotency(SimProvider):
    serial = 0

    async def create_interface(self, **kwargs: Any) -> Interface:
        NoIdempotency.serial += 1
        return await super().create_interface(**{**kwargs, "token": f"fresh-{NoIdempotency.serial}"})


class UnassignsEverything(SimProvider):
    async def unassign_addresses(
        self, *, interface_id: str, addresses: Sequence[str] = (), prefixes: Sequence[str] = ()
    ) -> None:
        known = [a for a in addresses if self.cloud.owner_of(a) == interface_id]
        await super().unassign_addresses(interface_id=interface_id, addresses=known, prefixes=prefixes)


class GuessesLimits(SimProvider):
    async def instance_limits(self, *, instance_type: str) -> InstanceLimits:
        table = cast(TableLimits, self.limits).table
        return table.get(instance_type) or InstanceLimits(adapters=2, ipv4_per_interface=2)


class UnknownIsAnError(SimProvider):
    async def describe_instance(self, *, instance_id: str):  # type: ignore[no-untyped-def]
        found = await super().describe_instance(instance_id=instance_id)
        if found is None:
            raise errors.NotFound("gone", code="InvalidInstanceID.NotFound")
        return found


class ReadsAnyInstance(SimProvider):
    """Looks an instance up by id with no scope, as the listings never would."""

    async def describe_instance(self, *, instance_id: str):  # type: ignore[no-untyped-def]
        scope, self.scope = self.scope, Scope()
        try:
            return await super().describe_instance(instance_id=instance_id)
        finally:
            self.scope = scope


class DeleteOnlyDetaches(SimProvider):
    async def delete_interface(self, *, interface_id: str, detach: bool = True) -> None:
        iface = self.cloud.interface_view(interface_id)
        if iface is None:
            raise errors.NotFound("gone", code="InvalidNetworkInterfaceID.NotFound")
        await self.api.detach_network_interface(attachment_id=iface.attachment_id)


class DeletesOnFailedAttach(SimProvider):
    async def attach_interface(self, **kwargs: Any) -> Interface:
        try:
            return await super().attach_interface(**kwargs)
        except errors.ProviderError:
            await self.delete_interface(interface_id=kwargs["interface"].id)
            raise


class ReadyWithoutTags(SimProvider):
    async def create_ready_interface(self, **kwargs: Any) -> Interface:
        return await super().create_ready_interface(**{**kwargs, "tags": {}})


MUTANTS: list[tuple[type[SimProvider], Callable[[ContractEnv], Awaitable[None]]]] = [
    (ReturnsTooFew, check_assign_exact_count),
    (IgnoresNamedAddresses, check_assign_named_addresses),
    (NoRollback, check_create_past_adapter_limit),
    (NoIndexRetry, check_create_on_occupied_index),
    (DeleteAlwaysDetaches, check_delete_without_detach),
    (NoIdempotency, check_create_interface),
    (UnassignsEverything, check_unassign),
    (GuessesLimits, check_instance_limits),
    (UnknownIsAnError, check_describe_instance),
    (ReadsAnyInstance, check_out_of_scope_instance),
    (DeleteOnlyDetaches, check_delete_interface),
    (DeletesOnFailedAttach, check_ready_interface_failed_attach),
    (ReadyWithoutTags, check_ready_interface),
]


@pytest.mark.parametrize(("mutant", "check"), MUTANTS, ids=[m.__name__ for m, _ in MUTANTS])
async def test_contract_check_fails_a_provider_that_breaks_its_promise(
    mutant: type[SimProvider], check: Check
) -> None:
    with pytest.raises(AssertionError):
        await check(await make_env(provider_class=mutant))


async def test_check_provider_reports_every_failed_check_by_name() -> None:
    with pytest.raises(ExceptionGroup) as group:
        await check_provider(lambda: make_env(provider_class=NoRollback))
    notes = [note for exc in group.value.exceptions for note in getattr(exc, "__notes__", [])]
    assert any("check_create_past_adapter_limit" in note for note in notes)
    assert len(group.value.exceptions) < len(CONTRACT_CHECKS)


async def test_subnet_exhaustion_check_refuses_an_env_whose_small_subnet_is_not_small() -> None:
    env = await make_env(small_cidr="10.0.16.0/27")
    with pytest.raises(AssertionError, match="2 to 15 free"):
        await check_subnet_exhaustion(env)


async def test_retry_after_rollback_check_fails_a_provider_that_reuses_a_spent_token(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import providers.ec2.provider

    # A provider whose token never changes after a rollback: the retry cannot create.
    monkeypatch.setattr(providers.ec2.provider, "spin_token", lambda token, n: token)
    with pytest.raises(AssertionError, match="retried once a slot is free"):
        await check_create_retried_after_a_rollback(await make_env())
