"""``eni-ipam demo --cloud moto``: the real reconciler and the real AWS provider against moto's EC2.

moto's server runs in this process on 127.0.0.1 (a free port) with EC2's limits
(:mod:`eni_ipam_testkit.moto_ec2`). The demo creates a VPC, subnets, a security group and instances of
mixed types, then runs the same :class:`~eni_ipam.core.manager.NodeManager` as production over HTTP with
boto3. It stops when every node has reached its watermark (exit 0) or when ``duration`` runs out
(exit 1), and prints what it cost in EC2 requests.

It draws what ``eni-ipam demo`` draws (:func:`eni_ipam.app.demo.display`): the live view on a terminal,
the plain lines with ``plain``, off a terminal or without the view extra. The first frame waits for the
reconciler's first resync (every node's instance read, so its type and limits), which would otherwise
show nodes with pods and no pool, before the reconciler has looked; the last frame is the converged
one.

moto comes with the test kit (``eni-ipam-testkit``), which registers this demo with the command line.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import sys
from collections.abc import Iterator, Mapping
from typing import Any, TextIO
from unittest import mock

from eni_ipam.adapters.metrics.controller import Metrics
from eni_ipam.adapters.metrics.selection import NodeSeriesPolicy
from eni_ipam.adapters.signals import stop_on_signals
from eni_ipam.adapters.terminal import plural
from eni_ipam.app.demo import INSTANCE_TYPES, display, local_cluster, serve_metrics
from eni_ipam.core.clock import LoopClock
from eni_ipam.core.manager import NodeManager
from eni_ipam.core.settings import Settings
from eni_ipam.core.spec import NodeResource, NodeSpec
from providers.aws.provider import AwsProvider
from providers.aws.settings import AwsSettings

REGION = "us-east-1"
ZONES = ("us-east-1a", "us-east-1b")
AMI = "ami-12c6146b"


def seed_network(ec2: Any, nodes: int, rng: random.Random) -> tuple[str, list[NodeResource]]:
    """A VPC with a node and a pod subnet per zone, one security group and ``nodes`` instances;
    returns the VPC id and each node with its pods in use."""
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    group = ec2.create_security_group(GroupName="nodes", Description="eni-ipam demo", VpcId=vpc)["GroupId"]
    node_subnets = []
    for z, zone in enumerate(ZONES):
        node_subnets.append(
            ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.0.{z * 16}.0/22", AvailabilityZone=zone)["Subnet"][
                "SubnetId"
            ]
        )
        pods = ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.0.{z * 16 + 4}.0/22", AvailabilityZone=zone)
        ec2.create_tags(
            Resources=[pods["Subnet"]["SubnetId"]], Tags=[{"Key": "eni-ipam/pods", "Value": "true"}]
        )
    specs = []
    for n in range(nodes):
        instance = ec2.run_instances(
            ImageId=AMI,
            MinCount=1,
            MaxCount=1,
            InstanceType=rng.choice(INSTANCE_TYPES),
            SubnetId=node_subnets[n % len(node_subnets)],
            SecurityGroupIds=[group],
        )["Instances"][0]["InstanceId"]
        spec = NodeSpec(pre_allocate=rng.choice((0, 4, 8, 12)), max_above_watermark=rng.choice((0, 0, 2)))
        specs.append(
            NodeResource(name=f"node-{n:03d}", instance_id=instance, spec=spec, used=rng.randint(0, 6))
        )
    return vpc, specs


def converged(manager: NodeManager) -> bool:
    """Every node known, with limits, and no deficit."""
    nodes = list(manager.nodes.values())
    return (
        manager.ready
        and bool(nodes)
        and all(n.stats.limits_known and n.stats.needed == 0 for n in nodes)
        and not manager.busy()
    )


def resynced(manager: NodeManager) -> bool:
    """The reconciler has read the cloud once: it is ready and knows every node's instance."""
    nodes = list(manager.nodes.values())
    return (
        manager.ready and bool(nodes) and all(n.instance is not None and n.stats.limits_known for n in nodes)
    )


