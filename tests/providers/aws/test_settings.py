"""AwsSettings: defaults, parsing, and errors that name the bad field."""

from __future__ import annotations

from typing import Any

import pytest

from eni_ipam.config.schema import validate
from eni_ipam.core.ratelimit import EC2_BUCKETS, Bucket
from eni_ipam.errors import ConfigError
from providers.aws.settings import AwsSettings


def _aws_settings(data: Any) -> AwsSettings:
    """The ``aws:`` section read as the run configuration reads it."""
    return validate(AwsSettings, {} if data is None else data, path="aws")


def test_defaults_follow_ec2_and_botocore_standard_mode() -> None:
    s = _aws_settings(None)
    assert s == AwsSettings()
    assert (s.total_max_attempts, s.max_results, s.update_limits_via_api) == (3, 1000, True)
    assert s.buckets() == dict(EC2_BUCKETS)


def test_every_field_parses_from_yaml_shaped_data() -> None:
    s = _aws_settings(
        {
            "region": "eu-west-1",
            "endpoint_url": "https://ec2.eu-west-1.amazonaws.com",
            "vpc_id": "vpc-123",
            "subnet_ids_filter": ["subnet-a", "subnet-b"],
            "subnet_tags_filter": {"tier": "pods"},
            "instance_tags_filter": {"kubernetes.io/cluster/prod": "owned"},
            "max_results": 500,
            "max_threads": 8,
            "total_max_attempts": 2,
            "connect_timeout": "2s",
            "read_timeout": 10,
            "update_limits_via_api": False,
            "limits_refresh_interval": "5m",
            "rate_limits": {"AssignPrivateIpAddresses": {"burst": 20, "refill": 2}},
        }
    )
    assert s.subnet_ids_filter == ("subnet-a", "subnet-b")
    assert s.limits_refresh_interval == 300 and s.connect_timeout == 2
    assert s.buckets()["AssignPrivateIpAddresses"] == Bucket(20, 2)
    assert s.buckets()["CreateNetworkInterface"] == EC2_BUCKETS["CreateNetworkInterface"]


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"regoin": "eu-west-1"}, "aws.regoin"),
        ({"region": "Ireland"}, "aws.region"),
        ({"endpoint_url": "ec2.local"}, "aws.endpoint_url"),
        ({"vpc_id": "subnet-1"}, "aws.vpc_id"),
        ({"subnet_ids_filter": "subnet-1"}, "aws.subnet_ids_filter"),
        ({"subnet_ids_filter": ["subnet-1", "vpc-2"]}, "aws.subnet_ids_filter[1]"),
        ({"subnet_ids_filter": ["subnet-1", "subnet-1"]}, "aws.subnet_ids_filter"),
        ({"instance_tags_filter": {"a": 1}}, "aws.instance_tags_filter.a"),
        ({"max_results": 2000}, "aws.max_results"),
        ({"max_threads": 0}, "aws.max_threads"),
        ({"total_max_attempts": True}, "aws.total_max_attempts"),
        ({"read_timeout": "0s"}, "aws.read_timeout"),
        ({"update_limits_via_api": "yes"}, "aws.update_limits_via_api"),
        ({"rate_limits": {"assign": {"burst": 1, "refill": 1}}}, "aws.rate_limits.assign"),
        (
            {"rate_limits": {"AssignPrivateIpAddresses": {"burst": 1}}},
            "aws.rate_limits.AssignPrivateIpAddresses.refill",
        ),
        (
            {"rate_limits": {"AssignPrivateIpAddresses": {"burst": 1, "refill": -1}}},
            "aws.rate_limits.AssignPrivateIpAddresses.refill",
        ),
        ([], "aws"),
    ],
)
def test_bad_values_name_the_field(data: Any, field: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _aws_settings(data)
    assert caught.value.field == field
