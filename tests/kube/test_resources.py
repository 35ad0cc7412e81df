"""ENIPool ↔ model conversions: spec parsing, Node-derived pools, status writes (JSON patches)."""

from __future__ import annotations

import dataclasses
import datetime
import json

import pytest

from eni_ipam.core import devices
from eni_ipam.core.model import Interface, NodeStats, NodeStatus, PoolEntry, ReleaseState
from eni_ipam.core.spec import POOL_ONLY_FIELDS, SPEC_FIELDS, NodeSpec
from eni_ipam.errors import ConfigError
from eni_ipam.kube.projection import CONTROLLER_FIELDS, project_pool, status_digest
from eni_ipam.kube.resources import (
    DEFAULTS_ANNOTATION,
    FINALIZER,
    SPEC_KEYS,
    PoolInterface,
    defaults_patch,
    instance_id_from_provider_id,
    node_fields_patch,
    pool_for_node,
    pool_interfaces,
    release_marks,
    resource_from_pool,
    spec_from_pool,
    status_ops,
)
from eni_ipam_testkit.fake_kube.patch import json_patch

NOW = datetime.datetime(2026, 11, 21, 8, 0, tzinfo=datetime.UTC)
LATER = NOW + datetime.timedelta(minutes=1)


def node(name: str = "n1", provider_id: str = "aws:///us-east-1a/i-0abc", **labels: str) -> dict:
    return {
        "metadata": {"name": name, "uid": "uid-1", "labels": labels},
        "spec": {"providerID": provider_id} if provider_id else {},
    }


@pytest.mark.parametrize(
    ("provider_id", "instance"),
    [
        ("aws:///us-east-1a/i-0abc", "i-0abc"),
        ("aws:///i-0abc", "i-0abc"),
        (
            "azure:///subscriptions/s/resourceGroups/g/providers/Microsoft.Compute/virtualMachines/vm1",
            "/subscriptions/s/resourcegroups/g/providers/microsoft.compute/virtualmachines/vm1",
        ),
        (
            "azure:///subscriptions/s/resourceGroups/MC_g/providers/Microsoft.Compute/virtualMachineScaleSets/ss/virtualMachines/3",
            "/subscriptions/s/resourcegroups/mc_g/providers/microsoft.compute/virtualmachinescalesets/ss/virtualmachines/3",
        ),
        ("kind://docker/cluster/node", "docker/cluster/node"),
        ("", ""),
        ("not a provider id", ""),
    ],
)
def test_instance_id_comes_from_the_provider_id(provider_id: str, instance: str) -> None:
    assert instance_id_from_provider_id(provider_id) == instance


def test_every_node_spec_field_and_the_instance_have_a_pool_key() -> None:
    assert set(SPEC_KEYS) == {*SPEC_FIELDS, *POOL_ONLY_FIELDS}
    assert SPEC_KEYS["instance_id"] == "instanceID" and SPEC_KEYS["min_allocate"] == "minAllocate"


def test_pool_for_node_carries_defaults_owner_and_finalizer() -> None:
    body = pool_for_node(
        node(**{"topology.kubernetes.io/zone": "us-east-1a", "node.kubernetes.io/instance-type": "m5.large"}),
        NodeSpec(pre_allocate=4, subnet_ids=("s-1",), subnet_tags={"k": "v"}),
    )
    assert body is not None
    assert body["spec"] == {
        "instanceID": "i-0abc",
        "instanceType": "m5.large",
        "zone": "us-east-1a",
        "preAllocate": 4,
        "subnetIDs": ["s-1"],
        "subnetTags": {"k": "v"},
    }
    assert body["metadata"]["finalizers"] == [FINALIZER]
    assert body["metadata"]["ownerReferences"][0] == {
        "apiVersion": "v1",
        "kind": "Node",
        "name": "n1",
        "uid": "uid-1",
    }
    resource = resource_from_pool(body)
    assert (resource.name, resource.instance_id) == ("n1", "i-0abc")
    assert resource.spec == NodeSpec(pre_allocate=4, subnet_ids=("s-1",), subnet_tags={"k": "v"})


