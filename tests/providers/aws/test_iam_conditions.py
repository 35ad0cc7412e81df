"""The rendered IAM policy binds every EC2 action the provider uses as docs/aws.md §2 says.

Two tables. STATEMENTS: for each action and resource type EC2 authorises it against, the statements
that allow it and the condition keys that bind it; the rendered policy must say exactly that, and the
Service Authorization Reference (as shipped in parliament's iam_definition.json) must list each
resource type and condition key for that action. REQUESTS: authorisations with their request context,
judged by a small evaluator (iam_eval.py): what the provider does is allowed, what another cluster's or
another account's resources would need is denied. Both tables judge the shipped file
(deploy/aws/iam-policy.json) and the renderer's output for the same example values.
"""

from __future__ import annotations

import functools
import importlib.resources
import json
from pathlib import Path
from typing import Any

import pytest

from providers.aws.iam_policy import EXAMPLE, render_policy
from tests.providers.aws.iam_eval import Request, allowed, matching_sids
from tests.providers.aws.test_iam_policy import operations_named_in_the_provider

ROOT = Path(__file__).resolve().parents[3]
POLICY = render_policy(**EXAMPLE)
SHIPPED = ROOT / "deploy" / "aws" / "iam-policy.json"
CLUSTER_TAGS = {"ec2:ResourceTag/eni-ipam/cluster", "ec2:ResourceTag/eni-ipam/managed-by"}
REQUEST_TAGS = {"aws:RequestTag/eni-ipam/cluster", "aws:RequestTag/eni-ipam/managed-by"}
INSTANCE_TAG = "ec2:ResourceTag/kubernetes.io/cluster/prod-eu"
TAG_KEYS = {*REQUEST_TAGS, "aws:TagKeys"}
ATTRIBUTES = {
    "ec2:Attribute/AssociatePublicIpAddress",
    "ec2:Attribute/Description",
    "ec2:Attribute/EnablePrimaryIpv6",
    "ec2:Attribute/SourceDestCheck",
}
"""ModifyNetworkInterfaceAttribute's parameters IAM exposes (primitive, or an object holding only a
``Value``): the policy allows the call only without them."""

# action, resource type, statements that allow it, condition keys that bind it
STATEMENTS: list[tuple[str, str, set[str], set[str]]] = [
    ("ec2:DescribeVpcs", "*", {"Discover"}, {"aws:RequestedRegion"}),
    ("ec2:DescribeSubnets", "*", {"Discover"}, {"aws:RequestedRegion"}),
    ("ec2:DescribeSecurityGroups", "*", {"Discover"}, {"aws:RequestedRegion"}),
    ("ec2:DescribeInstances", "*", {"Discover"}, {"aws:RequestedRegion"}),
    ("ec2:DescribeInstanceTypes", "*", {"Discover"}, {"aws:RequestedRegion"}),
    ("ec2:DescribeNetworkInterfaces", "*", {"Discover"}, {"aws:RequestedRegion"}),
    (
        "ec2:AssignPrivateIpAddresses",
        "network-interface",
        {"AddressesOnClusterSubnetInterfaces"},
        {"ec2:Vpc", "ec2:Subnet"},
    ),
    (
        "ec2:UnassignPrivateIpAddresses",
        "network-interface",
        {"AddressesOnClusterSubnetInterfaces"},
        {"ec2:Vpc", "ec2:Subnet"},
    ),
    (
        "ec2:AssignIpv6Addresses",
        "network-interface",
        {"Ipv6PrefixOnClusterSubnetInterfaces"},
        {"ec2:Vpc", "ec2:Subnet"},
    ),
    ("ec2:CreateNetworkInterface", "network-interface", {"CreateOnlyClusterTaggedInterfaces"}, TAG_KEYS),
    ("ec2:CreateNetworkInterface", "subnet", {"CreateInClusterSubnetsWithClusterGroups"}, {"ec2:Vpc"}),
    (
        "ec2:CreateNetworkInterface",
        "security-group",
        {"CreateInClusterSubnetsWithClusterGroups"},
        {"ec2:Vpc"},
    ),
    ("ec2:CreateTags", "network-interface", {"TagOnlyWhileCreating"}, {"ec2:CreateAction", *TAG_KEYS}),
    ("ec2:AttachNetworkInterface", "instance", {"AttachAndDetachOnClusterInstances"}, {INSTANCE_TAG}),
    (
        "ec2:AttachNetworkInterface",
        "network-interface",
        {"ChangeOnlyClusterInterfaces"},
        {*CLUSTER_TAGS, "ec2:Vpc"},
    ),
    ("ec2:DetachNetworkInterface", "instance", {"AttachAndDetachOnClusterInstances"}, {INSTANCE_TAG}),
    (
        "ec2:DetachNetworkInterface",
        "network-interface",
        {"ChangeOnlyClusterInterfaces"},
        {*CLUSTER_TAGS, "ec2:Vpc"},
    ),
    (
        "ec2:ModifyNetworkInterfaceAttribute",
        "network-interface",
        {"DeleteOnTerminationOfClusterInterfacesOnly"},
        {*CLUSTER_TAGS, "ec2:Vpc", *ATTRIBUTES},
    ),
    (
        "ec2:DeleteNetworkInterface",
        "network-interface",
        {"ChangeOnlyClusterInterfaces"},
        {*CLUSTER_TAGS, "ec2:Vpc"},
    ),
]


