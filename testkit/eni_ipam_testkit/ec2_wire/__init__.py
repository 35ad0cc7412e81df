"""EC2's wire protocol in front of the in-memory cloud, for the real AWS provider to talk to.

The AWS provider (:mod:`providers.aws`) reaches EC2 through boto3; the in-memory cloud
(:mod:`providers.sim`) is EC2's semantics without a wire. This package joins them: botocore builds,
signs and sends real EC2 Query requests, and gets back EC2's XML answers and error documents,
rendered from the cloud's records, so the provider runs its whole boto3 path (serializer, HTTP or
hook, parser, retries, error translation) against the same cloud the simulator and the reconciler's
tests use. Unlike moto (:mod:`~eni_ipam_testkit.moto_ec2`), it adds no EC2 model of its own: every
decision is the in-memory cloud's, and answers are as heavy as real EC2's, because the benchmark
compares parsers on them.

* :class:`~.frontend.Ec2Frontend` — the protocol: one request's bytes in, one EC2 answer out
  (:mod:`~.query` reads requests, :mod:`~.describe` and :mod:`~.mutate` are the operations,
  :mod:`~.render` writes XML, :mod:`~.tables` lists records with filters and pages and keeps
  rendered items until their record changes);
* :func:`~.frontend.install` — in-process, for tests: a botocore ``before-send`` hook on a boto3
  client, no socket;
* :class:`~.server.Ec2Server` — over HTTP (aiohttp), in the test's loop or, for the benchmark, in a
  process of its own (``python -m eni_ipam_testkit.ec2_wire.server``, :func:`~.server.spawn`);
* :func:`~.fleet.build_fleet` — a 100,000-node cloud in seconds.

Operations: DescribeVpcs, DescribeSubnets, DescribeSecurityGroups, DescribeInstances,
DescribeNetworkInterfaces, DescribeInstanceTypes, AssignPrivateIpAddresses,
UnassignPrivateIpAddresses, AssignIpv6Addresses (a count of /80 prefixes), CreateNetworkInterface,
AttachNetworkInterface, ModifyNetworkInterfaceAttribute, DetachNetworkInterface,
DeleteNetworkInterface: every call the AWS provider makes (:mod:`providers.aws.api`,
:mod:`providers.aws.limits`, its VPC check). Not emulated: signatures (any credentials pass), IPv6
addresses (only /80 prefixes of a subnet's /64), explicit addresses, DryRun, eventual consistency,
and every other EC2 action (``InvalidAction``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from eni_ipam_testkit.ec2_wire.fleet import Fleet, FleetSpec, build_fleet
from eni_ipam_testkit.ec2_wire.frontend import DEFAULT_INSTANCE_TAGS, Answer, Ec2Frontend, Installed, install

if TYPE_CHECKING:
    from eni_ipam_testkit.ec2_wire.server import Ec2Server, ServerProcess, spawn

__all__ = [
    "DEFAULT_INSTANCE_TAGS",
    "Answer",
    "Ec2Frontend",
    "Ec2Server",
    "Fleet",
    "FleetSpec",
    "Installed",
    "ServerProcess",
    "build_fleet",
    "install",
    "spawn",
]


def __getattr__(name: str) -> Any:
    # Lazily: the in-process front end needs neither aiohttp nor YAML, and `python -m
    # eni_ipam_testkit.ec2_wire.server` must not find its module imported already.
    if name in ("Ec2Server", "ServerProcess", "spawn"):
        from eni_ipam_testkit.ec2_wire import server

        return getattr(server, name)
    raise AttributeError(name)