def test_node_without_provider_id_gets_no_pool_yet() -> None:
    assert pool_for_node(node(provider_id=""), None) is None


def test_node_fields_patch_touches_only_node_derived_fields() -> None:
    pool = {"metadata": {"name": "n1"}, "spec": {"instanceID": "i-old", "preAllocate": 20}}
    assert node_fields_patch(pool, node()) == {"spec": {"instanceID": "i-0abc"}}
    pool["spec"]["instanceID"] = "i-0abc"
    assert node_fields_patch(pool, node()) is None


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({}, "enipools/n1.spec.instanceID"),
        ({"instanceID": "i-1", "minAllocate": -1}, "enipools/n1.spec.minAllocate"),
        ({"instanceID": "i-1", "maxAllocate": "3"}, "enipools/n1.spec.maxAllocate"),
        ({"instanceID": "i-1", "subnetIDs": "s-1"}, "enipools/n1.spec.subnetIDs"),
        ({"instanceID": "i-1", "subnetTags": {"k": 1}}, "enipools/n1.spec.subnetTags.k"),
        ({"instanceID": "i-1", "disablePrefixDelegation": "yes"}, "enipools/n1.spec.disablePrefixDelegation"),
        ({"instanceID": ""}, "enipools/n1.spec.instanceID"),
    ],
)
def test_bad_pool_specs_name_the_field(spec: dict, field: str) -> None:
    with pytest.raises(ConfigError) as info:
        spec_from_pool({"metadata": {"name": "n1"}, "spec": spec})
    assert info.value.field == field


def test_negative_pre_allocate_is_kept_as_given() -> None:
    assert (
        spec_from_pool(
            {"metadata": {"name": "n1"}, "spec": {"instanceID": "i", "preAllocate": -3}}
        ).pre_allocate
        == -3
    )


def test_resource_reads_what_the_agent_reports() -> None:
    obj = {
        "metadata": {"name": "n1"},
        "spec": {"instanceID": "i-1"},
        "status": {
            "used": ["10.0.0.5", "10.0.0.6"],
            "releaseAnswers": {"10.0.0.9": "ready-for-release", "10.0.0.8": "released"},
        },
    }
    resource = resource_from_pool(obj, pending_pods=3)
    assert resource.used == 2 and resource.in_use == {"10.0.0.5", "10.0.0.6"}
    assert resource.pending_pods == 3
    assert resource.release_answers == {"10.0.0.9": ReleaseState.READY}  # only the agent's answers count


def _status(addresses: list[str], *, needed: int = 0, release: dict | None = None) -> NodeStatus:
    return NodeStatus(
        pool=tuple(PoolEntry(address=a, interface_id="eni-1", subnet_id="s-1") for a in addresses),
        stats=NodeStats(available=len(addresses), needed=needed),
        release=release or {},
        interfaces=(
            Interface(
                id="eni-1", device_index=0, subnet_id="s-1", primary_ip="10.0.0.4", addresses=tuple(addresses)
            ),
        ),
    )


def _apply(obj: dict, ops: list[dict] | None) -> dict:
    """What the API server does with the JSON patch (the fake's RFC 6902 implementation)."""
    assert ops is not None
    return json_patch(obj, ops)


def _write(status: NodeStatus, obj: dict, *, now: datetime.datetime) -> list[dict] | None:
    return status_ops(status, project_pool(obj), now=now)


