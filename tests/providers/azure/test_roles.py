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
import re
from pathlib import Path

import pytest

from eni_ipam.adapters.metrics import Metrics
from providers.azure.operations import OPERATIONS, actions
from tests.providers.azure.conftest import GROUP, World

pytestmark = pytest.mark.looptime

ROOT = Path(__file__).resolve().parents[3]
DOCS = ROOT / "docs" / "azure.md"


ROLES = {
    "nodes": ROOT / "deploy" / "azure" / "eni-ipam-nodes-role.json",
    "network": ROOT / "deploy" / "azure" / "eni-ipam-network-role.json",
    "subnets": ROOT / "deploy" / "azure" / "eni-ipam-subnets-role.json",
}


def role(name: str) -> dict:
    document: dict = json.loads(ROLES[name].read_text())
    return document


def test_the_shipped_roles_grant_exactly_the_actions_of_the_operation_table_between_them() -> None:
    each = [set(role(name)["Actions"]) for name in ROLES]
    granted = set().union(*each)
    assert sum(map(len, each)) == len(granted), "two roles grant the same action"
    assert actions() <= granted, f"the roles lack {sorted(actions() - granted)}"
    assert granted <= actions(), f"the roles grant unused {sorted(granted - actions())}"
    assert all("*" not in a for a in granted)
    for name in ROLES:
        assert role(name)["NotActions"] == [] and role(name)["DataActions"] == []
        assert role(name)["IsCustom"] is True


JOIN = "Microsoft.Network/virtualNetworks/subnets/join/action"
VNET = "/subscriptions/<s>/resourceGroups/<vnet-group>/providers/Microsoft.Network/virtualNetworks/<vnet>"


def test_joining_a_subnet_is_the_only_action_of_a_role_of_its_own() -> None:
    """Granted with anything read on the virtual network, join would be assigned there too: every
    subnet of every tier could then be filled."""
    assert role("subnets")["Actions"] == [JOIN]
    assert not [name for name in ROLES if name != "subnets" and JOIN in role(name)["Actions"]]
    assert all(a.startswith("Microsoft.Network/virtualNetworks/") for a in role("network")["Actions"])
    assert not [a for a in role("network")["Actions"] if not a.endswith("/read")]


def test_every_role_is_assignable_within_one_resource_group_only() -> None:
    """Azure accepts management groups, subscriptions and resource groups as AssignableScopes, not a
    resource: the narrower scopes (a virtual network, a subnet) are the assignments' own."""
    scopes = {name: role(name)["AssignableScopes"] for name in ROLES}
    for name, listed in scopes.items():
        assert len(listed) == 1 and re.fullmatch(
            r"/subscriptions/<[^/]+>/resourceGroups/<[^/]+>", listed[0]
        ), (
            name,
            listed,
        )
    assert scopes["nodes"] == ["/subscriptions/<subscription-id>/resourceGroups/<node-resource-group>"]


def documented_assignments() -> list[tuple[str, str]]:
    """(role, scope) of every ``az role assignment create`` in docs/azure.md, with ``$SUBNET`` kept."""
    text = DOCS.read_text().replace("\\\n", " ")
    found = []
    for line in text.splitlines():
        if "az role assignment create" in line:
            name = re.search(r'--role "([^"]+)"', line)
            scope = re.search(r"--scope (\S+)", line)
            assert name and scope, line
            found.append((name.group(1), scope.group(1)))
    return found


def test_the_docs_assign_join_on_each_cluster_subnet_and_nowhere_broader() -> None:
    assignments = documented_assignments()
    assert {name for name, _ in assignments} == {role(n)["Name"] for n in ROLES}
    for name, scope in assignments:
        if name == "eni-ipam subnets":
            assert scope == f"{VNET}/subnets/$SUBNET", scope
        elif name == "eni-ipam network":
            assert scope == VNET, scope
        else:
            assert scope == "/subscriptions/<s>/resourceGroups/<node-resource-group>", scope
    text = DOCS.read_text()
    assert "for SUBNET in <node-subnet> <other-node-subnet>; do" in text


def test_the_docs_say_that_writing_nics_also_creates_them() -> None:
    """networkInterfaces/write authorises a PUT to a new name as much as to an existing NIC."""
    text = DOCS.read_text()
    cannot = text[text.index("**Cannot:**") : text.index("### Workload identity")]
    assert "create NICs" not in cannot and "create a NIC" not in cannot
    can = text[text.index("**Can**") : text.index("**Cannot:**")]
    assert "create NICs in the node resource group" in can


def test_the_docs_install_the_shipped_roles_and_do_not_advise_broad_built_in_ones() -> None:
    text = DOCS.read_text()
    for path in ROLES.values():
        assert f"az role definition create --role-definition {path.relative_to(ROOT)}" in text
    for name in ("eni-ipam nodes", "eni-ipam network", "eni-ipam subnets"):
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


async def test_a_nic_write_can_only_change_a_nic_that_exists(world: World) -> None:
    """The role's networkInterfaces/write would let a PUT create a NIC; the provider's only NIC PUT is
    conditional (If-Match its ETag, or ``*`` when the read had none), and ARM refuses a conditional PUT
    to a NIC that does not exist (412): the code cannot create one."""
    _, (nic,) = world.vm("node")
    provider = world.provider(Metrics())
    read = provider.updates.read_nic

    async def without_etag(ref):  # type: ignore[no-untyped-def]
        document = dict(await read(ref))
        document.pop("etag", None)
        return document

    provider.updates.read_nic = without_etag  # type: ignore[method-assign]
    await provider.assign_addresses(interface_id=nic, count=1)
    puts = [r for r in world.fake.requests if r.method == "PUT"]
    assert puts and all(r.if_match for r in puts), [(r.operation, r.if_match) for r in puts]
