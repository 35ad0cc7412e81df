"""Discovery on Azure: what resync and describe_instance report, how ARM JSON maps onto the model,
paging to the end, and never a partial view."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from structlog.testing import capture_logs

from eni_ipam.adapters.metrics import Metrics
from eni_ipam.core import errors
from eni_ipam.core.devices import MAC_PATTERN
from eni_ipam.errors import ConfigError
from providers.azure import resources
from providers.azure.limits import limits_for
from tests.providers.azure.conftest import GROUP, SIZE, SUBSCRIPTION, World, sample

pytestmark = pytest.mark.looptime


async def test_resync_reports_vms_scale_set_vms_subnets_groups_and_limits(world: World) -> None:
    vm, (nic,) = world.vm("node")
    ss_vm, ss_nic = world.scale_set_vm("pool", size="Standard_E4s_v5")
    provider = world.provider()
    snapshot = await provider.resync()
    assert set(snapshot.instances) == {vm.lower(), ss_vm.lower()}
    node = snapshot.instances[vm.lower()]
    assert (node.type, node.zone, node.running) == (SIZE, "westeurope", True)
    assert (node.vpc_id, node.subnet_id) == (world.vnet_id.lower(), world.subnet_id.lower())
    (iface,) = node.interfaces
    assert (iface.id, iface.device_index, iface.instance_id) == (nic.lower(), 0, vm.lower())
    assert iface.security_groups == (world.asg_ids[0].lower(),)
    assert iface.delete_on_termination and iface.prefixes == ()
    (ss_iface,) = snapshot.instances[ss_vm.lower()].interfaces
    assert ss_iface.id == ss_nic.lower() and ss_iface.delete_on_termination
    small = snapshot.subnets[world.small_subnet_id.lower()]
    assert (small.cidr, small.available, small.vpc_id) == ("10.0.8.0/28", 11, world.vnet_id.lower())
    assert snapshot.subnets[world.subnet_id.lower()].available == 1019 - 2
    assert set(snapshot.security_groups) == {a.lower() for a in world.asg_ids}
    assert snapshot.security_groups[world.asg_ids[0].lower()].tags == {"role": "pods"}
    assert snapshot.limits == {SIZE: limits_for(4), "Standard_E4s_v5": limits_for(2)}
    assert snapshot.limits[SIZE].hot_attach is False and snapshot.limits[SIZE].ipv4_per_interface == 256


async def test_secondary_addresses_are_reported_in_numeric_order_without_the_primary(world: World) -> None:
    vm, (nic,) = world.vm("node")
    for _ in range(7):  # 10.0.0.5 … 10.0.0.11: in string order .10 and .11 would come before .5
        world.fake.add_ip_configuration(nic)
    provider = world.provider()
    (iface,) = (await provider.resync()).instances[vm.lower()].interfaces
    assert iface.primary_ip == "10.0.0.4"
    assert iface.addresses == tuple(f"10.0.0.{i}" for i in range(5, 12))


async def test_the_primary_nic_is_at_index_0_and_the_others_follow_in_the_vms_order(world: World) -> None:
    nics = [world.fake.add_nic("rg-Nodes", f"multi-{i}", world.subnet_id) for i in range(3)]
    vm = world.fake.add_vm("rg-Nodes", "multi", SIZE, nics, primary=1, delete_option="Detach")
    provider = world.provider()
    for found in (
        (await provider.resync()).instances[vm.lower()],
        await provider.describe_instance(instance_id=vm),
    ):
        assert found is not None
        assert [(i.id, i.device_index) for i in found.interfaces] == [
            (nics[1].lower(), 0),
            (nics[0].lower(), 1),
            (nics[2].lower(), 2),
        ]
        assert not any(i.delete_on_termination for i in found.interfaces)


async def test_every_nic_reports_its_mac_address_in_the_written_form_on_card_0(world: World) -> None:
    nics = [world.fake.add_nic("rg-Nodes", f"multi-{i}", world.subnet_id) for i in range(2)]
    world.fake.add_vm("rg-Nodes", "multi", SIZE, nics)
    world.scale_set_vm("pool")
    snapshot = await world.provider().resync()
    found = [i for instance in snapshot.instances.values() for i in instance.interfaces]
    macs = [i.mac_address for i in found]
    assert len(found) == 3 and len(set(macs)) == 3
    # ARM writes 00-0D-3A-00-00-01; the model holds the one written form.
    assert all(re.fullmatch(MAC_PATTERN, m) and m.startswith("00:0d:3a:") for m in macs), macs
    assert {i.network_card for i in found} == {0}


@pytest.mark.parametrize(
    ("written", "read", "warned"),
    [
        ("00-0D-3A-1B-2C-3D", "00:0d:3a:1b:2c:3d", False),
        (None, "", False),  # a NIC of a VM never started has none yet
        ("00-0D-3A-1B-2C", "", True),
        ("01-00-5E-00-00-01", "", True),
        (12, "", True),
    ],
)
def test_a_nics_mac_address_is_normalised_and_never_trusted(written: object, read: str, warned: bool) -> None:
    nic = {
        "id": "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/networkInterfaces/n",
        "properties": {"macAddress": written} if written is not None else {},
    }
    with capture_logs() as logs:
        iface = resources.interface(nic)
    assert (iface.mac_address, iface.network_card) == (read, 0)
    assert [e["event"] for e in logs] == (["interface_mac_refused"] if warned else [])


async def test_resync_pages_through_every_listing(worlds: Callable[..., World]) -> None:
    world = worlds(page_size=1)
    names = ["a", "b", "c"]
    for name in names:
        world.vm(name)
    for _ in range(2):
        world.scale_set_vm("pool")
    metrics = Metrics()
    provider = world.provider(metrics)
    snapshot = await provider.resync()
    assert len(snapshot.instances) == 5
    assert len(snapshot.subnets) == 2 and len(snapshot.security_groups) == 2
    assert world.fake.count("VirtualMachines.List") == 3
    assert world.fake.count("NetworkInterfaces.List") == 3
    assert world.fake.count("VirtualMachineScaleSetVMs.List") == 2
    assert world.fake.count("VirtualNetworks.ListUsage") == 2
    # every page is a counted request that spent a token
    assert sample(metrics, "eni_ipam_api_requests_total", operation="VirtualMachines.List") == 3
    assert (
        sample(metrics, "eni_ipam_api_rate_limit_wait_seconds_count", operation="VirtualMachines.List") == 3
    )
    assert (
        sample(metrics, "eni_ipam_api_duration_seconds_count", operation="VirtualMachines.List", outcome="ok")
        == 1
    )


async def test_resync_never_returns_a_partial_view(world: World) -> None:
    world.vm("node")
    provider = world.provider(max_retries=0)
    world.fake.throttle("ApplicationSecurityGroups.List", times=1, retry_after=1)
    with pytest.raises(errors.Throttled):
        await provider.resync()
    assert len((await provider.resync()).instances) == 1


async def test_a_deallocated_vm_is_reported_not_running(world: World) -> None:
    vm, _ = world.vm("node", running=False)
    ss_vm, _ = world.scale_set_vm("pool")
    world.fake.set_running(ss_vm, False)
    provider = world.provider()
    snapshot = await provider.resync()
    assert not snapshot.instances[vm.lower()].running and not snapshot.instances[ss_vm.lower()].running
    described = await provider.describe_instance(instance_id=vm)
    assert described is not None and not described.running


async def test_describe_instance_reads_fresh_and_accepts_any_case(world: World) -> None:
    vm, (nic,) = world.vm("node")
    provider = world.provider()
    await provider.resync()
    added = world.fake.add_ip_configuration(nic)
    found = await provider.describe_instance(instance_id=vm.upper())
    assert found is not None and found.id == vm.lower()
    assert found.interfaces[0].addresses == (added,)


async def test_describe_instance_of_a_scale_set_vm(world: World) -> None:
    vm, nic = world.scale_set_vm("pool")
    provider = world.provider()
    found = await provider.describe_instance(instance_id=vm)
    assert found is not None
    assert (found.id, found.type, found.running) == (vm.lower(), SIZE, True)
    assert [(i.id, i.device_index) for i in found.interfaces] == [(nic.lower(), 0)]


async def test_describe_instance_is_none_for_unknown_and_foreign_ids_without_error(world: World) -> None:
    vm, _ = world.vm("node")
    ss_vm, _ = world.scale_set_vm("pool")
    provider = world.provider()
    assert await provider.describe_instance(instance_id=vm.replace("/node", "/gone")) is None
    # a scale-set VM that does not exist, in a scale set that does and in one that does not
    assert (
        await provider.describe_instance(
            instance_id=ss_vm.replace("/virtualMachines/0", "/virtualMachines/7")
        )
        is None
    )
    assert await provider.describe_instance(instance_id=ss_vm.replace("/pool/", "/gone/")) is None
    assert world.fake.count("VirtualMachineScaleSetVMs.Get", status=404) == 2
    requests = len(world.fake.requests)
    assert await provider.describe_instance(instance_id="i-0123456789abcdef0") is None
    other_subscription = vm.replace("00000000-0000-4000", "99999999-0000-4000")
    assert await provider.describe_instance(instance_id=other_subscription) is None
    assert len(world.fake.requests) == requests  # neither needed a request


@pytest.mark.parametrize("kind", ["vm", "scale-set-vm"])
async def test_describe_instance_raises_on_a_404_that_does_not_say_the_vm_is_gone(
    worlds: Callable[..., World], kind: str
) -> None:
    # The fake serves another subscription than the configured one: every request answers
    # 404 SubscriptionNotFound, which says nothing about the VM.
    served = "11111111-0000-4000-8000-000000000001"
    world = worlds(subscription_id=served)
    instance = world.vm("node")[0] if kind == "vm" else world.scale_set_vm("pool")[0]
    provider = world.provider(vnet_id=world.vnet_id.replace(served, SUBSCRIPTION))
    with pytest.raises(errors.NotFound) as caught:
        await provider.describe_instance(instance_id=instance.replace(served, SUBSCRIPTION))
    assert caught.value.code == "SubscriptionNotFound"


async def test_describe_instance_raises_when_the_resource_group_is_not_found(world: World) -> None:
    vm, _ = world.vm("node")
    provider = world.provider(resource_groups=["rg-Nodes", "rg-Typo"])  # configured, but not in Azure
    with pytest.raises(errors.NotFound) as caught:
        await provider.describe_instance(instance_id=vm.replace("/rg-Nodes/", "/rg-Typo/"))
    assert caught.value.code == "ResourceGroupNotFound"


async def test_a_nic_id_of_another_subscription_is_never_read_as_ours(world: World) -> None:
    vm, (nic,) = world.vm("node")
    shadow = world.fake.add_nic("rg-Nodes", "shadow", world.subnet_id)  # same group and name as below
    world.fake.reference_nic(vm, shadow.replace("00000000-0000-4000", "99999999-0000-4000"))
    provider = world.provider()
    found = await provider.describe_instance(instance_id=vm)
    assert found is not None and [i.id for i in found.interfaces] == [nic.lower()]
    assert not any("/networkInterfaces/shadow" in r.url for r in world.fake.requests)


async def test_a_vm_size_unknown_to_the_table_has_no_limits_until_configured(world: World) -> None:
    vm, _ = world.vm("odd", size="Standard_Z99_v9")
    snapshot = await world.provider().resync()
    assert snapshot.instances[vm.lower()].type == "Standard_Z99_v9"
    assert "Standard_Z99_v9" not in snapshot.limits
    configured = world.provider(vm_sizes={"Standard_Z99_v9": 3})
    assert (await configured.resync()).limits["Standard_Z99_v9"] == limits_for(3)
    with pytest.raises(errors.LimitsUnknown):
        await world.provider().instance_limits(instance_type="Standard_Z99_v9")
    assert await configured.instance_limits(instance_type="standard_z99_V9") == limits_for(3)


async def test_a_virtual_network_or_resource_group_that_does_not_exist_is_a_configuration_error(
    world: World,
) -> None:
    missing_vnet = world.provider(vnet_id=world.vnet_id.replace("vnet-Cluster", "vnet-typo"))
    with pytest.raises(ConfigError) as caught:
        await missing_vnet.resync()
    assert caught.value.field == "azure.vnet_id"
    missing_group = world.provider(resource_groups=["rg-Nodes", "rg-typo"])
    with pytest.raises(ConfigError) as caught:
        await missing_group.resync()
    assert caught.value.field == "azure.resource_groups" and "rg-typo" in caught.value.message


async def test_a_vm_outside_the_resource_groups_is_refused_without_a_request(world: World) -> None:
    elsewhere = world.vm_in_another_group("elsewhere")
    provider = world.provider()
    with pytest.raises(errors.InstanceOutOfScope) as refused:
        await provider.describe_instance(instance_id=elsewhere)
    assert refused.value.check == "its resource group other-cluster is not one of azure.resource_groups"
    assert not [r for r in world.fake.requests if "elsewhere" in r.url]


async def test_a_vm_whose_nic_is_in_another_virtual_network_is_refused(world: World) -> None:
    other = world.fake.add_vnet(GROUP, "vnet-Other", "10.9.0.0/16")
    vm, _ = world.vm("stray", subnet=world.fake.add_subnet(other, "tier", "10.9.0.0/24"))
    provider = world.provider()
    with pytest.raises(errors.InstanceOutOfScope) as refused:
        await provider.describe_instance(instance_id=vm)
    assert refused.value.check.endswith("is not azure.vnet_id")
    assert "vnet-other" in refused.value.check.lower()
