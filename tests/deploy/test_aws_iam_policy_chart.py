"""The chart's ``awsIamPolicy`` block renders the policy ``eni-ipam aws-iam-policy`` prints (the real helm,
the Python renderer of providers/aws/iam_policy.py, compared as parsed JSON), and refuses, naming the
value, what the renderer refuses."""

from __future__ import annotations

import json
from typing import Any

import pytest

from providers.aws.iam_policy import EXAMPLE, render_policy
from tests.deploy.conftest import REPO_ROOT, HelmError, render

pytestmark = pytest.mark.system


EXAMPLE_VALUES: dict[str, Any] = {
    "config": {
        "aws": {"region": EXAMPLE["region"], "vpc_id": EXAMPLE["vpc_id"]},
        "settings": {"cluster_name": EXAMPLE["cluster_name"]},
    },
    "awsIamPolicy": {
        "render": True,
        "accountId": EXAMPLE["account_id"],
        "subnetIds": list(EXAMPLE["subnet_ids"]),
        "securityGroupIds": list(EXAMPLE["security_group_ids"]),
    },
}
OTHER_VALUES: dict[str, Any] = {
    "fullnameOverride": "ipam",
    "config": {"aws": {"region": "eu-west-1"}, "settings": {"cluster_name": "blue"}},
    "awsIamPolicy": {
        "render": True,
        "accountId": "444455556666",
        "partition": "aws-us-gov",
        "region": "us-gov-west-1",
        "vpcId": "vpc-0a1b2c3d",
        "subnetIds": ["subnet-0a1b2c3d"],
        "securityGroupIds": ["sg-0a1b2c3d", "sg-0123456789abcdef0"],
        "instanceTag": "team=blue=green",
    },
}


def policy_config_maps(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-aws-iam-policy")]


def rendered_policy(values: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    (config_map,) = policy_config_maps(render(values))
    assert config_map["metadata"]["labels"]["app.kubernetes.io/component"] == "aws-iam-policy"
    return config_map["metadata"]["name"], json.loads(config_map["data"]["policy.json"])


def test_off_by_default() -> None:
    assert policy_config_maps(render()) == []


def test_the_chart_renders_the_example_policy() -> None:
    name, policy = rendered_policy(EXAMPLE_VALUES)
    assert name == "eni-ipam-aws-iam-policy"
    assert policy == render_policy(**EXAMPLE)
    assert policy == json.loads((REPO_ROOT / "deploy" / "aws" / "iam-policy.json").read_text())


def test_the_chart_renders_what_the_renderer_does_for_other_values() -> None:
    name, policy = rendered_policy(OTHER_VALUES)
    assert name == "ipam-aws-iam-policy"
    assert policy == render_policy(
        account_id="444455556666",
        partition="aws-us-gov",
        region="us-gov-west-1",
        vpc_id="vpc-0a1b2c3d",
        cluster_name="blue",
        subnet_ids=["subnet-0a1b2c3d"],
        security_group_ids=["sg-0a1b2c3d", "sg-0123456789abcdef0"],
        instance_tag=("team", "blue=green"),
    )


def test_the_keys_of_the_controllers_interface_tags_are_allowed_on_new_interfaces() -> None:
    values = _with("config.settings.interface_tags", {"team": "payments", "cost-center": "4711"})
    _, policy = rendered_policy(values)
    assert policy == render_policy(**EXAMPLE, interface_tag_keys=["team", "cost-center"])
    (create,) = [s for s in policy["Statement"] if s["Sid"] == "CreateOnlyClusterTaggedInterfaces"]
    assert create["Condition"]["ForAllValues:StringEquals"]["aws:TagKeys"] == [
        "cost-center",
        "eni-ipam/cluster",
        "eni-ipam/instance",
        "eni-ipam/managed-by",
        "eni-ipam/node",
        "eni-ipam/pool",
        "team",
    ]


def test_the_default_instance_tag_is_the_clusters() -> None:
    _, policy = rendered_policy(EXAMPLE_VALUES)
    (attach,) = [s for s in policy["Statement"] if s["Sid"] == "AttachAndDetachOnClusterInstances"]
    assert attach["Condition"] == {"StringEquals": {"ec2:ResourceTag/kubernetes.io/cluster/prod-eu": "owned"}}


def _without(path: str) -> dict[str, Any]:
    values: dict[str, Any] = json.loads(json.dumps(EXAMPLE_VALUES))
    *parents, last = path.split(".")
    node = values
    for key in parents:
        node = node[key]
    del node[last]
    return values


def _with(path: str, value: Any) -> dict[str, Any]:
    values: dict[str, Any] = json.loads(json.dumps(EXAMPLE_VALUES))
    *parents, last = path.split(".")
    node = values
    for key in parents:
        node = node[key]
    node[last] = value
    return values


@pytest.mark.parametrize(
    ("values", "message"),
    [
        pytest.param(
            _without("awsIamPolicy.accountId"), "awsIamPolicy.accountId is missing", id="no-account"
        ),
        pytest.param(
            _with("awsIamPolicy.accountId", 111122223333), "must be a quoted string", id="account-number"
        ),
        pytest.param(
            _with("awsIamPolicy.accountId", "1111"),
            "awsIamPolicy.accountId .* is not 12 digits",
            id="account",
        ),
        pytest.param(_with("awsIamPolicy.partition", "azure"), "awsIamPolicy.partition", id="partition"),
        pytest.param(
            _with("awsIamPolicy.region", "Ireland"), "awsIamPolicy.region .* is not a region", id="region"
        ),
        pytest.param(_with("config.aws.vpc_id", ""), "awsIamPolicy.vpcId is missing", id="no-vpc"),
        pytest.param(_with("awsIamPolicy.vpcId", "vpc-1"), "awsIamPolicy.vpcId .* is not a VPC id", id="vpc"),
        pytest.param(
            _without("awsIamPolicy.subnetIds"), "awsIamPolicy.subnetIds is missing", id="no-subnets"
        ),
        pytest.param(
            _with("awsIamPolicy.subnetIds", ["subnet-01"]),
            "awsIamPolicy.subnetIds: subnet-01 is not",
            id="subnet",
        ),
        pytest.param(
            _with("awsIamPolicy.subnetIds", ["subnet-0123456789abcdef0"] * 2),
            "awsIamPolicy.subnetIds lists the same id twice",
            id="subnet-twice",
        ),
        pytest.param(
            _with("awsIamPolicy.securityGroupIds", []),
            "awsIamPolicy.securityGroupIds is missing",
            id="no-groups",
        ),
        pytest.param(
            _with("awsIamPolicy.securityGroupIds", ["sg-x"]),
            "awsIamPolicy.securityGroupIds: sg-x is not",
            id="group",
        ),
        pytest.param(
            _with("awsIamPolicy.instanceTag", "=owned"),
            "awsIamPolicy.instanceTag .* is not KEY=VALUE",
            id="tag",
        ),
        pytest.param(
            _with("config.settings.cluster_name", ""),
            "config.settings.cluster_name is missing",
            id="no-cluster",
        ),
    ],
)
def test_a_missing_or_malformed_value_stops_the_render_naming_it(
    values: dict[str, Any], message: str
) -> None:
    with pytest.raises(HelmError, match=message):
        render(values)