def resource_type(resource: str) -> str:
    return "*" if resource == "*" else resource.split(":", 5)[5].split("/")[0]


def what_the_policy_says(policy: dict[str, Any]) -> dict[tuple[str, str], tuple[set[str], set[str]]]:
    found: dict[tuple[str, str], tuple[set[str], set[str]]] = {}
    for statement in policy["Statement"]:
        assert statement["Effect"] == "Allow"
        keys = {k for block in statement.get("Condition", {}).values() for k in block}
        resources = statement["Resource"]
        for action in statement["Action"]:
            for resource in [resources] if isinstance(resources, str) else resources:
                sids, bound = found.setdefault((action, resource_type(resource)), (set(), set()))
                sids.add(statement["Sid"])
                bound.update(keys)
    return found


@pytest.fixture(params=["shipped-file", "rendered"])
def policy(request: pytest.FixtureRequest) -> dict[str, Any]:
    """deploy/aws/iam-policy.json, and the renderer's policy for the same (example) values."""
    return json.loads(SHIPPED.read_text()) if request.param == "shipped-file" else POLICY


def test_the_policy_binds_each_action_and_resource_type_as_the_table_says(policy: dict[str, Any]) -> None:
    table = {(a, r): (sids, keys) for a, r, sids, keys in STATEMENTS}
    assert len(table) == len(STATEMENTS)
    assert what_the_policy_says(policy) == table


def test_the_table_covers_every_action_the_provider_calls_and_nothing_else() -> None:
    assert {a for a, *_ in STATEMENTS} == operations_named_in_the_provider() | {"ec2:CreateTags"}


@functools.cache
def ec2_reference() -> dict[str, Any]:
    """EC2 in the Service Authorization Reference, as parliament ships it."""
    text = importlib.resources.files("parliament").joinpath("iam_definition.json").read_text()
    (ec2,) = [s for s in json.loads(text) if s["prefix"] == "ec2"]
    return {p["privilege"]: p for p in ec2["privileges"]}


def _id(value: object) -> str:
    """A parameter's id, the same in every process (a set's order is not: tests run in parallel)."""
    shown = sorted(value) if isinstance(value, set | frozenset) else value
    return str(shown)[:40]


