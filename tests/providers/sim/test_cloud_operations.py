"""Every EC2 operation of the in-memory cloud: results, error codes (EC2's), all-or-nothing."""

from collections.abc import Awaitable
from typing import Any

import pytest

from providers.sim.cloud import SimCloud
from providers.sim.records import SimError
from tests.providers.sim import interface, make_cloud, primary_id


async def code_of(call: Awaitable[object]) -> str:
    with pytest.raises(SimError) as err:
        await call
    return err.value.code


@pytest.fixture
def cloud() -> SimCloud:
    cloud = make_cloud()
    cloud.add_instance("i-1", type="m5.large", subnet="s-1", security_groups=["sg-1"])
    cloud.add_instance("i-xen", type="m4.xlarge", subnet="s-1", security_groups=["sg-1"])
    return cloud


async def test_create_makes_a_detached_tagged_interface_with_its_addresses(cloud: SimCloud) -> None:
    eni = await cloud.create_network_interface(
        subnet_id="s-1", groups=["sg-1"], secondary_count=3, tags={"k": "v"}, description="d"
    )
    assert (eni.instance_id, eni.device_index, eni.attachment_id) == ("", -1, "")
    assert len(eni.addresses) == 3 and dict(eni.tags) == {"k": "v"} and eni.security_groups == ("sg-1",)
    assert cloud.owner_of(eni.primary_ip) == eni.id
    cloud.check_invariants()


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"subnet_id": "s-9"}, "InvalidSubnetID.NotFound"),
        ({"subnet_id": "s-1", "groups": ["sg-9"]}, "InvalidGroup.NotFound"),
        ({"subnet_id": "s-1", "secondary_count": 1, "prefix_count": 1}, "InvalidParameterCombination"),
        ({"subnet_id": "s-1", "secondary_count": -1}, "InvalidParameterValue"),
        ({"subnet_id": "s-1", "secondary_count": 200}, "PrivateIpAddressLimitExceeded"),
        ({"subnet_id": "s-small", "secondary_count": 11}, "InsufficientFreeAddressesInSubnet"),
        ({"subnet_id": "s-small", "prefix_count": 1}, "InsufficientCidrBlocks"),
    ],
)
async def test_create_refusals_answer_ec2_codes_and_allocate_nothing(
    cloud: SimCloud, kwargs: dict[str, Any], code: str
) -> None:
    before = (len(cloud.interfaces()), cloud.subnet_free("s-1"), cloud.subnet_free("s-small"))
    assert await code_of(cloud.create_network_interface(**kwargs)) == code
    assert (len(cloud.interfaces()), cloud.subnet_free("s-1"), cloud.subnet_free("s-small")) == before
    cloud.check_invariants()


async def test_create_with_a_repeated_token_returns_the_same_interface_without_allocating(
    cloud: SimCloud,
) -> None:
    first = await cloud.create_network_interface(subnet_id="s-1", secondary_count=2, client_token="tok")
    free = cloud.subnet_free("s-1")
    again = await cloud.create_network_interface(subnet_id="s-1", secondary_count=2, client_token="tok")
    assert again == first
    assert cloud.subnet_free("s-1") == free and cloud.calls["CreateNetworkInterface"] == 2


async def test_repeated_token_returns_the_interface_as_it_is_now(cloud: SimCloud) -> None:
    first = await cloud.create_network_interface(subnet_id="s-1", client_token="tok")
    await cloud.attach_network_interface(interface_id=first.id, instance_id="i-1", device_index=1)
    again = await cloud.create_network_interface(subnet_id="s-1", client_token="tok")
    assert (again.id, again.instance_id, again.device_index) == (first.id, "i-1", 1)


async def test_repeated_token_with_other_parameters_is_a_mismatch(cloud: SimCloud) -> None:
    await cloud.create_network_interface(subnet_id="s-1", secondary_count=2, client_token="tok")
    call = cloud.create_network_interface(subnet_id="s-1", secondary_count=3, client_token="tok")
    assert await code_of(call) == "IdempotentParameterMismatch"
    assert len(cloud.interfaces()) == 3


