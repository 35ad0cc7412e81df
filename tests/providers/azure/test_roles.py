"""The shipped custom roles (deploy/azure) grant every action the provider's requests need, and
nothing more, each on its narrowest scope; the operation table covers every operation the provider
sends.

Three nets: the operation names written in the provider's source (static), the operation labels of a
workflow that exercises every code path against the fake ARM (dynamic), and the role in the docs
against the table's actions.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from eni_ipam._infra.metrics import Metrics
from providers.azure.operations import OPERATIONS, actions
from tests.providers.azure.conftest import GROUP, World

pytestmark = pytest.mark.looptime

ROOT = Path(__file__).resolve().parents[3]
DOCS = ROOT / "docs" / "azure.md"


ROLES = {
    "nodes": ROOT / "deploy" / "azure" / "eni-ipam-nodes-role.json",
    "subnets": ROOT / "deploy" / "azure" / "eni-ipam-subnets-role.json",
}


def role(name: str) -> dict:
    document: dict = json.loads(ROLES[name].read_text())
    return document


def test_the_shipped_roles_grant_exactly_the_actions_of_the_operation_table_between_them() -> None:
    nodes, subnets = set(role("nodes")["Actions"]), set(role("subnets")["Actions"])
    granted = nodes | subnets
    assert not nodes & subnets
    assert actions() <= granted, f"the roles lack {sorted(actions() - granted)}"
    assert granted <= actions(), f"the roles grant unused {sorted(granted - actions())}"
    assert all("*" not in a for a in granted)
    for name in ROLES:
        assert role(name)["NotActions"] == [] and role(name)["DataActions"] == []
        assert role(name)["IsCustom"] is True


def test_the_subnets_role_holds_only_virtual_network_actions_and_is_assigned_on_the_network() -> None:
    subnets = role("subnets")
    assert all(a.startswith("Microsoft.Network/virtualNetworks/") for a in subnets["Actions"])
    assert "Microsoft.Network/virtualNetworks/subnets/join/action" in subnets["Actions"]
    (scope,) = subnets["AssignableScopes"]
    assert scope.endswith("/providers/Microsoft.Network/virtualNetworks/<vnet>")
    (scope,) = role("nodes")["AssignableScopes"]
    assert scope.endswith("/resourceGroups/<node-resource-group>")


def test_the_docs_install_the_shipped_roles_and_do_not_advise_broad_built_in_ones() -> None:
    text = DOCS.read_text()
    for path in ROLES.values():
        assert f"az role definition create --role-definition {path.relative_to(ROOT)}" in text
    for name in ("eni-ipam nodes", "eni-ipam subnets"):
        assert name in {role(n)["Name"] for n in ROLES}
        assert f'--role "{name}"' in text
    assert '--role "Network Contributor"' not in text


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
