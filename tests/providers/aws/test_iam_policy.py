"""deploy/aws/iam-policy.json allows every EC2 action the provider calls, and nothing it does not.

The workflow below drives every code path that calls EC2 (resync with each kind of scope, the
per-instance sync, limits, every mutation, the rollback, delete with detach, garbage collection)
and records, from botocore's ``provide-client-params`` event, each action actually sent and its
parameters. The file itself is the renderer's policy for the docs' example values
(providers/aws/iam_policy.py); tests/providers/aws/test_iam_conditions.py checks its conditions.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest

from eni_ipam._infra.metrics import Metrics
from eni_ipam.core import errors
from eni_ipam.core.clock import LoopClock
from eni_ipam.core.gc import GarbageCollector
from eni_ipam.core.model import ownership_tags
from providers.aws.iam_policy import EXAMPLE, render_policy
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
    # No IAM condition key covers AssignPrivateIpAddresses' AllowReassignment (docs/aws.md §2): the
    # provider itself must never take an address from another interface.
    assert assigns and all(not p.get("AllowReassignment", False) for p in assigns), assigns