def test_status_ops_replace_the_controllers_fields_whole_and_never_the_agents() -> None:
    obj = {
        "metadata": {"name": "n1", "resourceVersion": "7", "generation": 2},
        "status": {"used": ["x"], "releaseAnswers": {"10.0.0.6": "ready-for-release"}},
    }
    first = _write(_status(["10.0.0.5", "10.0.0.6"], needed=3), obj, now=NOW)
    assert first is not None
    paths = [op["path"] for op in first]
    assert paths == [f"/status/{key}" for key in CONTROLLER_FIELDS]  # each field whole, by "add"
    assert {op["op"] for op in first} == {"add"}
    obj = _apply(obj, first)
    assert obj["status"]["used"] == ["x"]  # the agent's fields are never written
    assert obj["status"]["releaseAnswers"] == {"10.0.0.6": "ready-for-release"}
    assert obj["status"]["observedGeneration"] == 2
    assert _write(_status(["10.0.0.5", "10.0.0.6"], needed=3), obj, now=LATER) is None
    second = _write(_status(["10.0.0.5"]), obj, now=LATER)
    assert second is not None
    obj = _apply(obj, second)
    assert set(obj["status"]["pool"]) == {"10.0.0.5"}  # a vanished address goes with the field
    assert obj["status"]["used"] == ["x"]


def test_a_pool_without_status_gets_it_whole_conditional_on_its_version() -> None:
    obj = {"metadata": {"name": "n1", "resourceVersion": "7", "generation": 1}}
    ops = _write(_status(["10.0.0.5"]), obj, now=NOW)
    assert ops is not None
    assert ops[0] == {"op": "add", "path": "/metadata/resourceVersion", "value": "7"}
    assert ops[1]["path"] == "/status" and set(ops[1]["value"]) == set(CONTROLLER_FIELDS)
    obj = _apply(obj, ops)
    assert _write(_status(["10.0.0.5"]), obj, now=LATER) is None


def test_the_digest_of_what_is_written_equals_the_digest_of_it_read_back() -> None:
    status = NodeStatus(
        pool=(PoolEntry(address="10.0.0.16", interface_id="eni-1", subnet_id="s-1", prefix="10.0.0.16/28"),),
        release={"10.0.0.16": ReleaseState.MARKED},
        subnets={"s-1": "10.0.0.0/22"},
        interfaces=(
            Interface(
                id="eni-1",
                device_index=0,
                subnet_id="s-1",
                primary_ip="10.0.0.4",
                prefixes=("10.0.0.16/28",),
                ipv6_prefixes=("2600:1f18::/80",),
            ),
        ),
        stats=NodeStats(available=16, needed=2, at_capacity=True),
        message="no room",
    )
    obj = {"metadata": {"name": "n1", "resourceVersion": "1", "generation": 3}, "status": {}}
    ops = _write(status, obj, now=NOW)
    written = json.loads(json.dumps(_apply(obj, ops)))  # as the API server sends it back
    assert project_pool(written).digest == status_digest(written["status"])
    assert _write(status, written, now=LATER) is None
    changed = {**written, "status": {**written["status"], "message": "edited by hand"}}
    assert _write(status, changed, now=LATER) is not None  # any controller field differing is a change
    agent = {**written, "status": {**written["status"], "used": ["10.0.0.17"]}}
    assert _write(status, agent, now=LATER) is None  # the agent's fields are not the controller's


