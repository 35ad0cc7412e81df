"""The reconciler on the AWS provider over moto: the paths that only make sense end to end."""

from __future__ import annotations

import contextlib
import random
from collections.abc import AsyncIterator

import pytest

from eni_ipam.adapters.metrics import Metrics
from eni_ipam.core import readypool
from eni_ipam.core.clock import LoopClock
from eni_ipam.core.manager import NodeManager
from eni_ipam.core.model import TAG_CLUSTER, TAG_INSTANCE, TAG_MANAGED_BY, TAG_NODE, TAG_POOL
from eni_ipam.core.settings import Settings
from eni_ipam.core.spec import NodeResource, NodeSpec
from eni_ipam.simulator.cluster import EmbeddedCluster
from providers.aws import AwsProvider
from tests.providers.aws.conftest import ZONE, Network
from tests.waiting import until


@contextlib.asynccontextmanager
async def reconciling(
    network: Network, specs: list[NodeResource], settings: Settings
) -> AsyncIterator[tuple[NodeManager, AwsProvider]]:
    metrics = Metrics()
    provider = network.provider(metrics)
    cluster = EmbeddedCluster(
        provider, settings=settings, metrics=metrics, clock=LoopClock(), rng=random.Random(1)
    )
    for spec in specs:
        cluster.side.add(spec)
    try:
        async with cluster.running():
            yield cluster.manager, provider
    finally:
        provider.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("placement", "refusals"), [(False, 1), (True, 0)], ids=["asked", "counted"])
async def test_prefix_delegation_falls_back_to_addresses_when_the_subnet_has_no_free_28(
    network: Network, placement: bool, refusals: int
) -> None:
    # A /27 has 27 free addresses but no free aligned /28: each half holds reserved addresses
    # (.0-.3 in the first, the broadcast in the second). The free address count says "a prefix
    # fits"; EC2 says InsufficientCidrBlocks, and the pass falls back to plain addresses. With the
    # free /28 blocks counted (prefix_placement) the prefix is never asked for.
    fragmented = network.ec2.create_subnet(
        VpcId=network.vpc_id, CidrBlock="10.0.48.0/27", AvailabilityZone=ZONE
    )
    subnet = fragmented["Subnet"]["SubnetId"]
    instance = network.run_instance("m5.large", subnet_id=subnet)
    spec = NodeResource(name="n1", instance_id=instance, spec=NodeSpec(pre_allocate=4, subnet_ids=(subnet,)))
    settings = Settings(prefix_delegation=True, prefix_placement=placement, gc_interval=0)
    async with reconciling(network, [spec], settings) as (manager, _):
        await until(lambda: manager.nodes["n1"].stats.available >= 4, limit=20)
        refused = manager.metrics.sample(
            "eni_ipam_api_duration_seconds_count",
            {"operation": "AssignPrivateIpAddresses", "outcome": "InsufficientCidrBlocks"},
        )
    assert (refused or 0) == refusals, f"the prefix was asked for {refused} times"
    found = network.ec2.describe_network_interfaces(
        Filters=[{"Name": "attachment.instance-id", "Values": [instance]}]
    )["NetworkInterfaces"]
    assert not any(i.get("Ipv4Prefixes") for i in found)
    assert sum(len(i["PrivateIpAddresses"]) - 1 for i in found) >= 4


@pytest.mark.timeout(60)
async def test_new_interfaces_carry_the_ownership_tags_and_delete_on_termination(network: Network) -> None:
    instance = network.run_instance(
        "t3.medium"
    )  # 5 slots on the primary: 8 addresses need a second interface
    spec = NodeResource(name="n1", instance_id=instance, spec=NodeSpec(pre_allocate=8))
    settings = Settings(cluster_name="prod", interface_tags={"team": "net"}, gc_interval=0)
    async with reconciling(network, [spec], settings) as (manager, _):
        await until(lambda: manager.nodes["n1"].stats.available >= 8, limit=20)
    found = network.ec2.describe_network_interfaces(
        Filters=[{"Name": "attachment.instance-id", "Values": [instance]}]
    )["NetworkInterfaces"]
    [created] = [i for i in found if i["Attachment"]["DeviceIndex"] != 0]
    tags = {t["Key"]: t["Value"] for t in created["TagSet"]}
    assert tags == {
        TAG_CLUSTER: "prod",
        TAG_MANAGED_BY: "eni-ipam",
        TAG_NODE: "n1",
        TAG_INSTANCE: instance,
        "team": "net",
    }
    assert created["Attachment"]["DeleteOnTermination"] is True
    assert created["Description"] == f"eni-ipam ({instance})"


@pytest.mark.timeout(60)
async def test_a_restarted_reconciler_adopts_what_the_first_created(network: Network) -> None:
    instance = network.run_instance("t3.medium")
    spec = NodeResource(name="n1", instance_id=instance, spec=NodeSpec(pre_allocate=8))
    for _ in range(2):
        async with reconciling(network, [spec], Settings(gc_interval=0)) as (manager, _):
            await until(lambda: manager.nodes["n1"].stats.available >= 8, limit=20)
    found = network.ec2.describe_network_interfaces(
        Filters=[{"Name": "attachment.instance-id", "Values": [instance]}]
    )["NetworkInterfaces"]
    assert len(found) == 2, "the second run created another interface"
    assert sum(len(i["PrivateIpAddresses"]) - 1 for i in found) == 8 + 0, "the second run allocated again"


@pytest.mark.timeout(60)
async def test_a_joining_node_attaches_a_ready_interface_made_ahead_on_ec2(
    network: Network, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(readypool, "ROUND_INTERVAL", 0.1)
    first, second = network.run_instance("t3.medium"), network.run_instance("t3.medium")
    spec = NodeSpec(pre_allocate=8)  # 5 on the primary, 3 on a new interface
    settings = Settings(ready_interfaces_enabled=True, ready_interfaces_per_subnet=1, gc_interval=0)
    n1 = NodeResource(name="n1", instance_id=first, spec=spec)
    async with reconciling(network, [n1], settings) as (manager, _):
        await until(lambda: manager.ready_pool.count() == 1, limit=20)
        [ready] = [i for found in manager.ready_pool.ready.values() for i in found.values()]
        manager.upsert(NodeResource(name="n2", instance_id=second, spec=spec))
        await until(lambda: manager.nodes["n2"].stats.available >= 8, limit=20)
        attached = manager.metrics.sample(
            "eni_ipam_api_duration_seconds_count", {"operation": "AttachNetworkInterface", "outcome": "ok"}
        )
    found = network.ec2.describe_network_interfaces(NetworkInterfaceIds=[ready.id])["NetworkInterfaces"]
    [iface] = found
    assert iface["Attachment"]["InstanceId"] == second and iface["Attachment"]["DeleteOnTermination"] is False
    assert {t["Key"]: t["Value"] for t in iface["TagSet"]}[TAG_POOL] == "ready"
    assert iface["Description"] == "eni-ipam (ready)"
    assert attached == 2  # n1's created interface, and n2's ready one: no create for n2