@pytest.mark.parametrize(("action", "rtype", "sids", "keys"), STATEMENTS, ids=_id)
def test_each_resource_type_and_condition_key_is_one_the_reference_lists(
    action: str, rtype: str, sids: set[str], keys: set[str]
) -> None:
    privilege = ec2_reference()[action.removeprefix("ec2:")]
    by_type = {r["resource_type"].rstrip("*"): r for r in privilege["resource_types"]}
    assert rtype in by_type or (rtype == "*" and set(by_type) == {""}), sorted(by_type)
    if rtype == "*":  # no resource-level permissions: only the action's own keys and global ones
        listed = set(by_type[""]["condition_keys"])
    else:
        listed = set(by_type[rtype]["condition_keys"]) | set(by_type.get("", {}).get("condition_keys", ()))
    for key in keys:
        # ec2:ResourceTag/eni-ipam/cluster is listed as ec2:ResourceTag/${TagKey}, and
        # ec2:Attribute/SourceDestCheck as ec2:Attribute/${AttributeName}
        prefix = key.split("/", 1)[0] + "/${"
        generic = "/" in key and any(k.startswith(prefix) for k in listed)
        assert key in listed or generic or key == "aws:RequestedRegion", (action, rtype, key)


def test_every_resource_type_the_reference_requires_is_allowed() -> None:
    """A required resource type (``*`` in the reference) left out would deny the action everywhere."""
    table = {(a, r) for a, r, *_ in STATEMENTS}
    for action in {a for a, *_ in STATEMENTS}:
        for r in ec2_reference()[action.removeprefix("ec2:")]["resource_types"]:
            if r["resource_type"].endswith("*"):
                assert (action, r["resource_type"].rstrip("*")) in table, (action, r["resource_type"])


def test_no_condition_key_can_refuse_address_reassignment() -> None:
    """docs/aws.md §2: nothing in IAM sees AssignPrivateIpAddresses' AllowReassignment."""
    privilege = ec2_reference()["AssignPrivateIpAddresses"]
    keys = {k for r in privilege["resource_types"] for k in r["condition_keys"]}
    assert not [k for k in keys if "eassign" in k.lower() or "allow" in k.lower()], sorted(keys)


# -- requests, judged -------------------------------------------------------------------------------

ARN = "arn:aws:ec2:eu-west-1:111122223333:"
VPC = f"{ARN}vpc/vpc-0123456789abcdef0"
SUBNET = f"{ARN}subnet/subnet-0123456789abcdef0"
SUBNET_2 = f"{ARN}subnet/subnet-0fedcba9876543210"
GROUP = f"{ARN}security-group/sg-0123456789abcdef0"
IFACE = f"{ARN}network-interface/eni-0123456789abcdef0"
INSTANCE = f"{ARN}instance/i-0123456789abcdef0"
REGION = {"aws:RequestedRegion": "eu-west-1"}
IN_VPC = {**REGION, "ec2:Vpc": VPC, "ec2:Subnet": SUBNET}
OURS = {
    **IN_VPC,
    "ec2:ResourceTag/eni-ipam/cluster": "prod-eu",
    "ec2:ResourceTag/eni-ipam/managed-by": "eni-ipam",
}
THEIRS = {**OURS, "ec2:ResourceTag/eni-ipam/cluster": "prod-us"}
OUR_INSTANCE = {**REGION, "ec2:ResourceTag/kubernetes.io/cluster/prod-eu": "owned"}
OWN_KEYS = ["eni-ipam/cluster", "eni-ipam/managed-by", "eni-ipam/node", "eni-ipam/instance"]
TAGGED_AT_CREATE: dict[str, str | list[str]] = {
    **REGION,
    "aws:RequestTag/eni-ipam/cluster": "prod-eu",
    "aws:RequestTag/eni-ipam/managed-by": "eni-ipam",
    "aws:RequestTag/eni-ipam/node": "ip-10-0-1-23",
    "aws:RequestTag/eni-ipam/instance": "i-0123456789abcdef0",
    "aws:TagKeys": OWN_KEYS,
}
FOREIGN_TAG = {
    **TAGGED_AT_CREATE,
    "aws:RequestTag/kubernetes.io/cluster/prod-us": "owned",
    "aws:TagKeys": [*OWN_KEYS, "kubernetes.io/cluster/prod-us"],
}
CREATE_TAGS = {**TAGGED_AT_CREATE, "ec2:CreateAction": "CreateNetworkInterface"}
READY_AT_CREATE: dict[str, str | list[str]] = {
    **REGION,
    "aws:RequestTag/eni-ipam/cluster": "prod-eu",
    "aws:RequestTag/eni-ipam/managed-by": "eni-ipam",
    "aws:RequestTag/eni-ipam/pool": "ready",
    "aws:TagKeys": ["eni-ipam/cluster", "eni-ipam/managed-by", "eni-ipam/pool"],
}
"""A ready interface's create: the ownership tags and the pool's, no node or instance tag."""