async def test_attach_sets_device_index_and_attachment(cloud: SimCloud) -> None:
    eni = await cloud.create_network_interface(subnet_id="s-1", secondary_count=1)
    attachment = await cloud.attach_network_interface(interface_id=eni.id, instance_id="i-1", device_index=2)
    view = cloud.instance_view("i-1")
    assert [i.device_index for i in view.interfaces] == [0, 2]
    assert view.interfaces[1].attachment_id == attachment and not view.interfaces[1].delete_on_termination
    await cloud.modify_network_interface_attribute(
        interface_id=eni.id, attachment_id=attachment, delete_on_termination=True
    )
    assert cloud.instance_view("i-1").interfaces[1].delete_on_termination


async def test_attach_at_an_occupied_index_names_the_device_as_ec2_does(cloud: SimCloud) -> None:
    eni = await cloud.create_network_interface(subnet_id="s-1")
    with pytest.raises(SimError) as err:
        await cloud.attach_network_interface(interface_id=eni.id, instance_id="i-1", device_index=0)
    assert err.value.code == "InvalidParameterValue"
    assert "interface attached at device index '0'" in err.value.message


async def test_attach_beyond_the_adapters_is_an_attachment_limit(cloud: SimCloud) -> None:
    for index in (1, 2):
        eni = await cloud.create_network_interface(subnet_id="s-1")
        await cloud.attach_network_interface(interface_id=eni.id, instance_id="i-1", device_index=index)
    eni = await cloud.create_network_interface(subnet_id="s-1")
    call = cloud.attach_network_interface(interface_id=eni.id, instance_id="i-1", device_index=3)
    assert await code_of(call) == "AttachmentLimitExceeded"
    assert interface(cloud, eni.id).instance_id == ""


@pytest.mark.parametrize(
    ("setup", "instance", "code"),
    [
        ({}, "i-9", "InvalidInstanceID.NotFound"),
        ({"stop": True}, "i-1", "IncorrectInstanceState"),
        ({"subnet": "s-other"}, "i-1", "InvalidParameterValue"),
        ({"prefixes": 1}, "i-xen", "InvalidParameterValue"),
        ({"secondaries": 12}, "i-1", "PrivateIpAddressLimitExceeded"),
        ({"attached": True}, "i-xen", "InvalidNetworkInterface.InUse"),
    ],
    ids=["unknown-instance", "stopped", "other-zone", "prefixes-on-xen", "over-type-limit", "in-use"],
)
async def test_attach_refusals(cloud: SimCloud, setup: dict[str, Any], instance: str, code: str) -> None:
    eni = await cloud.create_network_interface(
        subnet_id=setup.get("subnet", "s-1"),
        secondary_count=setup.get("secondaries", 0),
        prefix_count=setup.get("prefixes", 0),
    )
    if setup.get("attached"):
        await cloud.attach_network_interface(interface_id=eni.id, instance_id="i-1", device_index=1)
    if setup.get("stop"):
        cloud.stop_instance("i-1")
    call = cloud.attach_network_interface(interface_id=eni.id, instance_id=instance, device_index=1)
    assert await code_of(call) == code
    cloud.check_invariants()


async def test_detach_and_modify_refusals(cloud: SimCloud) -> None:
    primary = cloud.instance_view("i-1").interfaces[0]
    assert (
        await code_of(cloud.detach_network_interface(attachment_id=primary.attachment_id))
        == "OperationNotPermitted"
    )
    assert (
        await code_of(cloud.detach_network_interface(attachment_id="eni-attach-9"))
        == "InvalidAttachmentID.NotFound"
    )
    call = cloud.modify_network_interface_attribute(
        interface_id=primary.id, attachment_id="eni-attach-9", delete_on_termination=False
    )
    assert await code_of(call) == "InvalidAttachmentID.NotFound"


async def test_assign_slots_are_shared_by_addresses_and_prefixes(cloud: SimCloud) -> None:
    eni = primary_id(cloud, "i-1")
    await cloud.assign_private_ip_addresses(interface_id=eni, prefix_count=4)
    await cloud.assign_private_ip_addresses(interface_id=eni, secondary_count=5)
    assert await code_of(cloud.assign_private_ip_addresses(interface_id=eni, secondary_count=1)) == (
        "PrivateIpAddressLimitExceeded"
    )
    assert interface(cloud, eni).slots_used == 9


