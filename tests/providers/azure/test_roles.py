"""docs/azure.md's custom role grants every action the provider's requests need, and nothing more; the
operation table covers every operation the provider sends.

Three nets: the operation names written in the provider's source (static), the operation labels of a
workflow that exercises every code path against the fake ARM (dynamic), and the role in the docs
against the table's actions.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from eni_ipam.core.metrics import Metrics
from providers.azure.operations import OPERATIONS, actions
from tests.providers.azure.conftest import GROUP, World

pytestmark = pytest.mark.looptime

ROOT = Path(__file__).resolve().parents[3]
DOCS = ROOT / "docs" / "azure.md"


def documented_role() -> dict:
    for block in re.findall(r"```json\n(.*?)```", DOCS.read_text(), flags=re.S):
        document = json.loads(block)
        if isinstance(document, dict) and "Actions" in document:
            return document
    raise AssertionError("docs/azure.md has no custom role (a json block with Actions)")


def test_the_documented_custom_role_grants_exactly_the_actions_of_the_operation_table() -> None:
    role = documented_role()
    granted = set(role["Actions"])
    assert actions() <= granted, f"docs/azure.md's role lacks {sorted(actions() - granted)}"
    assert granted <= actions(), f"docs/azure.md's role grants unused {sorted(granted - actions())}"
    assert all("*" not in a for a in granted)
    assert role["NotActions"] == []


def test_every_operation_named_in_the_provider_source_is_in_the_table() -> None:
    named: set[str] = set()
    for path in (ROOT / "providers" / "azure").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in {"call", "collect", "get", "lro"}
                and isinstance(node.func.value, ast.Attribute)
                and node.func.value.attr == "client"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                named.add(node.args[0].value)
    assert len(named) >= 10, f"found too few operations in the source: {sorted(named)}"
    assert named <= set(OPERATIONS), (
        f"not in providers/azure/operations.py: {sorted(named - set(OPERATIONS))}"
    )


async def test_a_workflow_through_every_code_path_sends_exactly_the_operations_of_the_table(
    world: World,
) -> None:
    metrics = Metrics()
    vm, (nic,) = world.vm("node")
    ss_vm, ss_nic = world.scale_set_vm("pool")
    leaked = world.fake.add_nic(GROUP, "leaked", world.subnet_id, tags={"eni-ipam/cluster": "c1"})
    provider = world.provider(metrics)
    await provider.resync()
    await provider.describe_instance(instance_id=vm)
    await provider.describe_instance(instance_id=ss_vm)
    for interface in (nic, ss_nic):
        new = await provider.assign_addresses(interface_id=interface, count=2)
        await provider.unassign_addresses(interface_id=interface, addresses=new)
    (found,) = await provider.list_detached_interfaces(tags={"eni-ipam/cluster": "c1"})
    await provider.delete_interface(interface_id=found.id)
    assert not world.fake.nic_exists(leaked)
    sent = {
        sample.labels["operation"]
        for family in metrics.api_requests.collect()
        for sample in family.samples
        if sample.name.endswith("_total")
    }
    assert sent == set(OPERATIONS), (
        f"sent but not in the table: {sorted(sent - set(OPERATIONS))}; "
        f"in the table but never sent: {sorted(set(OPERATIONS) - sent)}"
    )