def other(arn: str, old: str, new: str) -> str:
    assert old in arn
    return arn.replace(old, new)


REQUESTS: list[tuple[str, Request, bool]] = [
    # every path the provider uses
    ("describe", Request("ec2:DescribeNetworkInterfaces", "*", REGION), True),
    ("describe-instance-types", Request("ec2:DescribeInstanceTypes", "*", REGION), True),
    ("assign-on-the-primary-interface", Request("ec2:AssignPrivateIpAddresses", IFACE, IN_VPC), True),
    (
        "assign-in-the-second-subnet",
        Request("ec2:AssignPrivateIpAddresses", IFACE, {**IN_VPC, "ec2:Subnet": SUBNET_2}),
        True,
    ),
    ("unassign", Request("ec2:UnassignPrivateIpAddresses", IFACE, IN_VPC), True),
    ("ipv6-prefix", Request("ec2:AssignIpv6Addresses", IFACE, IN_VPC), True),
    (
        "create-the-interface",
        Request("ec2:CreateNetworkInterface", f"{ARN}network-interface/*", TAGGED_AT_CREATE),
        True,
    ),
    (
        "create-in-the-subnet",
        Request("ec2:CreateNetworkInterface", SUBNET_2, {**REGION, "ec2:Vpc": VPC}),
        True,
    ),
    ("create-with-the-group", Request("ec2:CreateNetworkInterface", GROUP, {**REGION, "ec2:Vpc": VPC}), True),
    ("tag-at-creation", Request("ec2:CreateTags", f"{ARN}network-interface/*", CREATE_TAGS), True),
    (
        "create-a-ready-interface",
        Request("ec2:CreateNetworkInterface", f"{ARN}network-interface/*", READY_AT_CREATE),
        True,
    ),
    (
        "tag-a-ready-interface-at-creation",
        Request(
            "ec2:CreateTags",
            f"{ARN}network-interface/*",
            {**READY_AT_CREATE, "ec2:CreateAction": "CreateNetworkInterface"},
        ),
        True,
    ),
    (
        "attach-a-ready-interface",
        Request("ec2:AttachNetworkInterface", IFACE, {**OURS, "ec2:ResourceTag/eni-ipam/pool": "ready"}),
        True,
    ),
    ("attach-to-the-instance", Request("ec2:AttachNetworkInterface", INSTANCE, OUR_INSTANCE), True),
    ("attach-our-interface", Request("ec2:AttachNetworkInterface", IFACE, OURS), True),
    ("delete-on-termination", Request("ec2:ModifyNetworkInterfaceAttribute", IFACE, OURS), True),
    ("detach-from-the-instance", Request("ec2:DetachNetworkInterface", INSTANCE, OUR_INSTANCE), True),
    ("detach-our-interface", Request("ec2:DetachNetworkInterface", IFACE, OURS), True),
    ("delete-our-interface", Request("ec2:DeleteNetworkInterface", IFACE, OURS), True),
    # what it must not be able to do
    (
        "describe-in-another-region",
        Request("ec2:DescribeInstances", "*", {"aws:RequestedRegion": "us-east-1"}),
        False,
    ),
    (
        "assign-in-another-vpc",
        Request("ec2:AssignPrivateIpAddresses", IFACE, {**IN_VPC, "ec2:Vpc": other(VPC, "vpc-0", "vpc-f")}),
        False,
    ),
    (
        "assign-in-another-region",
        Request("ec2:AssignPrivateIpAddresses", other(IFACE, "eu-west-1", "us-east-1"), IN_VPC),
        False,
    ),
    (
        "assign-in-another-account",
        Request("ec2:AssignPrivateIpAddresses", other(IFACE, "111122223333", "444455556666"), IN_VPC),
        False,
    ),
    (
        "assign-in-an-unlisted-subnet",
        Request(
            "ec2:AssignPrivateIpAddresses",
            IFACE,
            {**IN_VPC, "ec2:Subnet": f"{ARN}subnet/subnet-0aaaaaaaaaaaaaaaa"},
        ),
        False,
    ),
    ("assign-without-the-vpc-key", Request("ec2:AssignPrivateIpAddresses", IFACE, REGION), False),
    (
        "ipv6-prefix-in-another-vpc",
        Request("ec2:AssignIpv6Addresses", IFACE, {**IN_VPC, "ec2:Vpc": other(VPC, "vpc-0", "vpc-f")}),
        False,
    ),
    (
        "ipv6-prefix-in-an-unlisted-subnet",
        Request(
            "ec2:AssignIpv6Addresses",
            IFACE,
            {**IN_VPC, "ec2:Subnet": f"{ARN}subnet/subnet-0aaaaaaaaaaaaaaaa"},
        ),
        False,
    ),
    (
        "unassign-in-another-vpc",
        Request("ec2:UnassignPrivateIpAddresses", IFACE, {**IN_VPC, "ec2:Vpc": other(VPC, "vpc-0", "vpc-f")}),
        False,
    ),
    ("attach-to-an-untagged-instance", Request("ec2:AttachNetworkInterface", INSTANCE, REGION), False),
    (
        "attach-to-another-clusters-instance",
        Request(
            "ec2:AttachNetworkInterface",
            INSTANCE,
            {**REGION, "ec2:ResourceTag/kubernetes.io/cluster/prod-us": "owned"},
        ),
        False,
    ),
    (
        "attach-to-an-instance-in-another-region",
        Request("ec2:AttachNetworkInterface", other(INSTANCE, "eu-west-1", "eu-central-1"), OUR_INSTANCE),
        False,
    ),
    ("attach-another-clusters-interface", Request("ec2:AttachNetworkInterface", IFACE, THEIRS), False),
    ("attach-an-untagged-interface", Request("ec2:AttachNetworkInterface", IFACE, IN_VPC), False),
    ("detach-from-an-untagged-instance", Request("ec2:DetachNetworkInterface", INSTANCE, REGION), False),
    ("detach-another-clusters-interface", Request("ec2:DetachNetworkInterface", IFACE, THEIRS), False),
    ("delete-another-clusters-interface", Request("ec2:DeleteNetworkInterface", IFACE, THEIRS), False),
    ("delete-the-primary-interface", Request("ec2:DeleteNetworkInterface", IFACE, IN_VPC), False),
    (
        "delete-our-tags-in-another-vpc",
        Request("ec2:DeleteNetworkInterface", IFACE, {**OURS, "ec2:Vpc": other(VPC, "vpc-0", "vpc-f")}),
        False,
    ),
    (
        "modify-another-clusters-interface",
        Request("ec2:ModifyNetworkInterfaceAttribute", IFACE, THEIRS),
        False,
    ),
    (
        "modify-a-security-group",
        Request("ec2:ModifyNetworkInterfaceAttribute", GROUP, {**REGION, "ec2:Vpc": VPC}),
        False,
    ),
    (
        "create-in-an-unlisted-subnet",
        Request(
            "ec2:CreateNetworkInterface", f"{ARN}subnet/subnet-0aaaaaaaaaaaaaaaa", {**REGION, "ec2:Vpc": VPC}
        ),
        False,
    ),
    (
        "create-with-an-unlisted-group",
        Request(
            "ec2:CreateNetworkInterface",
            f"{ARN}security-group/sg-0aaaaaaaaaaaaaaaa",
            {**REGION, "ec2:Vpc": VPC},
        ),
        False,
    ),
    (
        "create-without-the-cluster-tags",
        Request("ec2:CreateNetworkInterface", f"{ARN}network-interface/*", REGION),
        False,
    ),
    (
        "create-without-the-managed-by-tag",
        Request(
            "ec2:CreateNetworkInterface",
            f"{ARN}network-interface/*",
            {k: v for k, v in TAGGED_AT_CREATE.items() if not k.endswith("managed-by")},
        ),
        False,
    ),
    (
        "create-for-another-cluster",
        Request(
            "ec2:CreateNetworkInterface",
            f"{ARN}network-interface/*",
            {**TAGGED_AT_CREATE, "aws:RequestTag/eni-ipam/cluster": "prod-us"},
        ),
        False,
    ),
    (
        "create-in-another-region",
        Request("ec2:CreateNetworkInterface", other(SUBNET, "eu-west-1", "us-east-1"), {"ec2:Vpc": VPC}),
        False,
    ),
    (
        "tag-an-existing-interface",
        Request("ec2:CreateTags", IFACE, TAGGED_AT_CREATE),
        False,
    ),
    (
        "tag-while-creating-something-else",
        Request(
            "ec2:CreateTags", f"{ARN}network-interface/*", {**CREATE_TAGS, "ec2:CreateAction": "RunInstances"}
        ),
        False,
    ),
    (
        "tag-at-creation-for-another-cluster",
        Request(
            "ec2:CreateTags",
            f"{ARN}network-interface/*",
            {**CREATE_TAGS, "aws:RequestTag/eni-ipam/cluster": "x"},
        ),
        False,
    ),
    ("tag-an-instance", Request("ec2:CreateTags", INSTANCE, CREATE_TAGS), False),
    (
        "create-with-another-tools-tag-key",
        Request("ec2:CreateNetworkInterface", f"{ARN}network-interface/*", FOREIGN_TAG),
        False,
    ),
    (
        "tag-at-creation-with-another-tools-tag-key",
        Request(
            "ec2:CreateTags",
            f"{ARN}network-interface/*",
            {**FOREIGN_TAG, "ec2:CreateAction": "CreateNetworkInterface"},
        ),
        False,
    ),
    (
        "create-with-an-unlisted-key-of-ours",
        Request(
            "ec2:CreateNetworkInterface",
            f"{ARN}network-interface/*",
            {**TAGGED_AT_CREATE, "aws:TagKeys": [*OWN_KEYS, "eni-ipam/owner"]},
        ),
        False,
    ),
    (
        "turn-off-source-dest-check",
        Request(
            "ec2:ModifyNetworkInterfaceAttribute", IFACE, {**OURS, "ec2:Attribute/SourceDestCheck": "false"}
        ),
        False,
    ),
    (
        "give-an-interface-a-public-address",
        Request(
            "ec2:ModifyNetworkInterfaceAttribute",
            IFACE,
            {**OURS, "ec2:Attribute/AssociatePublicIpAddress": "true"},
        ),
        False,
    ),
    (
        "rewrite-an-interfaces-description",
        Request("ec2:ModifyNetworkInterfaceAttribute", IFACE, {**OURS, "ec2:Attribute/Description": "x"}),
        False,
    ),
    ("terminate-an-instance", Request("ec2:TerminateInstances", INSTANCE, OUR_INSTANCE), False),
]


