"""A Node's providerID reaches no further than the listings: an instance read by id must be in the
configured VPC and carry the configured instance tags, or its node is refused (docs/aws.md §5)."""

from __future__ import annotations

import contextlib
import random
from collections.abc import AsyncIterator
from typing import Any

import pytest
from structlog.testing import capture_logs

from eni_ipam.adapters.metrics import Metrics
from eni_ipam.core import errors
from eni_ipam.core.clock import LoopClock
from eni_ipam.core.manager import NodeManager
from eni_ipam.core.settings import Settings
from eni_ipam.core.spec import NodeResource, NodeSpec
from eni_ipam.simulator.cluster import EmbeddedCluster
from eni_ipam.store.memory import MemoryStore
from tests.providers.aws.conftest import Network
from tests.waiting import until

TAGS = {"cluster": "c1"}


async def test_an_instance_without_the_instance_tags_is_refused_naming_the_tag(network: Network) -> None:
    ours, untagged = network.run_instance(tags=TAGS), network.run_instance()
    provider = network.provider(instance_tags_filter=TAGS)
    try:
        assert (await provider.describe_instance(instance_id=ours)) is not None
        with pytest.raises(errors.InstanceOutOfScope) as refused:
            await provider.describe_instance(instance_id=untagged)
    finally:
        provider.close()
    assert refused.value.instance_id == untagged
    assert refused.value.check == "it does not carry every configured instance tag (cluster=c1)"
    assert untagged in str(refused.value)


async def test_an_instance_of_another_vpc_is_refused_naming_both_vpcs(network: Network) -> None:
    elsewhere = network.instance_in_another_vpc()
    provider = network.provider()
    try:
        with pytest.raises(errors.InstanceOutOfScope) as refused:
            await provider.describe_instance(instance_id=elsewhere)
    finally:
        provider.close()
    assert refused.value.check.startswith("its VPC vpc-")
    assert refused.value.check.endswith(f"is not the configured {network.vpc_id}")


async def test_a_terminated_instance_is_gone_not_out_of_scope(network: Network) -> None:
    instance = network.run_instance()
    network.ec2.terminate_instances(InstanceIds=[instance])
    provider = network.provider(instance_tags_filter=TAGS)
    try:
        assert await provider.describe_instance(instance_id=instance) is None
    finally:
        provider.close()


@contextlib.asynccontextmanager
async def reconciling(
    network: Network, specs: list[NodeResource], **scope: Any
) -> AsyncIterator[tuple[NodeManager, MemoryStore, Metrics]]:
    metrics = Metrics()
    provider = network.provider(metrics, **scope)
    cluster = EmbeddedCluster(
        provider, settings=Settings(gc_interval=0), metrics=metrics, clock=LoopClock(), rng=random.Random(1)
    )
    for spec in specs:
        cluster.side.add(spec)
    try:
        async with cluster.running():
            yield cluster.manager, cluster.store, metrics
    finally:
        provider.close()


@pytest.mark.timeout(60)
async def test_a_node_whose_provider_id_names_an_instance_outside_the_scope_is_refused_not_planned(
    network: Network,
) -> None:
    ours, theirs = network.run_instance(tags=TAGS), network.run_instance()
    specs = [
        NodeResource(name="ours", instance_id=ours, spec=NodeSpec(pre_allocate=2)),
        NodeResource(name="theirs", instance_id=theirs, spec=NodeSpec(pre_allocate=2)),
    ]
    with capture_logs() as logs:
        async with reconciling(network, specs, instance_tags_filter=TAGS) as (manager, store, metrics):
            await until(lambda: manager.nodes["ours"].stats.available >= 2, limit=20)
            await until(lambda: "theirs" in store.statuses, limit=20)
            refused = manager.nodes["theirs"]
            assert refused.instance is None and refused.stats.available == 0
            message = store.statuses["theirs"].message
            assert message == (
                f"refused: instance {theirs} is outside the configured scope: "
                "it does not carry every configured instance tag (cluster=c1)"
            )
            assert metrics.sample(
                "eni_ipam_node_maintenance_failures_total", {"reason": "InstanceOutOfScope"}
            )
    (event,) = [e for e in logs if e["event"] == "instance_out_of_scope"]
    assert event["node"] == "theirs" and event["instance"] == theirs and "cluster=c1" in event["check"]
    interfaces = network.ec2.describe_network_interfaces(
        Filters=[{"Name": "attachment.instance-id", "Values": [theirs]}]
    )["NetworkInterfaces"]
    assert [len(i["PrivateIpAddresses"]) for i in interfaces] == [1], "an address was given to theirs"
