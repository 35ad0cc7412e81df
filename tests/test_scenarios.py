"""Every example scenario is an acceptance test; invalid scenarios fail with the offending key's path."""

from pathlib import Path

import pytest
import yaml

from eni_ipam.cli import main
from eni_ipam.simulator.scenario import ScenarioError, load_scenario, parse_scenario
from eni_ipam.simulator.series import SeriesOptions
from eni_ipam.simulator.simulate import simulate

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples" / "scenarios").glob("*.yaml"))
SHARED = ROOT.parent / "shared" / "scenarios"


def test_there_are_enough_example_scenarios():
    assert len(EXAMPLES) >= 17


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_scenario_holds(path):
    outcome = simulate(load_scenario(path))
    failures = [f for r in outcome.results for f in r.failures]
    assert outcome.passed, failures
    assert len(outcome.results) == len(load_scenario(path).steps)


@pytest.mark.skipif(not SHARED.is_dir(), reason="shared scenarios are not beside this checkout")
@pytest.mark.parametrize("name", ["basics.yaml", "release.yaml"])
def test_shared_scenarios_are_kept_verbatim_in_examples(name):
    assert (SHARED / name).read_text() == (ROOT / "examples" / "scenarios" / name).read_text()


BASE = """
cloud:
  vpcs: [{id: vpc-1, cidr: 10.0.0.0/16}]
  subnets: [{id: s-1, vpc: vpc-1, zone: z, cidr: 10.0.0.0/24}]
  security_groups: [{id: sg-1, vpc: vpc-1}]
  instances: [{id: i-1, type: m5.large, subnet: s-1, security_groups: [sg-1]}]
nodes: [{name: node1, instance: i-1}]
"""


@pytest.mark.parametrize(
    ("extra", "path"),
    [
        ("steps: [{expect: {node1: {available: x}}}]", "steps[0].expect.node1.available"),
        ("steps: [{expect: {node9: {available: 1}}}]", "steps[0].expect.node9"),
        ("steps: [{expect: {node1: {availabel: 1}}}]", "steps[0].expect.node1.availabel"),
        ("steps: [{converge: soon}]", "steps[0].converge"),
        (
            "steps: [{expect: {node1: {addresses_by_index: {x/1: 2}}}}]",
            "steps[0].expect.node1.addresses_by_index.x/1",
        ),
        ("steps: [{advance: 1s, converge: 1s}]", "steps[0]"),
        ("steps: [{teleport: 1}]", "steps[0].teleport"),
        ("steps: [{set: {node1: {used: -1}}}]", "steps[0].set.node1.used"),
        ("steps: [{remove_node: node7}]", "steps[0].remove_node"),
        ("steps: [{cloud: {subnets: {s-9: {available: 1}}}}]", "steps[0].cloud.subnets.s-9"),
        ("steps: [{cloud: {instances: {i-1: {state: exploded}}}}]", "steps[0].cloud.instances.i-1.state"),
        ("settings: {parallel_workers: 0}", "settings.parallel_workers"),
        ("settings: {release_excess_ips: maybe}", "settings.release_excess_ips"),
        ("settings: {colour: blue}", "settings.colour"),
    ],
)
def test_invalid_scenario_names_the_offending_key(extra, path):
    with pytest.raises(ScenarioError) as info:
        parse_scenario(yaml.safe_load(BASE + extra))
    assert info.value.path == path


