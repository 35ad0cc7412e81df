"""deploy/aws/iam-policy.json allows every EC2 action the provider calls, and nothing it does not.

The workflow below drives every code path that calls EC2 (resync with each kind of scope, the
per-instance sync, limits, every mutation, the rollback, delete with detach, garbage collection)
and records, from botocore's ``before-call`` event, each action actually sent.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest

from eni_ipam.core import errors
from eni_ipam.core.clock import LoopClock
from eni_ipam.core.gc import GarbageCollector
from eni_ipam.core.metrics import Metrics
from eni_ipam.core.model import ownership_tags
from tests.providers.aws.conftest import Network

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


def test_policy_grants_no_wildcard_action() -> None:
    assert all(a.startswith("ec2:") and "*" not in a for a in allowed_actions())


def test_every_operation_named_in_the_provider_source_is_in_the_policy() -> None:
    """Static safety net: any ``call("X")`` / ``pages("X")`` in providers/aws is allowed."""
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
    assert named, "no EC2 operation found in the provider's source"
    assert {f"ec2:{op}" for op in named} <= allowed_actions()


@pytest.mark.timeout(60)
async def test_every_action_the_provider_calls_is_in_the_policy(network: Network) -> None:
    called: set[str] = set()

    def record(model: Any, **_: Any) -> None:
        called.add(f"ec2:{model.name}")

    tags = ownership_tags("c1")
    instance = network.run_instance(tags={"cluster": "c1"})
    network.ec2.create_network_interface(  # a leaked interface for garbage collection
        SubnetId=network.subnet_id,
        TagSpecifications=[
            {"ResourceType": "network-interface", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}
        ],
    )
    network.ec2.meta.events.register("before-call.ec2", record)  # from here on, only the provider calls
    for scope in ({}, {"instance_tags_filter": {"cluster": "c1"}, "subnet_ids_filter": (network.subnet_id,)}):
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
        subnet_id=network.subnet_id,
        security_groups=network.security_group_ids,
        device_index=1,
        count=1,
        tags=tags,
        token="iam-1",
    )
    with pytest.raises(errors.AttachmentLimitExceeded):  # exercises the rollback: detach + delete
        for index in range(2, 5):
            await provider.create_interface(
                instance_id=instance,
                subnet_id=network.subnet_id,
                security_groups=network.security_group_ids,
                device_index=index,
                count=1,
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