@pytest.mark.parametrize(("request_", "expected"), [pytest.param(r, e, id=n) for n, r, e in REQUESTS])
def test_the_policy_judges_each_request(policy: dict[str, Any], request_: Request, expected: bool) -> None:
    assert allowed(policy, request_) is expected, matching_sids(policy, request_)


def test_every_action_and_resource_type_has_an_allowed_request() -> None:
    allowed_pairs = {(r.action, resource_type(r.resource)) for _, r, ok in REQUESTS if ok}
    assert {(a, t) for a, t, *_ in STATEMENTS} - allowed_pairs <= {
        (a, "*") for a, *_ in STATEMENTS if a.startswith("ec2:Describe")
    }


# -- the evaluator itself ----------------------------------------------------------------------------


def test_the_evaluator_lets_an_explicit_deny_win() -> None:
    deny = {"Sid": "No", "Effect": "Deny", "Action": "ec2:*", "Resource": "*"}
    policy = {**POLICY, "Statement": [*POLICY["Statement"], deny]}
    assert allowed(POLICY, REQUESTS[0][1]) and not allowed(policy, REQUESTS[0][1])


def test_the_evaluator_ors_values_ands_keys_and_knows_null() -> None:
    statement = {
        "Effect": "Allow",
        "Action": "ec2:Get*",
        "Resource": "arn:aws:ec2:*:*:thing/*",
        "Condition": {
            "StringEquals": {"a": ["1", "2"], "b": "3"},
            "StringLike": {"c": "x*"},
            "ArnLike": {"d": "arn:aws:ec2:*:*:vpc/*"},
            "Null": {"e": "true"},
        },
    }
    policy = {"Version": "2012-10-17", "Statement": [statement]}
    good = {"a": "2", "b": "3", "c": "xyz", "d": VPC}
    assert allowed(policy, Request("ec2:GetThing", f"{ARN}thing/t", good))
    assert allowed(policy, Request("EC2:getthing", f"{ARN}thing/t", good))  # actions: any case
    for broken in ({**good, "a": "4"}, {**good, "b": "2"}, {**good, "c": "yx"}, {**good, "e": "1"}):
        assert not allowed(policy, Request("ec2:GetThing", f"{ARN}thing/t", broken)), broken
    assert not allowed(policy, Request("ec2:GetThing", f"{ARN}thing/t", {k: good[k] for k in "abc"}))
    assert not allowed(policy, Request("ec2:PutThing", f"{ARN}thing/t", good))
    assert not allowed(policy, Request("ec2:GetThing", f"{ARN}other/t", good))