@pytest.mark.parametrize(
    ("mutate", "path"),
    [
        (lambda d: d["cloud"]["subnets"][0].update(vpc="vpc-9"), "cloud.subnets[0].vpc"),
        (lambda d: d["cloud"]["subnets"][0].update(cidr="192.168.0.0/24"), "cloud.subnets[0].cidr"),
        (lambda d: d["cloud"]["subnets"][0].update(cidr="10.0.0.0/33"), "cloud.subnets[0].cidr"),
        (lambda d: d["cloud"]["instances"][0].update(subnet="s-9"), "cloud.instances[0].subnet"),
        (
            lambda d: d["cloud"]["instances"][0].update(security_groups=["sg-9"]),
            "cloud.instances[0].security_groups[0]",
        ),
        (lambda d: d["nodes"][0].update(instance="i-9"), "nodes[0].instance"),
        (lambda d: d["nodes"][0].update(pre_allocate="8"), "nodes[0].pre_allocate"),
        (lambda d: d["nodes"][0].update(network_cards=[0, 1, 0]), "nodes[0].network_cards"),
        (lambda d: d["nodes"][0].update(network_cards=[]), "nodes[0].network_cards"),
        (lambda d: d["nodes"][0].update(network_cards=[256]), "nodes[0].network_cards[0]"),
        (lambda d: d["nodes"].append({"name": "node1", "instance": "i-1"}), "nodes[1].name"),
        (
            lambda d: d["cloud"]["security_groups"].append({"id": "sg-1", "vpc": "vpc-1"}),
            "cloud.security_groups[1].id",
        ),
        (lambda d: d.pop("cloud"), "cloud"),
        (
            lambda d: d["cloud"]["instances"][0].update(
                interfaces=[{"index": 0}, {"index": 1, "type": "branch"}]
            ),
            "cloud.instances[0].interfaces[1].type",
        ),
        (
            lambda d: d["cloud"]["instances"][0].update(
                interfaces=[{"index": 0}, {"index": 1, "type": "efa-only", "secondary_ips": 2}]
            ),
            "cloud.instances[0].interfaces[1].secondary_ips",
        ),
        (
            lambda d: d["cloud"]["instances"][0].update(interfaces=[{"index": 0, "type": "efa-only"}]),
            "cloud.instances[0].interfaces[0].type",
        ),
    ],
)
def test_invalid_cloud_and_nodes_name_the_offending_key(mutate, path):
    data = yaml.safe_load(BASE)
    mutate(data)
    with pytest.raises(ScenarioError) as info:
        parse_scenario(data)
    assert info.value.path == path


def write(tmp_path, text):
    path = tmp_path / "s.yaml"
    path.write_text(text)
    return str(path)


def test_cli_exits_0_when_expectations_hold(tmp_path, capsys):
    assert (
        main(
            [
                "simulate",
                write(tmp_path, BASE + "steps: [{converge: 10s}, {expect: {node1: {available: 8}}}]"),
            ]
        )
        == 0
    )
    assert "PASS" in capsys.readouterr().out


def test_cli_exits_1_with_a_readable_diff(tmp_path, capsys):
    rc = main(
        ["simulate", write(tmp_path, BASE + "steps: [{converge: 10s}, {expect: {node1: {available: 9}}}]")]
    )
    assert rc == 1
    assert "steps[1].expect.node1.available: expected 9, got 8" in capsys.readouterr().err


def test_a_failed_expectation_says_why_a_misspelt_instance_type_got_nothing(tmp_path, capsys):
    text = BASE.replace("m5.large", "m5.larg") + "steps: [{converge: 10s}, {expect: {node1: {available: 8}}}]"
    assert main(["simulate", write(tmp_path, text)]) == 1
    err = capsys.readouterr().err
    assert "steps[1].expect.node1.available: expected 8, got 0" in err
    why = next(line for line in err.splitlines() if "steps[1].expect.node1: why:" in line)
    assert "limits-unknown" in why
    assert "the limits of instance type m5.larg are unknown" in why
    assert "did you mean m5.large" in why


def test_a_failed_expectation_says_why_a_node_at_its_instances_limit_stopped(tmp_path):
    text = BASE.replace("m5.large", "t3.nano") + (
        "steps: [{converge: 10s}, {set: {node1: {used: 40}}}, {converge: 30s},"
        " {expect: {node1: {available: 40}}}]"
    )
    outcome = simulate(parse_scenario(yaml.safe_load(text)))
    failures = outcome.results[-1].failures
    assert failures[0].startswith("steps[3].expect.node1.available: expected 40, got")
    assert failures[1].startswith("steps[3].expect.node1: why: instance-limit")


def test_an_expectation_that_holds_or_fails_on_no_node_explains_nothing(tmp_path):
    text = BASE + "steps: [{converge: 10s}, {expect: {api_calls: {AssignPrivateIpAddresses: 7}}}]"
    outcome = simulate(parse_scenario(yaml.safe_load(text)))
    assert outcome.results[-1].failures == [
        "steps[1].expect.api_calls.AssignPrivateIpAddresses: expected 7, got 1"
    ]