class Requests(Mapping[str, int]):
    """EC2 requests so far by operation, read from the metrics whenever it is read: what the plain
    lines print as the API calls."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def __getitem__(self, operation: str) -> int:
        return requests_by_operation(self._metrics)[operation]

    def __iter__(self) -> Iterator[str]:
        return iter(requests_by_operation(self._metrics))

    def __len__(self) -> int:
        return len(requests_by_operation(self._metrics))


def requests_by_operation(metrics: Metrics) -> dict[str, int]:
    """EC2 requests sent so far (retries included), by operation, from the metrics."""
    out: dict[str, int] = {}
    for family in metrics.registry.collect():
        if family.name == "eni_ipam_api_requests":
            for sample in family.samples:
                if sample.name.endswith("_total"):
                    out[sample.labels["operation"]] = int(sample.value)
    return out


async def _pause(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=seconds)


async def moto_demo(
    *, nodes: int, duration: float, seed: int, port: int | None, out: TextIO, plain: bool = False
) -> int:
    """Run the demo; 0 when every node converged within ``duration``, 1 otherwise."""
    import boto3

    from eni_ipam_testkit.moto_ec2 import MotoServer

    # moto answers any credentials; these keep boto3 from looking for real ones.
    for key, value in (("AWS_ACCESS_KEY_ID", "demo"), ("AWS_SECRET_ACCESS_KEY", "demo")):
        os.environ.setdefault(key, value)
    # The demo names its AMI: moto need not load its 1,300 default ones.
    with mock.patch.dict(os.environ, {"MOTO_EC2_LOAD_DEFAULT_AMIS": "false"}), MotoServer() as server:
        ec2 = boto3.session.Session().client("ec2", region_name=REGION, endpoint_url=server.endpoint_url)
        vpc, specs = await asyncio.to_thread(seed_network, ec2, nodes, random.Random(seed))
        out.write(f"moto EC2 on {server.endpoint_url}: {vpc}, {plural(nodes, 'instance')}\n")
        clock = LoopClock()
        settings = Settings(cluster_name="demo", resync_interval=30.0)
        metrics = Metrics(node_series=NodeSeriesPolicy.of(settings))
        provider = AwsProvider(
            AwsSettings(region=REGION, endpoint_url=server.endpoint_url, allow_plain_http=True, vpc_id=vpc),
            clock=clock,
            metrics=metrics,
        )
        manager, _, _ = local_cluster(provider, settings, specs, metrics=metrics, clock=clock, seed=seed)
        stop = stop_on_signals()
        started = clock.monotonic()
        try:
            async with (
                serve_metrics(metrics, lambda: manager.ready, port, out) as notice,
                asyncio.TaskGroup() as tg,
            ):
                reconciler = tg.create_task(manager.run(), name="manager")

                def late() -> bool:
                    return bool(duration) and clock.monotonic() - started >= duration

                out.write("waiting for the reconciler's first resync of moto's EC2\n")
                while not stop.is_set() and not resynced(manager) and not late():
                    await _pause(stop, 0.05)
                with display(
                    manager, metrics, Requests(metrics), clock, out, plain=plain, status=notice
                ) as show:
                    while not stop.is_set():
                        show()
                        if converged(manager) or late():
                            break
                        await _pause(stop, 0.5)
                reconciler.cancel()
        finally:
            provider.close()
        done = converged(manager)
        calls = requests_by_operation(metrics)
        mutating = sum(n for op, n in calls.items() if not op.startswith("Describe"))
        totals = [n.stats for n in manager.nodes.values()]
        out.write(
            f"\n{'converged' if done else 'NOT converged'}: {plural(len(totals), 'node')} in "
            f"{clock.monotonic() - started:.1f}s, "
            f"pool {plural(sum(s.available for s in totals), 'address', 'addresses')}, "
            f"EC2 requests: {mutating} mutating, {sum(calls.values()) - mutating} read "
            f"({', '.join(f'{op}={n}' for op, n in sorted(calls.items()))})\n"
        )
        return 0 if done else 1


def run_moto_demo(
    *, nodes: int = 10, duration: float = 120.0, seed: int = 1, port: int | None = None, plain: bool = False
) -> int:
    try:
        return asyncio.run(
            moto_demo(nodes=nodes, duration=duration, seed=seed, port=port, out=sys.stdout, plain=plain)
        )
    except KeyboardInterrupt:
        return 0