def test_the_evaluator_judges_multivalued_keys_with_set_qualifiers() -> None:
    statement = {
        "Effect": "Allow",
        "Action": "ec2:Get*",
        "Resource": "*",
        "Condition": {
            "ForAllValues:StringEquals": {"aws:TagKeys": ["a", "b"]},
            "ForAnyValue:StringLike": {"k": ["x*"]},
        },
    }
    policy = {"Version": "2012-10-17", "Statement": [statement]}

    def judged(context: dict[str, str | list[str]]) -> bool:
        return allowed(policy, Request("ec2:GetThing", "*", context))

    assert judged({"aws:TagKeys": ["a"], "k": ["y", "xz"]})
    assert judged({"aws:TagKeys": ["b", "a"], "k": ["x"]})
    assert judged({"k": ["x"]}), "ForAllValues holds for a missing key"
    assert judged({"aws:TagKeys": [], "k": ["x"]}), "ForAllValues holds for an empty set"
    assert not judged({"aws:TagKeys": ["a", "c"], "k": ["x"]})
    assert not judged({"aws:TagKeys": ["a"], "k": ["y"]})
    assert not judged({"aws:TagKeys": ["a"]}), "ForAnyValue fails for a missing key"
    with pytest.raises(NotImplementedError):
        judged({"aws:TagKeys": "a", "k": ["x"]})  # a qualifier on a single value
    single = {**statement, "Condition": {"StringEquals": {"aws:TagKeys": "a"}}}
    with pytest.raises(NotImplementedError):
        allowed({**policy, "Statement": [single]}, Request("ec2:GetThing", "*", {"aws:TagKeys": ["a"]}))


def test_the_evaluator_refuses_what_it_does_not_understand() -> None:
    statement = {
        "Effect": "Allow",
        "Action": "ec2:*",
        "Resource": "*",
        "Condition": {"IpAddress": {"a": "b"}},
    }
    with pytest.raises(NotImplementedError):
        allowed({"Version": "2012-10-17", "Statement": [statement]}, REQUESTS[0][1])
    with pytest.raises(NotImplementedError):
        allowed(
            {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "NotAction": "x", "Resource": "*"}]},
            REQUESTS[0][1],
        )
    for operator in ("ForAllValues:ArnEquals", "ForEveryValue:StringEquals", "ForAnyValue:Null"):
        qualified = {**statement, "Condition": {operator: {"a": "b"}}}
        with pytest.raises(NotImplementedError):
            allowed({"Version": "2012-10-17", "Statement": [qualified]}, REQUESTS[0][1])