def test_cli_exits_2_naming_the_bad_key(tmp_path, capsys):
    rc = main(["simulate", write(tmp_path, BASE + "steps: [{expect: {node1: {used: many}}}]")])
    assert rc == 2
    assert "steps[0].expect.node1.used" in capsys.readouterr().err


def test_cli_exits_2_for_instances_the_cloud_refuses(tmp_path, capsys):
    three = "interfaces: [{index: 0}, {index: 1}, {index: 2}]"
    text = BASE.replace("type: m5.large,", f"type: t3.micro, {three},")
    assert main(["simulate", write(tmp_path, text)]) == 2
    assert "cloud.instances[0]" in capsys.readouterr().err


def test_unknown_instance_type_says_why_in_the_node_status(tmp_path, capsys):
    import json

    text = BASE.replace("m5.large", "x99.hypothetical") + "steps: [{converge: 10s}]"
    main(["simulate", "--json", write(tmp_path, text)])
    state = json.loads(capsys.readouterr().out)
    assert "unknown" in state["nodes"]["node1"]["message"]
    assert state["api_calls"].get("AssignPrivateIpAddresses", 0) == 0


def test_cli_exits_2_for_a_missing_file_or_bad_yaml(tmp_path, capsys):
    assert main(["simulate", str(tmp_path / "absent.yaml")]) == 2
    assert main(["simulate", write(tmp_path, "cloud: [unclosed")]) == 2


def test_cli_json_prints_one_object_per_step(tmp_path, capsys):
    import json

    main(
        ["simulate", "--json", write(tmp_path, BASE + "steps: [{converge: 10s}, {set: {node1: {used: 3}}}]")]
    )
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["kind"] for line in lines] == ["converge", "set"]
    assert lines[0]["nodes"]["node1"]["available"] == 8
    assert lines[0]["api_calls"]["AssignPrivateIpAddresses"] == 1


GENERIC = {"generic": {"cluster_cidrs": ["10.0.0.0/24"]}, "nodes": [{"name": "n1"}]}


@pytest.mark.parametrize(
    ("change", "path"),
    [
        ({"cloud": {}}, "cloud"),
        ({"generic": None}, "cloud"),  # neither cloud nor generic
        ({"generic": {"cluster_cidrs": ["10.0.0.0/24"], "node_mask_ipv4": 30}}, "generic.node_mask_ipv4"),
        ({"steps": [{"cloud": {"latency": {"Resync": 1}}}]}, "steps[0].cloud"),
    ],
)
def test_a_generic_scenario_names_what_is_wrong(change, path):
    data = {**GENERIC, **change}
    if data.get("generic") is None:
        data.pop("generic")
        data.pop("cloud", None)
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(data)
    assert caught.value.path == path


def test_a_generic_node_is_its_own_instance():
    scenario = parse_scenario(GENERIC)
    assert scenario.nodes[0].instance_id == "n1" and scenario.generic is not None


TWO_INSTANCES = BASE.replace(
    "instances: [{id: i-1, type: m5.large, subnet: s-1, security_groups: [sg-1]}]",
    "instances: [{id: i-1, type: m5.large, subnet: s-1}, {id: i-2, type: m5.large, subnet: s-1}]",
)


@pytest.mark.parametrize(
    ("extra", "path"),
    [
        ("  - {name: node2, instance: i-1}\n", "nodes[1].instance"),
        ("steps: [{add_node: {name: node2, instance: i-1}}]\n", "steps[0].add_node.instance"),
    ],
)
def test_two_nodes_on_one_instance_are_refused(extra: str, path: str) -> None:
    data = yaml.safe_load(TWO_INSTANCES)
    if extra.startswith("  -"):
        data["nodes"].append(yaml.safe_load(extra.strip()[2:]))
    else:
        data.update(yaml.safe_load(extra))
    with pytest.raises(ScenarioError) as info:
        parse_scenario(data)
    assert info.value.path == path and "same addresses" in info.value.message


