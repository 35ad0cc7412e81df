"""The EC2 client the provider makes knows the calls the provider makes, and only those."""

from __future__ import annotations

import re
from pathlib import Path

import botocore.session

from providers.aws import lean
from providers.aws.client import make_client
from providers.aws.settings import AwsSettings

PROVIDER = Path(lean.__file__).parent


def test_every_call_the_provider_names_is_in_the_lean_model() -> None:
    named = set()
    for source in PROVIDER.glob("*.py"):
        named |= set(re.findall(r"\.(?:call|pages)\(\s*\"([A-Za-z]+)\"", source.read_text()))
    assert named and named <= set(lean.OPERATIONS), named - set(lean.OPERATIONS)


def test_the_client_has_those_operations_and_the_shapes_they_reach() -> None:
    client = make_client(AwsSettings(region="eu-west-1"))
    model = client.meta.service_model
    assert sorted(model.operation_names) == sorted(lean.OPERATIONS)
    whole = botocore.session.get_session().get_service_model("ec2")
    assert len(whole.operation_names) > 10 * len(lean.OPERATIONS)
    for name in lean.OPERATIONS:  # every shape resolves, member by member, as in the whole model
        mine, theirs = model.operation_model(name), whole.operation_model(name)
        assert _members(mine.input_shape) == _members(theirs.input_shape)
        assert _members(mine.output_shape) == _members(theirs.output_shape)
    assert not hasattr(client, "run_instances")
    assert client.can_paginate("describe_network_interfaces")
    assert client.meta.endpoint_url == "https://ec2.eu-west-1.amazonaws.com"


def _members(shape, depth: int = 0) -> object:  # type: ignore[no-untyped-def]
    if shape is None or depth > 6:
        return None
    if shape.type_name == "structure":
        return {n: _members(m, depth + 1) for n, m in shape.members.items()}
    if shape.type_name == "list":
        return [_members(shape.member, depth + 1)]
    return shape.type_name


def test_the_endpoints_keep_ec2_and_the_credential_services_in_every_partition() -> None:
    data = {
        "partitions": [
            {"partition": "aws", "services": {"ec2": {}, "s3": {}, "sts": {}, "portal.sso": {}}},
            {"partition": "aws-cn", "services": {"ec2": {}, "iam": {}}},
        ],
        "version": 3,
    }
    pruned = lean.prune_endpoints(data, lean.ENDPOINT_SERVICES)
    assert [sorted(p["services"]) for p in pruned["partitions"]] == [["ec2", "portal.sso", "sts"], ["ec2"]]
    assert pruned["version"] == 3 and len(data["partitions"][0]["services"]) == 4  # the input unchanged
