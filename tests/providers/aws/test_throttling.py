"""Throttling on EC2: botocore's retries, what the metrics count, and the reconciler's backoff.

moto never throttles. A ``before-send`` handler answers ``RequestLimitExceeded`` instead, the way
EC2 does, before moto sees the request. botocore's retry machinery is not bypassed (unlike
``Stubber``): it classifies the answer, retries, and our hooks see every attempt.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import Any

import pytest
from botocore.awsrequest import AWSResponse

from eni_ipam.adapters.metrics import Metrics
from eni_ipam.core import errors
from eni_ipam.core.clock import LoopClock
from eni_ipam.core.model import Interface
from eni_ipam.core.ratelimit import RateLimiter
from eni_ipam.core.settings import Settings
from eni_ipam.core.spec import NodeResource, NodeSpec
from eni_ipam.simulator.cluster import EmbeddedCluster
from providers.aws import AwsProvider
from tests.providers.aws.conftest import Network

THROTTLE = (
    b"<Response><Errors><Error><Code>RequestLimitExceeded</Code>"
    b"<Message>Request limit exceeded.</Message></Error></Errors><RequestID>x</RequestID></Response>"
)


class _Raw:
    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: Any) -> Any:
        yield self._body


def throttle(when: Callable[[Any], bool], times: int | None = None) -> Callable[..., Any]:
    """A ``before-send`` handler answering RequestLimitExceeded (503) to requests ``when`` accepts,
    ``times`` times (``None``: as long as it is registered).

    botocore calls *every* ``before-send`` handler, and moto's in-process stub is one of them: left
    alone, moto would carry out the request we answer "throttled". EC2 never executes a throttled
    request, so the handler points it at an address moto does not serve.
    """
    left = [times]

    def handler(request: Any, **_: Any) -> Any:
        if not when(request) or left[0] == 0:
            return None
        if left[0] is not None:
            left[0] -= 1
        url, request.url = request.url, "http://throttled.invalid/"
        return AWSResponse(url, 503, {}, _Raw(THROTTLE))

    return handler


def sample(metrics: Metrics, name: str, **labels: str) -> float:
    return metrics.sample(name, labels) or 0.0


async def node_with_throttled_assign(
    network: Network, metrics: Metrics, *, times: int | None
) -> tuple[AwsProvider, str, Interface]:
    """A provider, an instance and its primary interface; AssignPrivateIpAddresses is throttled
    ``times`` times from now on (``None``: always)."""
    instance = network.run_instance()
    provider = network.provider(metrics)
    found = await provider.describe_instance(instance_id=instance)
    primary = found.primary() if found else None
    assert primary is not None
    event = "before-send.ec2.AssignPrivateIpAddresses"
    network.ec2.meta.events.register_first(event, throttle(lambda r: True, times=times))
    return provider, instance, primary


class CountingLimiter(RateLimiter):
    def __init__(self) -> None:
        super().__init__()
        self.acquired: list[str] = []

    async def acquire(self, operation: str) -> float:
        self.acquired.append(operation)
        return await super().acquire(operation)


@pytest.mark.usefixtures("instant_retries")
async def test_throttled_attempts_are_retried_and_every_attempt_is_counted(network: Network) -> None:
    metrics = Metrics()
    provider, _, primary = await node_with_throttled_assign(network, metrics, times=2)
    new = await provider.assign_addresses(interface_id=primary.id, count=2)
    assert len(new) == 2
    op = "AssignPrivateIpAddresses"
    assert sample(metrics, "eni_ipam_api_requests_total", operation=op) == 3
    assert sample(metrics, "eni_ipam_api_throttled_total", operation=op) == 2
    assert sample(metrics, "eni_ipam_api_duration_seconds_count", operation=op, outcome="ok") == 1
    provider.close()


@pytest.mark.usefixtures("instant_retries")
async def test_throttling_past_the_attempt_budget_raises_throttled_and_assigns_nothing(
    network: Network,
) -> None:
    metrics = Metrics()
    provider, instance, primary = await node_with_throttled_assign(network, metrics, times=None)
    with pytest.raises(errors.Throttled) as caught:
        await provider.assign_addresses(interface_id=primary.id, count=2)
    assert (caught.value.code, caught.value.operation) == ("RequestLimitExceeded", "AssignPrivateIpAddresses")
    op = "AssignPrivateIpAddresses"
    assert sample(metrics, "eni_ipam_api_requests_total", operation=op) == 3  # total_max_attempts
    assert sample(metrics, "eni_ipam_api_throttled_total", operation=op) == 3
    assert (
        sample(metrics, "eni_ipam_api_duration_seconds_count", operation=op, outcome="RequestLimitExceeded")
        == 1
    )
    after = (await provider.describe_instance(instance_id=instance)).primary()  # type: ignore[union-attr]
    assert after is not None and after.addresses == primary.addresses
    provider.close()


@pytest.mark.usefixtures("instant_retries")
async def test_every_retry_spends_a_token_of_the_operations_bucket(network: Network) -> None:
    instance = network.run_instance()
    provider = network.provider()
    limiter = CountingLimiter()
    provider.client._caller.limiter = limiter  # the first attempt's and the retries' buckets
    primary = (await provider.describe_instance(instance_id=instance)).primary()  # type: ignore[union-attr]
    assert primary is not None
    limiter.acquired.clear()
    network.ec2.meta.events.register_first(
        "before-send.ec2.AssignPrivateIpAddresses", throttle(lambda r: True, times=2)
    )
    await provider.assign_addresses(interface_id=primary.id, count=1)
    assert limiter.acquired == ["AssignPrivateIpAddresses"] * 3
    provider.close()


@pytest.mark.timeout(60)
@pytest.mark.usefixtures("instant_retries")
async def test_reconciler_backs_off_the_throttled_node_while_the_others_converge(network: Network) -> None:
    metrics = Metrics()
    clock = LoopClock()
    provider = network.provider(metrics)
    cluster = EmbeddedCluster(
        provider,
        settings=Settings(backoff_initial=0.05, backoff_max=0.2, gc_interval=0, resync_interval=600),
        metrics=metrics,
        clock=clock,
        rng=random.Random(1),
    )
    manager, side = cluster.manager, cluster.side
    instances = {name: network.run_instance() for name in ("calm-1", "calm-2", "throttled")}
    primaries = {
        name: network.ec2.describe_instances(InstanceIds=[i])["Reservations"][0]["Instances"][0][
            "NetworkInterfaces"
        ][0]["NetworkInterfaceId"]
        for name, i in instances.items()
    }
    for name, instance in instances.items():
        side.add(NodeResource(name=name, instance_id=instance, spec=NodeSpec(pre_allocate=4)))
    victim = primaries["throttled"]

    def names_victim(request: Any) -> bool:
        body = request.body or b""
        return victim in (body.decode() if isinstance(body, bytes) else body)

    handler = throttle(names_victim)
    event = "before-send.ec2.AssignPrivateIpAddresses"
    network.ec2.meta.events.register_first(event, handler)

    def throttled_calls() -> float:
        return sample(
            metrics,
            "eni_ipam_api_duration_seconds_count",
            operation="AssignPrivateIpAddresses",
            outcome="RequestLimitExceeded",
        )

    try:
        async with cluster.running():
            async with asyncio.timeout(20):
                while not all(manager.nodes[n].stats.available >= 4 for n in ("calm-1", "calm-2")):
                    await asyncio.sleep(0.02)
                while throttled_calls() < 2:  # the throttled node is retried, after its backoff
                    await asyncio.sleep(0.02)
            assert manager.nodes["throttled"].stats.available == 0
            assert sample(metrics, "eni_ipam_node_maintenance_failures_total", reason="Throttled") >= 2
            network.ec2.meta.events.unregister(event, handler)  # EC2's bucket refills
            async with asyncio.timeout(20):
                while manager.nodes["throttled"].stats.available < 4:
                    await asyncio.sleep(0.02)
    finally:
        provider.close()


@pytest.mark.usefixtures("instant_retries")
async def test_a_retry_after_the_leadership_term_ended_is_not_sent(network: Network) -> None:
    from eni_ipam.core.fence import Fence, FencedProvider

    metrics = Metrics()
    provider, instance, primary = await node_with_throttled_assign(network, metrics, times=1)
    now = [100.0]
    fence = Fence(is_open=True, term_clock=lambda: now[0])
    fence.renewed(110.0)

    def paused_during_the_backoff(request: Any, **_: Any) -> None:
        now[0] += 20.0  # the process was stopped between the attempt and its retry

    network.ec2.meta.events.register_first(
        "before-send.ec2.AssignPrivateIpAddresses", paused_during_the_backoff
    )
    with pytest.raises(errors.Lapsed):
        await FencedProvider(provider, fence).assign_addresses(interface_id=primary.id, count=2)
    op = "AssignPrivateIpAddresses"
    assert sample(metrics, "eni_ipam_api_requests_total", operation=op) == 1  # the throttled one only
    after = (await provider.describe_instance(instance_id=instance)).primary()  # type: ignore[union-attr]
    assert after is not None and after.addresses == primary.addresses
    assert fence.in_flight == 0
    provider.close()