def test_an_instance_freed_by_a_removed_node_may_be_taken_again() -> None:
    steps = "steps: [{remove_node: node1}, {add_node: {name: node2, instance: i-1}}]\n"
    scenario = parse_scenario(yaml.safe_load(BASE + steps))
    assert scenario.steps[1].value.instance_id == "i-1"


@pytest.mark.parametrize(
    ("vpc", "subnet", "words"),
    [
        ("10.0.0.0/8", "10.0.0.0/8", "/16 to /28"),
        ("10.0.0.0/16", "10.0.0.0/8", "too large"),
        ("10.0.0.0/16", "10.1.0.0/24", "is not inside VPC"),
        ("10.0.0.0/16", "10.0.0.0/30", "/28 or larger"),
    ],
)
def test_a_subnet_ec2_would_refuse_exits_2(tmp_path, capsys, vpc: str, subnet: str, words: str) -> None:
    text = BASE.replace("cidr: 10.0.0.0/16", f"cidr: {vpc}").replace("cidr: 10.0.0.0/24", f"cidr: {subnet}")
    assert main(["simulate", write(tmp_path, text)]) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err


def test_overlapping_subnets_are_refused_before_the_cloud_is_built() -> None:
    data = yaml.safe_load(BASE)
    data["cloud"]["subnets"].append({"id": "s-2", "vpc": "vpc-1", "zone": "z", "cidr": "10.0.0.128/25"})
    with pytest.raises(ScenarioError) as info:
        parse_scenario(data)
    assert info.value.path == "cloud.subnets[1].cidr" and "overlaps" in info.value.message


def test_a_key_written_twice_in_a_scenario_is_refused(tmp_path, capsys) -> None:
    text = BASE + "seed: 1\nseed: 2\n"
    assert main(["simulate", write(tmp_path, text)]) == 2
    assert "duplicate key 'seed'" in capsys.readouterr().err


def test_without_the_subnet_reserve_a_hostile_spec_starves_the_other_nodes_pods() -> None:
    """hostile_min_allocate.yaml with the reserve off, as before it existed: the hostile pool takes
    every free address of the shared /23, and the other node's pods wait for good."""
    data = yaml.safe_load((ROOT / "examples" / "scenarios" / "hostile_min_allocate.yaml").read_text())
    data["settings"] = {"subnet_reserve": 0}
    data["steps"] = [
        {"converge": "60s"},
        {"set": {"other": {"pending_pods": 6}}},
        {"converge": "60s"},
        {
            "expect": {
                "other": {"available": 0},
                "metrics": {'eni_ipam_available_ips_per_subnet{subnet="s-1",zone="us-east-1a"}': 0},
            }
        },
    ]
    outcome = simulate(parse_scenario(data))
    assert outcome.passed, [f for r in outcome.results for f in r.failures]


def test_credentials_revoked_fail_every_call_until_restored() -> None:
    data = yaml.safe_load(BASE)
    data["steps"] = [
        {"converge": "30s"},
        {"cloud": {"credentials": "revoked"}},
        {"set": {"node1": {"used": 8}}},
        {"advance": "120s"},
        {"expect": {"node1": {"available": 8, "needed": 8}}},
        {"cloud": {"credentials": "restored"}},
        {"advance": "400s"},  # the node's backoff runs out
        {"expect": {"node1": {"available": 16, "needed": 0}}},
    ]
    outcome = simulate(parse_scenario(data))
    assert outcome.passed, [f for r in outcome.results for f in r.failures]


