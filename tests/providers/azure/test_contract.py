"""The Azure provider passes the shipped Provider contract on the fake ARM, for a standalone VM and
for a VM of a Uniform scale set (whose NICs change through the VM's model).

Azure cannot attach NICs to a running VM, so the limits say ``hot_attach=False``: the contract then
checks that ``create_interface`` refuses and changes nothing, and exhausts the small subnet through
``small_interface_id``, another VM's NIC in the /28 (11 usable addresses, one taken by that NIC).
"""

from __future__ import annotations

import pytest

from eni_ipam.core.provider import Provider
from eni_ipam.testing.provider_contract import CONTRACT_CHECKS, Check, ContractEnv
from providers.azure import AzureProvider
from providers.azure.limits import limits_for
from tests.providers.azure.conftest import World

pytestmark = pytest.mark.looptime


def as_provider(provider: AzureProvider) -> Provider:
    """Statically proves that AzureProvider satisfies the Provider protocol."""
    return provider


def contract_env(world: World, kind: str) -> ContractEnv:
    if kind == "vm":
        instance, _ = world.vm("node")
        _, (small,) = world.vm("small", subnet=world.small_subnet_id)
    else:
        instance, _ = world.scale_set_vm("pool")
        _, small = world.scale_set_vm("small-pool", subnet=world.small_subnet_id)
    world.vm("neighbour")  # another node in the same subnet
    return ContractEnv(
        provider=as_provider(world.provider()),
        instance_id=instance.lower(),
        limits=limits_for(4),
        subnet_id=world.subnet_id.lower(),
        small_subnet_id=world.small_subnet_id.lower(),
        security_group_ids=tuple(a.lower() for a in world.asg_ids),
        small_interface_id=small.lower(),
        out_of_scope_instance_id=world.vm_in_another_group("elsewhere").lower(),
    )


@pytest.mark.parametrize("kind", ["vm", "scale-set-vm"])
@pytest.mark.parametrize("check", CONTRACT_CHECKS, ids=lambda c: c.__name__)
async def test_azure_provider_passes_contract_check_on_fake_arm(
    check: Check, kind: str, world: World
) -> None:
    await check(contract_env(world, kind))
