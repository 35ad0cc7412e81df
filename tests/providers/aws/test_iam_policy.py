"""deploy/aws/iam-policy.json allows every EC2 action the provider calls, and nothing it does not.

The workflow below drives every code path that calls EC2 (resync with each kind of scope, the
per-instance sync, limits, every mutation, the rollback, delete with detach, garbage collection)
and records, from botocore's ``provide-client-params`` event, each action actually sent and its
parameters. The file itself is the renderer's policy for the docs' example values
(providers/aws/iam_policy.py); tests/providers/aws/test_iam_conditions.py checks its conditions.
"""

from __future__ import annotations

import ast
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from eni_ipam.adapters.metrics import Metrics
from eni_ipam.core import errors
from eni_ipam.core.clock import LoopClock
from eni_ipam.core.gc import GarbageCollector
from eni_ipam.core.model import CreateInterface, interface_tags, ownership_tags
from providers.aws.iam_policy import EXAMPLE, MODIFY_ATTRIBUTE_KEYS, render_policy
from tests.providers.aws.conftest import Network
from tests.providers.aws.iam_eval import Request, allowed

ROOT = Path(__file__).resolve().parents[3]
POLICY = ROOT / "deploy" / "aws" / "iam-policy.json"


def allowed_actions() -> set[str]:
    policy = json.loads(POLICY.read_text())
    actions: set[str] = set()
    for statement in policy["Statement"]:
        assert statement["Effect"] == "Allow"
        listed = statement["Action"]
        actions.update([listed] if isinstance(listed, str) else listed)
    return actions


def test_the_file_is_the_policy_rendered_for_the_example_values() -> None:
    policy = render_policy(**EXAMPLE)
    assert json.loads(POLICY.read_text()) == policy
    assert POLICY.read_text() == json.dumps(policy, indent=2) + "\n", "regenerate it: docs/aws.md §2"


def test_policy_grants_no_wildcard_action() -> None:
    assert all(a.startswith("ec2:") and "*" not in a for a in allowed_actions())


def operations_named_in_the_provider() -> set[str]:
    """Every ``call("X")`` / ``pages("X")`` in providers/aws, as ``ec2:X``."""
    named: set[str] = set()
    for path in (ROOT / "providers" / "aws").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in {"call", "pages"}
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                named.add(node.args[0].value)
    return {f"ec2:{op}" for op in named}


def test_the_provider_source_never_names_allow_reassignment() -> None:
    """IAM cannot refuse AssignPrivateIpAddresses' AllowReassignment (docs/aws.md §2): no code path may
    send it. The workflow test below checks the requests actually sent."""
    assert not [p.name for p in (ROOT / "providers").rglob("*.py") if "AllowReassignment" in p.read_text()]


def test_every_operation_named_in_the_provider_source_is_in_the_policy() -> None:
    """Static safety net: any ``call("X")`` / ``pages("X")`` in providers/aws is allowed."""
    named = operations_named_in_the_provider()
    assert named, "no EC2 operation found in the provider's source"
    assert named <= allowed_actions()


