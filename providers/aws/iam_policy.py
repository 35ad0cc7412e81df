"""The IAM policy of the AWS provider, scoped to one cluster (docs/aws.md §2).

:func:`render_policy` writes it for one account, region, VPC and cluster: every ARN names the region
and the account, addresses are assigned only on interfaces of the cluster's VPC and subnets, interfaces
are created only in the listed subnets with the listed security groups and the cluster's ownership
tags (and no tag key but the ones eni-ipam writes: another tool's ownership tag cannot be put on a new
interface), and attached, detached, modified or deleted only when they carry this cluster's tags
(attached only to instances carrying the cluster's instance tag; modified only without any attribute
IAM can see, which leaves delete-on-termination). ``eni-ipam aws-iam-policy`` prints it, the chart's
``awsIamPolicy`` block renders the same document, and ``deploy/aws/iam-policy.json`` is its rendering
for the example values of the docs.

This module imports no SDK: rendering a policy needs no credentials and no network.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, TypedDict

from eni_ipam.core.model import MANAGED_BY, TAG_CLUSTER, TAG_INSTANCE, TAG_MANAGED_BY, TAG_NODE, TAG_POOL

DISCOVER_ACTIONS = (
    "ec2:DescribeVpcs",
    "ec2:DescribeSubnets",
    "ec2:DescribeSecurityGroups",
    "ec2:DescribeInstances",
    "ec2:DescribeInstanceTypes",
    "ec2:DescribeNetworkInterfaces",
)
"""EC2's Describe actions have no resource-level permissions: they can only be granted on ``*``."""

PATTERNS = {
    "account_id": (re.compile(r"\d{12}"), "12 digits, such as 111122223333"),
    "partition": (re.compile(r"aws(-[a-z]+)*"), "a partition such as aws, aws-cn or aws-us-gov"),
    "region": (re.compile(r"[a-z]{2}(-[a-z]+)+-\d{1,2}"), "a region such as eu-west-1"),
    "vpc_id": (re.compile(r"vpc-[0-9a-f]{8,17}"), "a VPC id such as vpc-0123456789abcdef0"),
    "subnet_ids": (re.compile(r"subnet-[0-9a-f]{8,17}"), "a subnet id such as subnet-0123456789abcdef0"),
    "security_group_ids": (
        re.compile(r"sg-[0-9a-f]{8,17}"),
        "a security group id such as sg-0123456789abcdef0",
    ),
}
OWN_TAG_KEYS = (TAG_CLUSTER, TAG_MANAGED_BY, TAG_NODE, TAG_INSTANCE, TAG_POOL)
"""The tag keys eni-ipam writes on the interfaces it creates (``interface_tags`` in the core, and
``eni-ipam/pool`` on ready interfaces, ``ready_interface_tags``); with the keys of
``settings.interface_tags``, the only keys a create may carry (``aws:TagKeys``)."""

MODIFY_ATTRIBUTE_KEYS = (
    "ec2:Attribute/AssociatePublicIpAddress",
    "ec2:Attribute/Description",
    "ec2:Attribute/EnablePrimaryIpv6",
    "ec2:Attribute/SourceDestCheck",
)
"""ModifyNetworkInterfaceAttribute's parameters that IAM exposes as ``ec2:Attribute/<name>`` (EC2's
condition keys cover a parameter of a primitive type, or an object holding only ``Value``). The
provider sets only ``Attachment.DeleteOnTermination``, which no key exposes: the policy allows the call
only while every one of these is absent (``Null``), so a stolen credential cannot turn off the
source/destination check, give an interface a public address or rewrite its description. ``Groups``
is refused otherwise: it makes the security groups resources of the request, and no statement grants
the action on a security group. A test compares this list with botocore's model of the operation."""

TAG_KEY_LIMIT = 128
"""EC2's longest tag key."""

"""Each input's shape (matched whole) and how to describe it in an error. The chart's template
(deploy/helm/eni-ipam/templates/aws-iam-policy.yaml) checks the same patterns."""


