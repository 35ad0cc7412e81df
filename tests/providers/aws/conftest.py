"""Fixtures of the AWS provider's tests: moto's EC2 in-process, with EC2's limits
(eni_ipam_testkit.moto_ec2), and a provider over it. Every test here has a timeout: one moto call
can hang."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import boto3
import botocore.retries.standard
import pytest

from eni_ipam.adapters.metrics import Metrics
from eni_ipam.core.clock import LoopClock
from providers.aws import AwsProvider, AwsSettings
from providers.aws.client import make_session
from tests.aws_environment import isolate

REGION = "us-east-1"
ZONE = "us-east-1a"
AMI = "ami-12c6146b"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/providers/aws" in str(item.path) and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(30))


@pytest.fixture(autouse=True)
def aws_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Dummy credentials and a region; nothing may reach a real account."""
    isolate(monkeypatch, REGION)


_SESSION: list[boto3.session.Session] = []


def ec2_client(**kwargs: Any) -> Any:
    """A boto3 EC2 client from one shared session (a new session reloads EC2's model, ~0.4 s).

    The session is the product's (:func:`~providers.aws.client.make_session`): the provider's
    listings are read by the listing parser, as in production. Calls made on the client directly
    (the tests' own set-up and checks) get botocore's dicts, as from any boto3 client.
    """
    if not _SESSION:
        # moto hooks the sessions made after it is imported: import it first, so the shared session
        # answers from moto under mock_aws however the tests are ordered (test_api.py runs first).
        import moto  # noqa: F401

        _SESSION.append(make_session())
    return _SESSION[0].client("ec2", region_name=REGION, **kwargs)


@pytest.fixture
def instant_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """botocore sleeps (really) between retries; the tests keep the retries and drop the sleep."""
    monkeypatch.setattr(botocore.retries.standard.ExponentialBackoff, "delay_amount", lambda self, ctx: 0)


@dataclasses.dataclass
class Network:
    """A VPC in moto: a big subnet, a small one (11 free addresses), two security groups."""

    ec2: Any
    vpc_id: str
    subnet_id: str
    small_subnet_id: str
    other_zone_subnet_id: str
    security_group_ids: tuple[str, ...]

    def run_instance(
        self, instance_type: str = "m5.large", *, tags: dict[str, str] | None = None, subnet_id: str = ""
    ) -> str:
        params: dict[str, Any] = {
            "ImageId": AMI,
            "MinCount": 1,
            "MaxCount": 1,
            "InstanceType": instance_type,
            "SubnetId": subnet_id or self.subnet_id,
            "SecurityGroupIds": list(self.security_group_ids),
        }
        if tags:
            params["TagSpecifications"] = [
                {"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}
            ]
        return str(self.ec2.run_instances(**params)["Instances"][0]["InstanceId"])

    def instance_in_another_vpc(self, instance_type: str = "m5.large") -> str:
        """An instance of another tier's VPC, which a scope of this one leaves out."""
        vpc = self.ec2.create_vpc(CidrBlock="10.1.0.0/16")["Vpc"]["VpcId"]
        subnet = self.ec2.create_subnet(VpcId=vpc, CidrBlock="10.1.0.0/20", AvailabilityZone=ZONE)
        answer = self.ec2.run_instances(
            ImageId=AMI,
            MinCount=1,
            MaxCount=1,
            InstanceType=instance_type,
            SubnetId=subnet["Subnet"]["SubnetId"],
        )
        return str(answer["Instances"][0]["InstanceId"])

    def provider(self, metrics: Metrics | None = None, **settings: Any) -> AwsProvider:
        config = AwsSettings(region=REGION, vpc_id=self.vpc_id, **settings)
        return AwsProvider(config, clock=LoopClock(), metrics=metrics or Metrics(), client=self.ec2)


def make_network(ec2: Any = None) -> Network:
    """The :class:`Network`, made with ``ec2`` (default: a client of moto in-process)."""
    ec2 = ec2 if ec2 is not None else ec2_client()
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]

    def subnet(cidr: str, zone: str = ZONE) -> str:
        return str(ec2.create_subnet(VpcId=vpc, CidrBlock=cidr, AvailabilityZone=zone)["Subnet"]["SubnetId"])

    groups = tuple(
        ec2.create_security_group(GroupName=f"g{n}", Description="eni-ipam test", VpcId=vpc)["GroupId"]
        for n in (1, 2)
    )
    return Network(
        ec2=ec2,
        vpc_id=vpc,
        subnet_id=subnet("10.0.0.0/20"),
        small_subnet_id=subnet("10.0.16.0/28"),
        other_zone_subnet_id=subnet("10.0.32.0/24", "us-east-1b"),
        security_group_ids=groups,
    )


@pytest.fixture
def moto_ec2() -> Iterator[None]:
    """moto's EC2 in-process, answering like real EC2 where it matters (eni_ipam_testkit.moto_ec2)."""
    from moto import mock_aws

    from eni_ipam_testkit.moto_ec2 import ec2_fidelity

    with mock_aws(), ec2_fidelity():
        yield


@pytest.fixture
def network(moto_ec2: None) -> Network:
    return make_network()


@pytest.fixture
def http_network() -> Iterator[Network]:
    """The :class:`Network` in moto's EC2 served over HTTP (:class:`~eni_ipam_testkit.moto_ec2.MotoServer`),
    reached through botocore's HTTP layer as EC2 is."""
    from eni_ipam_testkit.moto_ec2 import MotoServer

    with MotoServer() as server:
        yield make_network(ec2_client(endpoint_url=server.endpoint_url))