@pytest.mark.timeout(60)
async def test_every_action_the_provider_calls_is_in_the_policy(network: Network) -> None:
    called: set[str] = set()
    assigns: list[dict[str, Any]] = []

    def record(params: dict[str, Any], model: Any, **_: Any) -> None:
        called.add(f"ec2:{model.name}")
        if model.name == "AssignPrivateIpAddresses":
            assigns.append(dict(params))

    tags = ownership_tags("c1")
    instance = network.run_instance(tags={"cluster": "c1"})
    network.ec2.create_network_interface(  # a leaked interface for garbage collection
        SubnetId=network.subnet_id,
        TagSpecifications=[
            {"ResourceType": "network-interface", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}
        ],
    )
    # from here on, only the provider calls
    network.ec2.meta.events.register("provide-client-params.ec2", record)
    scopes: tuple[dict[str, Any], ...] = (
        {},
        {"instance_tags_filter": {"cluster": "c1"}, "subnet_ids_filter": (network.subnet_id,)},
    )
    for scope in scopes:
        provider = network.provider(**scope)
        await provider.resync()
        provider.close()
    provider = network.provider()
    await provider.instance_limits(instance_type="m5.large")
    primary = (await provider.describe_instance(instance_id=instance)).primary()  # type: ignore[union-attr]
    assert primary is not None
    new = await provider.assign_addresses(interface_id=primary.id, count=2)
    await provider.unassign_addresses(interface_id=primary.id, addresses=new)
    iface = await provider.create_interface(
        instance_id=instance,
        request=CreateInterface(
            subnet_id=network.subnet_id, security_groups=network.security_group_ids, device_index=1, count=1
        ),
        tags=tags,
        token="iam-1",
    )
    with pytest.raises(errors.AttachmentLimitExceeded):  # exercises the rollback: detach + delete
        for index in range(2, 5):
            await provider.create_interface(
                instance_id=instance,
                request=CreateInterface(
                    subnet_id=network.subnet_id,
                    security_groups=network.security_group_ids,
                    device_index=index,
                    count=1,
                ),
                tags=tags,
                token=f"iam-{index}",
            )
    await provider.delete_interface(interface_id=iface.id)  # attached: detach first
    gc = GarbageCollector(provider, cluster_name="c1", clock=LoopClock(), metrics=Metrics())
    await gc.run_once()
    assert len((await gc.run_once()).deleted) == 1
    provider.close()
    missing = called - allowed_actions()
    assert not missing, f"deploy/aws/iam-policy.json lacks {sorted(missing)}"
    assert "ec2:DetachNetworkInterface" in called and "ec2:DescribeInstanceTypes" in called
    # No IAM condition key covers AssignPrivateIpAddresses' AllowReassignment (docs/aws.md §2): the
    # provider itself must never take an address from another interface.
    assert assigns and all(not p.get("AllowReassignment", False) for p in assigns), assigns


# -- the provider's own requests, judged by the policy's conditions ----------------------------------

ACCOUNT = "123456789012"  # moto's
EXTRA_TAGS = {"team": "payments"}
"""``settings.interface_tags`` of the judged controller: their keys go to ``interface_tag_keys``."""
IDENTIFIERS = {"NetworkInterfaceId", "DryRun"}


def attribute_keys(params: dict[str, Any]) -> dict[str, str]:
    """``ec2:Attribute/<name>`` of a ModifyNetworkInterfaceAttribute request as EC2's documentation
    describes the key: a parameter of a primitive type, or an object holding only ``Value``."""
    shape = ec2_model().operation_model("ModifyNetworkInterfaceAttribute").input_shape
    keys: dict[str, str] = {}
    for name, value in params.items():
        member = shape.members[name]
        if name in IDENTIFIERS:
            continue
        if member.type_name not in {"structure", "list", "map"}:
            keys[f"ec2:Attribute/{name}"] = str(value).lower() if isinstance(value, bool) else str(value)
        elif member.type_name == "structure" and list(member.members) == ["Value"]:
            keys[f"ec2:Attribute/{name}"] = str(value["Value"])
    return keys


def ec2_model() -> Any:
    import botocore.session

    return botocore.session.get_session().get_service_model("ec2")


def test_the_policy_lists_every_attribute_iam_can_see_on_a_modify() -> None:
    """A parameter botocore's model adds later (EnablePrimaryIpv6 was one) must join the policy's list,
    or the policy would let a stolen credential set it on the cluster's interfaces."""
    shape = ec2_model().operation_model("ModifyNetworkInterfaceAttribute").input_shape
    visible = {
        f"ec2:Attribute/{name}"
        for name, member in shape.members.items()
        if name not in IDENTIFIERS
        and (
            member.type_name not in {"structure", "list", "map"}
            or (member.type_name == "structure" and list(member.members) == ["Value"])
        )
    }
    assert visible == set(MODIFY_ATTRIBUTE_KEYS)