@pytest.mark.parametrize(
    ("instance", "kwargs", "code"),
    [
        ("i-1", {"secondary_count": 10}, "PrivateIpAddressLimitExceeded"),
        ("i-1", {"prefix_count": 10}, "PrivateIpAddressLimitExceeded"),
        ("i-xen", {"prefix_count": 1}, "InvalidParameterValue"),
        ("i-1", {}, "MissingParameter"),
        ("i-1", {"secondary_count": 1, "prefix_count": 1}, "InvalidParameterCombination"),
    ],
)
async def test_assign_refusals_assign_nothing(
    cloud: SimCloud, instance: str, kwargs: dict[str, Any], code: str
) -> None:
    eni = primary_id(cloud, instance)
    free = cloud.subnet_free("s-1")
    assert await code_of(cloud.assign_private_ip_addresses(interface_id=eni, **kwargs)) == code
    assert interface(cloud, eni).slots_used == 0 and cloud.subnet_free("s-1") == free


async def test_assign_short_subnet_is_all_or_nothing(cloud: SimCloud) -> None:
    cloud.set_subnet_available("s-1", 3)
    eni = primary_id(cloud, "i-1")
    assert await code_of(cloud.assign_private_ip_addresses(interface_id=eni, secondary_count=4)) == (
        "InsufficientFreeAddressesInSubnet"
    )
    assert cloud.subnet_free("s-1") == 3


async def test_operations_on_an_unknown_interface_are_not_found(cloud: SimCloud) -> None:
    for call in (
        cloud.assign_private_ip_addresses(interface_id="eni-9", secondary_count=1),
        cloud.unassign_private_ip_addresses(interface_id="eni-9", addresses=["10.0.0.5"]),
        cloud.attach_network_interface(interface_id="eni-9", instance_id="i-1", device_index=1),
        cloud.delete_network_interface(interface_id="eni-9"),
        cloud.describe_network_interfaces(interface_ids=["eni-9"]),
    ):
        assert await code_of(call) == "InvalidNetworkInterfaceID.NotFound"


async def test_unassign_removes_addresses_and_prefixes_and_returns_them_to_the_subnet(
    cloud: SimCloud,
) -> None:
    eni = primary_id(cloud, "i-1")
    free = cloud.subnet_free("s-1")
    addresses = await cloud.assign_private_ip_addresses(interface_id=eni, secondary_count=3)
    prefixes = await cloud.assign_private_ip_addresses(interface_id=eni, prefix_count=1)
    await cloud.unassign_private_ip_addresses(interface_id=eni, addresses=addresses[:1], prefixes=prefixes)
    view = cloud.interface_view(eni)
    assert view is not None and view.addresses == tuple(addresses[1:]) and view.prefixes == ()
    assert cloud.subnet_free("s-1") == free - 2


@pytest.mark.parametrize("stranger", ["10.0.0.99", "primary", "10.0.0.48/28"])
async def test_unassign_of_an_address_not_held_removes_nothing(cloud: SimCloud, stranger: str) -> None:
    eni = primary_id(cloud, "i-1")
    addresses = await cloud.assign_private_ip_addresses(interface_id=eni, secondary_count=2)
    if stranger == "primary":
        stranger = interface(cloud, eni).primary_ip
    kwargs = {"prefixes": [stranger]} if "/" in stranger else {"addresses": [addresses[0], stranger]}
    assert (
        await code_of(cloud.unassign_private_ip_addresses(interface_id=eni, **kwargs))
        == "InvalidParameterValue"
    )
    assert interface(cloud, eni).addresses == tuple(addresses)