def test_the_regions_interface_quota_fails_creates_by_its_own_reason_until_lifted() -> None:
    """m5.large interfaces hold 10 addresses: 12 in use need more interfaces, which the quota (the
    cloud's one interface) refuses with NetworkInterfaceLimitExceeded, a failure of its own class."""
    data = yaml.safe_load(BASE)
    data["steps"] = [
        {"converge": "30s"},
        {"cloud": {"quota": {"interfaces": 1}}},
        {"set": {"node1": {"used": 12}}},
        {"advance": "120s"},
        {"expect": {"node1": {"interfaces": 1}}},
        {"cloud": {"quota": {"interfaces": None}}},
        {"advance": "400s"},  # the node's backoff runs out
        {"expect": {"node1": {"interfaces": 3, "needed": 0}}},  # 12 used and 8 free
    ]
    outcome = simulate(parse_scenario(data), series=SeriesOptions(interval=60, labels={}))
    assert outcome.passed, [f for r in outcome.results for f in r.failures]
    assert outcome.series is not None
    failed = {
        dict(key.labels)["reason"]: values[-1]
        for key, values in outcome.series.series.items()
        if key.name == "eni_ipam_node_maintenance_failures_total"
    }
    assert list(failed) == ["QuotaExceeded"] and failed["QuotaExceeded"], failed


def test_a_nodes_agent_down_holds_its_excess_until_it_is_up_again() -> None:
    """Release needs the node side's answer: with node1's agent down, its excess stays; back up, it
    answers and the excess goes."""
    data = yaml.safe_load(BASE)
    data["settings"] = {"release_excess_ips": True}
    data["nodes"][0]["max_above_watermark"] = 0
    data["steps"] = [
        {"set": {"node1": {"used": 12}}},
        {"converge": "60s"},
        {"set": {"node1": {"agent": "down", "used": 0}}},
        {"converge": "120s"},
        {"expect": {"node1": {"available": 20, "excess": 12}}},
        {"set": {"node1": {"agent": "up"}}},
        {"converge": "120s"},
        {"expect": {"node1": {"available": 8, "excess": 0}}},
    ]
    outcome = simulate(parse_scenario(data))
    assert outcome.passed, [f for r in outcome.results for f in r.failures]


def test_an_agent_is_set_up_or_down_and_nothing_else() -> None:
    data = yaml.safe_load(BASE)
    data["steps"] = [{"set": {"node1": {"agent": "sleepy"}}}]
    with pytest.raises(ScenarioError) as info:
        parse_scenario(data)
    assert info.value.path == "steps[0].set.node1.agent"


def test_the_burst_example_side_by_side_with_the_pool_off() -> None:
    """burst_ready_interfaces.yaml as it is, and with the pool off: every joining node then creates,
    attaches and marks its interface (three calls), where with the pool it attaches one (one call)."""
    data = yaml.safe_load((ROOT / "examples" / "scenarios" / "burst_ready_interfaces.yaml").read_text())
    steps = [s for s in data["steps"] if "expect" not in s]
    calls = {}
    for enabled in (True, False):
        run = {**data, "settings": {**data["settings"], "ready_interfaces_enabled": enabled}, "steps": steps}
        outcome = simulate(parse_scenario(run))
        assert outcome.passed
        calls[enabled] = outcome.results[-1].state["api_calls"]
    mutating = ("CreateNetworkInterface", "AttachNetworkInterface", "ModifyNetworkInterfaceAttribute")
    # Two nodes ran before the burst, ten joined; with the pool, ten of the creates are refills.
    assert {op: calls[True][op] for op in mutating} == dict(zip(mutating, (20, 12, 2), strict=True))
    assert {op: calls[False][op] for op in mutating} == dict(zip(mutating, (12, 12, 12), strict=True))


PROFILED = (
    BASE
    + """
node_defaults: {pre_allocate: 2}
profiles:
  - {name: big, node_selector: {match_labels: {size: big}}, spec: {pre_allocate: 6}}
"""
)


@pytest.mark.parametrize(
    ("change", "path"),
    [
        (
            {
                "profiles": [
                    {"name": "big", "node_selector": {}},
                    {"name": "big", "node_selector": {"match_labels": {"a": "b"}}},
                ]
            },
            "profiles[1].name",
        ),
        (
            {"profiles": [{"name": "big", "node_selector": {}, "spec": {"pre_alocate": 1}}]},
            "profiles[0].spec.pre_alocate",
        ),
        ({"nodes": [{"name": "node1", "instance": "i-1", "labels": {"size": 7}}]}, "nodes[0].labels.size"),
        ({"steps": [{"set": {"node1": {"labels": ["size"]}}}]}, "steps[0].set.node1.labels"),
    ],
)
def test_a_bad_profile_or_label_in_a_scenario_names_its_key(change: dict, path: str) -> None:
    data = {**yaml.safe_load(PROFILED), **change}
    with pytest.raises(ScenarioError) as info:
        parse_scenario(data)
    assert info.value.path == path