@pytest.mark.timeout(60)
async def test_the_providers_creates_and_modifies_pass_the_policys_conditions(network: Network) -> None:
    """Each CreateNetworkInterface and ModifyNetworkInterfaceAttribute the provider sends, with the
    request context EC2 would build from it (tag keys and values, attributes), is allowed by the policy
    rendered for this VPC; the same request with another tool's tag key, or another attribute, is not."""
    sent: list[tuple[str, dict[str, Any]]] = []

    def record(params: dict[str, Any], model: Any, **_: Any) -> None:
        if model.name in {"CreateNetworkInterface", "ModifyNetworkInterfaceAttribute"}:
            sent.append((model.name, dict(params)))

    instance = network.run_instance(tags={"cluster": "c1"})
    network.ec2.meta.events.register("provide-client-params.ec2", record)
    policy = render_policy(
        account_id=ACCOUNT,
        region=network.ec2.meta.region_name,
        vpc_id=network.vpc_id,
        cluster_name="c1",
        subnet_ids=[network.subnet_id],
        security_group_ids=network.security_group_ids,
        interface_tag_keys=list(EXTRA_TAGS),
    )
    tags = interface_tags(cluster_name="c1", node="node-1", instance_id=instance, extra=EXTRA_TAGS)
    provider = network.provider()
    await provider.create_interface(
        instance_id=instance,
        request=CreateInterface(
            subnet_id=network.subnet_id, security_groups=network.security_group_ids, device_index=1, count=2
        ),
        tags=tags,
        token="judged-1",
    )
    provider.close()
    assert [name for name, _ in sent] == ["CreateNetworkInterface", "ModifyNetworkInterfaceAttribute"]
    arn = f"arn:aws:ec2:{network.ec2.meta.region_name}:{ACCOUNT}:"
    region = {"aws:RequestedRegion": network.ec2.meta.region_name}
    (_, create), (_, modify) = sent
    (spec,) = create["TagSpecifications"]
    requested = {t["Key"]: t["Value"] for t in spec["Tags"]}
    at_create: dict[str, Any] = {
        **region,
        **{f"aws:RequestTag/{k}": v for k, v in requested.items()},
        "aws:TagKeys": list(requested),
    }
    in_vpc = {**region, "ec2:Vpc": f"{arn}vpc/{network.vpc_id}"}
    creates = [
        Request("ec2:CreateNetworkInterface", f"{arn}network-interface/*", at_create),
        Request(
            "ec2:CreateTags",
            f"{arn}network-interface/*",
            {**at_create, "ec2:CreateAction": "CreateNetworkInterface"},
        ),
        Request("ec2:CreateNetworkInterface", f"{arn}subnet/{create['SubnetId']}", in_vpc),
        *(
            Request("ec2:CreateNetworkInterface", f"{arn}security-group/{g}", in_vpc)
            for g in create["Groups"]
        ),
    ]
    owned = {**in_vpc, **{f"ec2:ResourceTag/{k}": v for k, v in requested.items()}}
    iface = f"{arn}network-interface/{modify['NetworkInterfaceId']}"
    modifies = [Request("ec2:ModifyNetworkInterfaceAttribute", iface, {**owned, **attribute_keys(modify)})]
    for request in creates + modifies:
        assert allowed(policy, request), request
    foreign = {**at_create, "aws:TagKeys": [*requested, "kubernetes.io/cluster/other"]}
    assert not allowed(policy, dataclasses.replace(creates[0], context=foreign))
    other = {**modify, "SourceDestCheck": {"Value": False}}
    judged = Request("ec2:ModifyNetworkInterfaceAttribute", iface, {**owned, **attribute_keys(other)})
    assert not allowed(policy, judged)