async def test_delete_refuses_an_attached_interface_and_frees_a_detached_one(cloud: SimCloud) -> None:
    free = cloud.subnet_free("s-1")
    eni = await cloud.create_network_interface(subnet_id="s-1", secondary_count=4)
    attachment = await cloud.attach_network_interface(interface_id=eni.id, instance_id="i-1", device_index=1)
    assert (
        await code_of(cloud.delete_network_interface(interface_id=eni.id)) == "InvalidNetworkInterface.InUse"
    )
    await cloud.detach_network_interface(attachment_id=attachment)
    await cloud.delete_network_interface(interface_id=eni.id)
    assert cloud.interface_view(eni.id) is None and cloud.subnet_free("s-1") == free
    cloud.check_invariants()


async def test_describe_interfaces_filters_by_instance_status_and_tag(cloud: SimCloud) -> None:
    tagged = await cloud.create_network_interface(subnet_id="s-1", tags={"team": "a"})
    await cloud.create_network_interface(subnet_id="s-1", tags={"team": "b"})

    async def ids(**filters: list[str]) -> list[str]:
        return [i.id for i in (await cloud.describe_network_interfaces(filters=filters)).items]

    assert await ids(**{"attachment.instance-id": ["i-1"]}) == [primary_id(cloud, "i-1")]
    assert len(await ids(status=["available"])) == 2
    assert await ids(status=["available"], **{"tag:team": ["a"]}) == [tagged.id]
    assert await ids(**{"tag:team": ["*"]}) == sorted(await ids(status=["available"]))
    assert (
        await code_of(cloud.describe_network_interfaces(filters={"colour": ["red"]}))
        == "InvalidParameterValue"
    )


async def test_describe_instances_reports_state_and_unknown_ids(cloud: SimCloud) -> None:
    cloud.terminate_instance("i-xen")
    page = await cloud.describe_instances()
    assert [(i.id, i.state) for i in page.items] == [("i-1", "running"), ("i-xen", "terminated")]
    running = await cloud.describe_instances(filters={"instance-state-name": ["running"]})
    assert [i.id for i in running.items] == ["i-1"]
    assert await code_of(cloud.describe_instances(instance_ids=["i-9"])) == "InvalidInstanceID.NotFound"


async def test_describe_subnets_and_groups_filter_by_vpc_and_report_free_addresses(cloud: SimCloud) -> None:
    subnets = await cloud.describe_subnets(filters={"vpc-id": ["vpc-1"], "availability-zone": ["us-east-1a"]})
    assert [(s.id, s.available) for s in subnets.items] == [("s-1", 249), ("s-small", 11)]
    groups = await cloud.describe_security_groups(filters={"vpc-id": ["vpc-1"]})
    assert [g.id for g in groups.items] == ["sg-1"]
    assert [v.id for v in (await cloud.describe_vpcs()).items] == ["vpc-1"]


async def test_pagination_pages_by_id_and_counts_every_page() -> None:
    cloud = make_cloud(page_size=2)
    for n in range(5):
        cloud.add_instance(f"i-{n}", type="m5.large", subnet="s-1", security_groups=["sg-1"])
    seen, token, pages = [], None, 0
    while True:
        page = await cloud.describe_network_interfaces(next_token=token)
        seen += [i.id for i in page.items]
        pages += 1
        if pages == 2:  # an interface created mid-listing does not disturb the pages
            await cloud.create_network_interface(subnet_id="s-1")
        token = page.next_token
        if token is None:
            break
    assert pages == 3 == cloud.calls["DescribeNetworkInterfaces"]
    assert seen == sorted(set(seen)) and len(seen) >= 5


async def test_unassign_of_nothing_is_a_missing_parameter(cloud: SimCloud) -> None:
    call = cloud.unassign_private_ip_addresses(interface_id=primary_id(cloud, "i-1"))
    assert await code_of(call) == "MissingParameter"


async def test_stopped_instance_keeps_its_interfaces_and_starts_again(cloud: SimCloud) -> None:
    cloud.stop_instance("i-1")
    view = cloud.instance_view("i-1")
    assert not view.running and len(view.interfaces) == 1
    stopped = await cloud.describe_instances(filters={"instance-state-name": ["stopped"]})
    assert [i.id for i in stopped.items] == ["i-1"]
    cloud.start_instance("i-1")
    assert cloud.instance_view("i-1").running
    cloud.terminate_instance("i-1")
    with pytest.raises(ValueError, match="terminated"):
        cloud.start_instance("i-1")