class PolicyInputError(ValueError):
    """An input of :func:`render_policy` is missing or malformed; ``field`` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def default_instance_tag(cluster_name: str) -> tuple[str, str]:
    """The tag EKS (and the Kubernetes AWS cloud provider) put on a cluster's instances."""
    return (f"kubernetes.io/cluster/{cluster_name}", "owned")


def parse_instance_tag(text: str) -> tuple[str, str]:
    """``KEY=VALUE`` (split at the first ``=``) as a tag; the key must not be empty."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip() or key != key.strip():
        raise PolicyInputError("instance_tag", f"{text!r} is not KEY=VALUE with a non-empty key")
    return key, value


def _check(field: str, value: str) -> str:
    pattern, shape = PATTERNS[field]
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise PolicyInputError(field, f"{value!r} is not {shape}")
    return value


def _check_list(field: str, values: Sequence[str]) -> list[str]:
    if isinstance(values, str) or not values:
        raise PolicyInputError(field, "at least one is required")
    checked = [_check(field, v) for v in values]
    if len(set(checked)) != len(checked):
        raise PolicyInputError(field, "lists the same id twice")
    return checked


def _check_tag_keys(keys: Sequence[str]) -> list[str]:
    if isinstance(keys, str):
        raise PolicyInputError("interface_tag_keys", "a list of tag keys, not one string")
    for key in keys:
        if not isinstance(key, str) or not key or len(key) > TAG_KEY_LIMIT or key.lower().startswith("aws:"):
            raise PolicyInputError(
                "interface_tag_keys",
                f"{key!r} is not a tag key (1 to {TAG_KEY_LIMIT} characters, not starting with aws:)",
            )
    if len(set(keys)) != len(keys):
        raise PolicyInputError("interface_tag_keys", "lists the same key twice")
    return sorted({*OWN_TAG_KEYS, *keys})


def render_policy(
    *,
    account_id: str,
    region: str,
    vpc_id: str,
    cluster_name: str,
    subnet_ids: Sequence[str],
    security_group_ids: Sequence[str],
    partition: str = "aws",
    instance_tag: tuple[str, str] | None = None,
    interface_tag_keys: Sequence[str] = (),
) -> dict[str, Any]:
    """The policy document for one cluster. ``subnet_ids`` are every subnet eni-ipam fills or creates
    interfaces in (the nodes' own subnets too: addresses are assigned only on interfaces in them);
    ``instance_tag`` is the tag the cluster's instances carry (default
    ``kubernetes.io/cluster/<cluster_name>=owned``); ``interface_tag_keys`` the keys of the controller's
    ``settings.interface_tags``, allowed on new interfaces besides eni-ipam's own. Raises
    :class:`PolicyInputError` naming the input."""
    _check("account_id", account_id)
    _check("partition", partition)
    _check("region", region)
    _check("vpc_id", vpc_id)
    subnets = _check_list("subnet_ids", subnet_ids)
    groups = _check_list("security_group_ids", security_group_ids)
    tag_keys = _check_tag_keys(interface_tag_keys)
    if not isinstance(cluster_name, str) or not cluster_name:
        raise PolicyInputError("cluster_name", "the cluster name is required")
    tag_key, tag_value = instance_tag if instance_tag is not None else default_instance_tag(cluster_name)
    if not tag_key:
        raise PolicyInputError("instance_tag", "the instance tag's key is required")

    arn = f"arn:{partition}:ec2:{region}:{account_id}:"
    interfaces = f"{arn}network-interface/*"
    vpc = f"{arn}vpc/{vpc_id}"
    subnet_arns = [f"{arn}subnet/{s}" for s in subnets]
    group_arns = [f"{arn}security-group/{g}" for g in groups]
    request_tags = {
        f"aws:RequestTag/{TAG_CLUSTER}": cluster_name,
        f"aws:RequestTag/{TAG_MANAGED_BY}": MANAGED_BY,
    }
    # Every key of the request among these (the ownership tags above make sure there are keys).
    only_our_keys = {"ForAllValues:StringEquals": {"aws:TagKeys": tag_keys}}
    ours = {
        "StringEquals": {
            f"ec2:ResourceTag/{TAG_CLUSTER}": cluster_name,
            f"ec2:ResourceTag/{TAG_MANAGED_BY}": MANAGED_BY,
        },
        "ArnEquals": {"ec2:Vpc": vpc},
    }
    statements: list[dict[str, Any]] = [
        {
            "Sid": "Discover",
            "Effect": "Allow",
            "Action": list(DISCOVER_ACTIONS),
            "Resource": "*",
            "Condition": {"StringEquals": {"aws:RequestedRegion": region}},
        },
        {
            "Sid": "AddressesOnClusterSubnetInterfaces",
            "Effect": "Allow",
            "Action": ["ec2:AssignPrivateIpAddresses", "ec2:UnassignPrivateIpAddresses"],
            "Resource": interfaces,
            "Condition": {"ArnEquals": {"ec2:Vpc": vpc, "ec2:Subnet": subnet_arns}},
        },
        {
            "Sid": "Ipv6PrefixOnClusterSubnetInterfaces",
            "Effect": "Allow",
            "Action": ["ec2:AssignIpv6Addresses"],
            "Resource": interfaces,
            "Condition": {"ArnEquals": {"ec2:Vpc": vpc, "ec2:Subnet": subnet_arns}},
        },
        {
            "Sid": "CreateOnlyClusterTaggedInterfaces",
            "Effect": "Allow",
            "Action": ["ec2:CreateNetworkInterface"],
            "Resource": interfaces,
            "Condition": {"StringEquals": dict(request_tags), **only_our_keys},
        },
        {
            "Sid": "CreateInClusterSubnetsWithClusterGroups",
            "Effect": "Allow",
            "Action": ["ec2:CreateNetworkInterface"],
            "Resource": subnet_arns + group_arns,
            "Condition": {"ArnEquals": {"ec2:Vpc": vpc}},
        },
        {
            "Sid": "TagOnlyWhileCreating",
            "Effect": "Allow",
            "Action": ["ec2:CreateTags"],
            "Resource": interfaces,
            "Condition": {
                "StringEquals": {"ec2:CreateAction": "CreateNetworkInterface", **request_tags},
                **only_our_keys,
            },
        },
        {
            "Sid": "AttachAndDetachOnClusterInstances",
            "Effect": "Allow",
            "Action": ["ec2:AttachNetworkInterface", "ec2:DetachNetworkInterface"],
            "Resource": f"{arn}instance/*",
            "Condition": {"StringEquals": {f"ec2:ResourceTag/{tag_key}": tag_value}},
        },
        {
            "Sid": "ChangeOnlyClusterInterfaces",
            "Effect": "Allow",
            "Action": [
                "ec2:AttachNetworkInterface",
                "ec2:DetachNetworkInterface",
                "ec2:DeleteNetworkInterface",
            ],
            "Resource": interfaces,
            "Condition": ours,
        },
        {
            "Sid": "DeleteOnTerminationOfClusterInterfacesOnly",
            "Effect": "Allow",
            "Action": ["ec2:ModifyNetworkInterfaceAttribute"],
            "Resource": interfaces,
            "Condition": {**ours, "Null": dict.fromkeys(MODIFY_ATTRIBUTE_KEYS, "true")},
        },
    ]
    return {"Version": "2012-10-17", "Statement": statements}


class PolicyInputs(TypedDict):
    """The inputs of :func:`render_policy` without defaults."""

    account_id: str
    region: str
    vpc_id: str
    cluster_name: str
    subnet_ids: Sequence[str]
    security_group_ids: Sequence[str]


EXAMPLE: PolicyInputs = {
    "account_id": "111122223333",
    "region": "eu-west-1",
    "vpc_id": "vpc-0123456789abcdef0",
    "cluster_name": "prod-eu",
    "subnet_ids": ("subnet-0123456789abcdef0", "subnet-0fedcba9876543210"),
    "security_group_ids": ("sg-0123456789abcdef0",),
}
"""The example values of the docs: deploy/aws/iam-policy.json is the policy rendered for them."""