def test_condition_keeps_its_transition_time_until_its_status_changes() -> None:
    obj = {"metadata": {"name": "n1", "resourceVersion": "1", "generation": 1}}
    obj = _apply(obj, _write(_status([], needed=8), obj, now=NOW))
    ready = next(c for c in obj["status"]["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "Deficit")
    obj = _apply(obj, _write(_status(["10.0.0.5"], needed=7), obj, now=LATER))
    ready = next(c for c in obj["status"]["conditions"] if c["type"] == "Ready")
    assert ready["lastTransitionTime"] == "2026-11-21T08:00:00Z"
    obj = _apply(obj, _write(_status(["10.0.0.5"] * 1), obj, now=LATER))
    ready = next(c for c in obj["status"]["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["lastTransitionTime"]) == ("True", "2026-11-21T08:01:00Z")


def test_release_marks_are_written_with_their_handshake_states() -> None:
    obj = {"metadata": {"name": "n1", "resourceVersion": "1"}}
    ops = _write(_status(["10.0.0.5"], release={"10.0.0.5": ReleaseState.MARKED}), obj, now=NOW)
    obj = _apply(obj, ops)
    assert obj["status"]["release"] == {"10.0.0.5": "marked-for-release"}
    assert release_marks(project_pool(obj)) == {"10.0.0.5": ReleaseState.MARKED}


def test_an_address_leaving_its_prefix_loses_the_prefix_field() -> None:
    obj = {"metadata": {"name": "n1", "resourceVersion": "1"}}
    in_prefix = NodeStatus(
        pool=(PoolEntry(address="10.0.0.16", interface_id="eni-1", subnet_id="s-1", prefix="10.0.0.16/28"),)
    )
    obj = _apply(obj, _write(in_prefix, obj, now=NOW))
    plain = NodeStatus(pool=(PoolEntry(address="10.0.0.16", interface_id="eni-1", subnet_id="s-1"),))
    obj = _apply(obj, _write(plain, obj, now=NOW))
    assert obj["status"]["pool"]["10.0.0.16"] == {"interface": "eni-1", "subnet": "s-1"}
    assert _write(plain, obj, now=NOW) is None  # converged: nothing more to write


def test_pool_members_carry_their_subnets_cidr_and_skip_unknown_subnets() -> None:
    from eni_ipam.kube.resources import pool_members

    obj = {
        "metadata": {"name": "n1"},
        "status": {
            "pool": {
                "10.0.0.5": {"interface": "eni-1", "subnet": "s-1"},
                "10.0.9.5": {"interface": "eni-2", "subnet": "s-unknown"},
            },
            "subnets": {"s-1": {"cidr": "10.0.0.0/22"}},
        },
    }
    assert pool_members(obj) == [("10.0.0.5", "10.0.0.0/22", "eni-1", "s-1")]


def _devices_status() -> NodeStatus:
    """A node of two cloud interfaces (MAC addresses; the second on card 2) and, for contrast, the
    generic provider's kind (no MAC, card 0)."""
    return NodeStatus(
        subnets={"s-1": "10.0.0.0/24"},
        interfaces=(
            Interface(
                id="eni-0",
                device_index=0,
                subnet_id="s-1",
                primary_ip="10.0.0.4",
                link=devices.pack("0a:00:00:00:00:01"),
            ),
            Interface(
                id="eni-1",
                device_index=1,
                subnet_id="s-1",
                primary_ip="10.0.0.5",
                addresses=("10.0.0.6",),
                link=devices.pack("0a:00:00:00:00:02", 2),
            ),
            Interface(id="vif-n1", device_index=2, subnet_id="s-1", primary_ip=""),
        ),
    )


def test_interfaces_publish_their_mac_address_and_card_only_where_they_have_one() -> None:
    obj: dict = {"metadata": {"name": "n1", "resourceVersion": "1"}}
    obj = _apply(obj, _write(_devices_status(), obj, now=NOW))
    published = [
        {k: v for k, v in i.items() if k in ("id", "macAddress", "networkCard")}
        for i in obj["status"]["interfaces"]
    ]
    assert published == [
        {"id": "eni-0", "macAddress": "0a:00:00:00:00:01"},
        {"id": "eni-1", "macAddress": "0a:00:00:00:00:02", "networkCard": 2},
        {"id": "vif-n1"},
    ]


def test_an_unchanged_status_with_devices_is_not_rewritten() -> None:
    obj = {"metadata": {"name": "n1", "resourceVersion": "1"}, "status": {}}
    written = json.loads(json.dumps(_apply(obj, _write(_devices_status(), obj, now=NOW))))
    assert _write(_devices_status(), written, now=LATER) is None
    moved = dataclasses.replace(_devices_status().interfaces[1], link=devices.pack("0a:00:00:00:00:03", 2))
    changed = dataclasses.replace(_devices_status(), interfaces=(_devices_status().interfaces[0], moved))
    assert _write(changed, written, now=LATER) is not None  # another MAC is a change


def test_a_status_from_before_devices_were_published_is_rewritten_once() -> None:
    """A controller upgrade: the stored interfaces lack ``macAddress`` (an older controller wrote
    them), so the digest differs and the status is written once; then it is current."""
    obj = {"metadata": {"name": "n1", "resourceVersion": "1"}, "status": {}}
    written = json.loads(json.dumps(_apply(obj, _write(_devices_status(), obj, now=NOW))))
    older = json.loads(json.dumps(written))
    for entry in older["status"]["interfaces"]:
        entry.pop("macAddress", None)
        entry.pop("networkCard", None)
    ops = _write(_devices_status(), older, now=LATER)
    assert ops is not None and any(op["path"] == "/status/interfaces" for op in ops)
    assert _write(_devices_status(), _apply(older, ops), now=LATER) is None
    # A pool of the generic provider's kind has nothing new to publish: no rewrite at all.
    generic = NodeStatus(subnets={"s-1": "10.0.0.0/24"}, interfaces=(_devices_status().interfaces[2],))
    stored = json.loads(json.dumps(_apply(obj, _write(generic, obj, now=NOW))))
    assert "macAddress" not in json.dumps(stored) and _write(generic, stored, now=LATER) is None


def test_pool_interfaces_give_the_node_side_each_device_and_leave_out_what_the_schema_refuses() -> None:
    obj = {"metadata": {"name": "n1", "resourceVersion": "1"}}
    obj = _apply(obj, _write(_devices_status(), obj, now=NOW))
    found = [
        (i.id, i.device_index, i.network_card, i.mac_address, i.cidr, i.primary_ip)
        for i in pool_interfaces(obj)
    ]
    assert found == [
        ("eni-0", 0, 0, "0a:00:00:00:00:01", "10.0.0.0/24", "10.0.0.4"),
        ("eni-1", 1, 2, "0a:00:00:00:00:02", "10.0.0.0/24", "10.0.0.5"),
        ("vif-n1", 2, 0, "", "10.0.0.0/24", ""),
    ]
    good = {"id": "eni-9", "deviceIndex": 3, "subnet": "s-unknown"}
    bypassed = [
        "not an entry",
        {**good, "id": ""},
        {**good, "deviceIndex": "3"},
        {**good, "deviceIndex": True},
        {**good, "networkCard": -1},
        {**good, "networkCard": 256},
        {**good, "macAddress": "0A:00:00:00:00:09"},
        {**good, "macAddress": "01:00:5e:00:00:01"},
        {**good, "macAddress": 9},
        good,
    ]
    (kept,) = pool_interfaces({"status": {"interfaces": bypassed, "subnets": {"s-1": "not a mapping"}}})
    assert kept == PoolInterface(
        id="eni-9",
        device_index=3,
        network_card=0,
        mac_address="",
        subnet_id="s-unknown",
        cidr="",
        primary_ip="",
    )
    assert pool_interfaces({"status": "not a mapping"}) == pool_interfaces({}) == []


def test_an_interface_no_pool_fills_is_published_with_its_type_and_never_given_to_the_node_side() -> None:
    """A trunk or EFA-only interface is in the status (an operator sees what the instance holds),
    with its type; the node side is never given its device to configure. An EFA interface is."""
    kinds = (devices.Kind.EFA, devices.Kind.TRUNK, devices.Kind.EFA_ONLY, devices.Kind.OTHER)
    status = NodeStatus(
        subnets={"s-1": "10.0.0.0/24"},
        interfaces=(
            _devices_status().interfaces[0],
            *(
                Interface(
                    id=f"eni-{n}",
                    device_index=n,
                    subnet_id="s-1",
                    primary_ip="" if kind is devices.Kind.EFA_ONLY else f"10.0.0.{10 + n}",
                    link=devices.pack(f"0a:00:00:00:01:{n:02x}", 0, kind),
                )
                for n, kind in enumerate(kinds, 1)
            ),
        ),
    )
    obj: dict = {"metadata": {"name": "n1", "resourceVersion": "1"}}
    obj = _apply(obj, _write(status, obj, now=NOW))
    assert [i.get("interfaceType") for i in obj["status"]["interfaces"]] == [
        None,
        "efa",
        "trunk",
        "efa-only",
        "other",
    ]
    assert [i.id for i in pool_interfaces(obj)] == ["eni-0", "eni-1"]
    # A status that bypassed the schema with a type it does not know: not configured either.
    obj["status"]["interfaces"][1]["interfaceType"] = "EFA"
    assert [i.id for i in pool_interfaces(obj)] == ["eni-0"]


def test_agent_status_patch_writes_only_the_agents_fields_and_their_changes() -> None:
    from eni_ipam.kube.resources import agent_status_patch

    obj = {
        "metadata": {"name": "n1", "resourceVersion": "9"},
        "status": {"used": ["10.0.0.10", "10.0.0.9"], "releaseAnswers": {"10.0.0.7": "ready-for-release"}},
    }
    assert (
        agent_status_patch(obj, used={"10.0.0.9", "10.0.0.10"}, answers={"10.0.0.7": ReleaseState.READY})
        is None
    )
    patch = agent_status_patch(obj, used={"10.0.0.9"}, answers={"10.0.0.8": ReleaseState.DO_NOT_RELEASE})
    assert patch == {
        "metadata": {"resourceVersion": "9"},
        "status": {"used": ["10.0.0.9"], "releaseAnswers": {"10.0.0.8": "do-not-release", "10.0.0.7": None}},
    }
    # addresses are ordered numerically, not as strings
    assert agent_status_patch({"metadata": {}}, used={"10.0.0.10", "10.0.0.9"}, answers={})["status"][
        "used"
    ] == [
        "10.0.0.9",
        "10.0.0.10",
    ]


def _pool_with(spec: dict, recorded: dict | None) -> dict:
    annotations = {} if recorded is None else {DEFAULTS_ANNOTATION: json.dumps(recorded)}
    return {"metadata": {"name": "n1", "annotations": annotations}, "spec": {"instanceID": "i-1", **spec}}


@pytest.mark.parametrize(
    ("spec", "recorded", "defaults", "changes"),
    [
        # a field holding the default it was given follows the new default
        ({"preAllocate": 4}, {"preAllocate": 4}, NodeSpec(pre_allocate=5), {"preAllocate": 5}),
        # a field someone changed is theirs
        ({"preAllocate": 6}, {"preAllocate": 4}, NodeSpec(pre_allocate=5), None),
        # a field someone removed is theirs too
        ({}, {"minAllocate": 2}, NodeSpec(min_allocate=3), None),
        # a new default is written where the field is unset
        ({}, {}, NodeSpec(min_allocate=3), {"minAllocate": 3}),
        # ...but not over a value set before the default existed
        ({"minAllocate": 1}, {}, NodeSpec(min_allocate=3), None),
        # a default no longer set is removed where it still holds
        ({"minAllocate": 2}, {"minAllocate": 2}, NodeSpec(), {"minAllocate": None}),
        ({"minAllocate": 7}, {"minAllocate": 2}, NodeSpec(), None),
    ],
)
def test_defaults_patch_changes_only_the_fields_that_follow_the_defaults(
    spec: dict, recorded: dict, defaults: NodeSpec, changes: dict | None
) -> None:
    patch = defaults_patch(_pool_with(spec, recorded), defaults)
    assert (patch or {}).get("spec") == changes
    if patch is not None:  # the record is today's defaults
        written = json.loads(patch["metadata"]["annotations"][DEFAULTS_ANNOTATION])
        assert written == defaults.as_pool_spec()


def test_a_pool_without_a_record_of_defaults_is_left_alone() -> None:
    assert defaults_patch(_pool_with({"preAllocate": 4}, None), NodeSpec(pre_allocate=9)) is None


def test_a_pool_made_from_defaults_records_them() -> None:
    body = pool_for_node(node(), NodeSpec(pre_allocate=4, subnet_ids=("s-1",)))
    assert body is not None
    assert json.loads(body["metadata"]["annotations"][DEFAULTS_ANNOTATION]) == {
        "preAllocate": 4,
        "subnetIDs": ["s-1"],
    }
    assert defaults_patch(body, NodeSpec(pre_allocate=4, subnet_ids=("s-1",))) is None


def test_a_problem_becomes_the_ready_conditions_reason() -> None:
    status = NodeStatus(problem="DuplicateInstance", message="instance i-1 is node n0's already")
    obj = _apply(
        {"metadata": {"name": "n1", "resourceVersion": "1"}},
        _write(status, {"metadata": {"name": "n1"}}, now=NOW),
    )
    ready = next(c for c in obj["status"]["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"], ready["message"]) == (
        "False",
        "DuplicateInstance",
        "instance i-1 is node n0's already",
    )


def conditions_of(status: NodeStatus, obj: dict | None = None, *, now: datetime.datetime = NOW) -> dict:
    obj = obj or {"metadata": {"name": "n1", "resourceVersion": "1"}}
    return _apply(obj, _write(status, obj, now=now))


@pytest.mark.parametrize(
    ("pressure", "want"),
    [
        (None, None),  # pressure disabled: no condition at all, pools written as before
        ((), ("False", "NoPressure")),
        (("s-1",), ("True", "SubnetPressure")),
        (("s-1", "s-2"), ("True", "SubnetPressure")),
    ],
)
def test_a_pool_in_a_subnet_under_pressure_says_so_in_a_condition(
    pressure: tuple[str, ...] | None, want: tuple[str, str] | None
) -> None:
    obj = conditions_of(dataclasses.replace(_status(["10.0.0.5"]), pressure=pressure))
    found = {c["type"]: c for c in obj["status"]["conditions"]}
    if want is None:
        assert set(found) == {"Ready", "AtCapacity"}
        return
    condition = found["SubnetPressure"]
    assert (condition["status"], condition["reason"]) == want
    for subnet in pressure or ():
        assert subnet in condition["message"]


def test_the_pressure_conditions_transition_time_moves_only_when_it_changes() -> None:
    status = dataclasses.replace(_status(["10.0.0.5"]), pressure=())
    obj = conditions_of(status)
    obj = conditions_of(dataclasses.replace(status, pressure=("s-1",)), obj, now=LATER)
    condition = next(c for c in obj["status"]["conditions"] if c["type"] == "SubnetPressure")
    assert (condition["status"], condition["lastTransitionTime"]) == ("True", "2026-11-21T08:01:00Z")
    later = LATER + datetime.timedelta(minutes=1)
    obj = conditions_of(dataclasses.replace(status, pressure=("s-1",), message="x"), obj, now=later)
    condition = next(c for c in obj["status"]["conditions"] if c["type"] == "SubnetPressure")
    assert condition["lastTransitionTime"] == "2026-11-21T08:01:00Z"


def test_a_pools_instance_id_is_the_one_interned_string_the_cloud_listing_names_too() -> None:
    import sys

    from eni_ipam.kube.resources import resource_from_pool

    named = "".join(["i-0123", "456789abcdef0"])  # a string object of its own, as JSON decodes it
    pool = {"metadata": {"name": "n1"}, "spec": {"instanceID": named}}
    assert resource_from_pool(pool).instance_id is sys.intern("i-0123456789abcdef0")


@pytest.mark.parametrize(
    "provider_id",
    ["aws:///us-east-1a/i-0123\x1b[31m", "aws:///us-east-1a/i-01 23", "aws:///us-east-1a/i-0123\x07"],
)
def test_a_provider_id_with_a_control_character_or_a_space_names_no_instance(provider_id: str) -> None:
    from eni_ipam.kube.resources import instance_id_from_provider_id

    assert instance_id_from_provider_id(provider_id) == ""