def test_a_relabelled_node_follows_its_new_profile_and_node_defaults_otherwise() -> None:
    data = yaml.safe_load(PROFILED)
    data["steps"] = [
        {"converge": "60s"},
        {"expect": {"node1": {"available": 2}}},  # no label: node_defaults
        {"set": {"node1": {"labels": {"size": "big"}}}},
        {"converge": "60s"},
        {"expect": {"node1": {"available": 6}}},
    ]
    outcome = simulate(parse_scenario(data))
    assert outcome.passed, [f for r in outcome.results for f in r.failures]


def prefix_nodes_before_first_fallback(placement: bool) -> tuple[int, int]:
    """prefix_dense_placement.yaml without its expectations, with today's placement (the cloud
    chooses single addresses, prefixes are asked for until EC2 refuses) or the fragmentation-aware
    one (free /28s counted, single addresses packed): the prefix nodes, in the order they joined,
    that got their pool in prefixes before the first that fell back; and how many joined."""
    data = yaml.safe_load((ROOT / "examples" / "scenarios" / "prefix_dense_placement.yaml").read_text())
    data["settings"] = {**data["settings"], "prefix_placement": placement, "dense_placement": placement}
    data["steps"] = [s for s in data["steps"] if "expect" not in s]
    outcome = simulate(parse_scenario(data))
    assert outcome.passed, [f for r in outcome.results for f in r.failures]
    nodes = outcome.results[-1].state["nodes"]
    joined = [s["add_node"]["name"] for s in data["steps"] if "add_node" in s]
    served = 0
    for name in joined:
        node = nodes[name]
        if node["prefixes"] == 0 or node["available"] != 16 * node["prefixes"]:
            break
        served += 1
    return served, len(joined)


def test_fragmentation_aware_placement_keeps_prefix_delegation_working_longer() -> None:
    """Both placements from the same start (docs/scenarios.md quotes the figures)."""
    today, joined = prefix_nodes_before_first_fallback(False)
    aware, _ = prefix_nodes_before_first_fallback(True)
    assert (today, aware, joined) == (0, 12, 14)


def return_scenario(change: dict[str, object]) -> dict[str, object]:
    """prefix_return.yaml up to the other instances' going, with ``change`` made to node1 before."""
    data = yaml.safe_load((ROOT / "examples" / "scenarios" / "prefix_return.yaml").read_text())
    steps = data["steps"]
    at = next(n for n, s in enumerate(steps) if "cloud" in s)
    data["steps"] = [*steps[:at], {"set": {"node1": change}}, *steps[at:-1]]
    return data


def test_a_node_whose_single_address_is_in_use_does_not_return() -> None:
    data = return_scenario({"used": 1})
    data["steps"].append(
        {
            "expect": {
                "node1": {"prefixes": 0, "release_ips": 0},
                "api_calls": {"AssignPrivateIpAddresses": 2, "UnassignPrivateIpAddresses": 0},
            }
        }
    )
    outcome = simulate(parse_scenario(data))
    assert outcome.passed, [f for r in outcome.results for f in r.failures]


def test_a_returning_node_unassigns_nothing_before_its_agent_answers() -> None:
    """Its agent down: the prefix is placed and the single addresses are marked, none unassigned."""
    data = return_scenario({"agent": "down"})
    data["steps"].append(
        {
            "expect": {
                "node1": {"prefixes": 1, "available": 24, "release_ips": 8},
                "api_calls": {"AssignPrivateIpAddresses": 2, "UnassignPrivateIpAddresses": 0},
            }
        }
    )
    data["steps"] += [
        {"set": {"node1": {"agent": "up"}}},
        {"converge": "60s"},
        {"expect": {"node1": {"prefixes": 1, "available": 16, "addresses_by_index": {0: 16}}}},
    ]
    outcome = simulate(parse_scenario(data))
    assert outcome.passed, [f for r in outcome.results for f in r.failures]
