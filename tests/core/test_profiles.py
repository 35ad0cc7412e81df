"""Profiles: which profile a Node's labels choose (most specific first, ties by name), what its spec
is once merged over ``node_defaults``, and which configurations are refused, naming the field."""

from __future__ import annotations

from typing import Any

import pytest

from eni_ipam.app.runconfig import load_config_mapping
from eni_ipam.config.schema import validate
from eni_ipam.core.profiles import NodeSelector, Profile, ProfileSet, merged
from eni_ipam.core.spec import NodeSpec
from eni_ipam.errors import ConfigError

ZONE = "topology.kubernetes.io/zone"


def selector(**data: Any) -> NodeSelector:
    return validate(NodeSelector, data)


@pytest.mark.parametrize(
    ("data", "labels", "matches"),
    [
        ({}, {}, True),  # the empty selector: every Node
        ({"match_labels": {"group": "web"}}, {"group": "web", "other": "x"}, True),
        ({"match_labels": {"group": "web"}}, {"group": "batch"}, False),
        ({"match_labels": {"group": "web"}}, {}, False),
        ({"match_labels": {"group": "web", ZONE: "a"}}, {"group": "web", ZONE: "b"}, False),
        (
            {"match_expressions": [{"key": "group", "operator": "In", "values": ["a", "b"]}]},
            {"group": "b"},
            True,
        ),
        ({"match_expressions": [{"key": "group", "operator": "In", "values": ["a"]}]}, {}, False),
        ({"match_expressions": [{"key": "group", "operator": "NotIn", "values": ["a"]}]}, {}, True),
        (
            {"match_expressions": [{"key": "group", "operator": "NotIn", "values": ["a"]}]},
            {"group": "a"},
            False,
        ),
        ({"match_expressions": [{"key": "gpu", "operator": "Exists"}]}, {"gpu": ""}, True),
        ({"match_expressions": [{"key": "gpu", "operator": "Exists"}]}, {}, False),
        ({"match_expressions": [{"key": "spot", "operator": "DoesNotExist"}]}, {}, True),
        ({"match_expressions": [{"key": "spot", "operator": "DoesNotExist"}]}, {"spot": "true"}, False),
        (
            {
                "match_labels": {"group": "web"},
                "match_expressions": [{"key": ZONE, "operator": "In", "values": ["a", "b"]}],
            },
            {"group": "web", ZONE: "c"},
            False,
        ),
    ],
)
def test_a_selector_matches_as_kubernetes_label_selectors_do(
    data: dict[str, Any], labels: dict[str, str], matches: bool
) -> None:
    assert selector(**data).matches(labels) is matches


def profile(name: str, labels: dict[str, str], **spec: Any) -> Profile:
    return Profile(name=name, node_selector=NodeSelector(match_labels=labels), spec=NodeSpec(**spec))


EVERYONE = Profile(name="everyone", node_selector=NodeSelector(), spec=NodeSpec(pre_allocate=2))
WEB = profile("web", {"group": "web"}, pre_allocate=6)
WEB_A = profile("web-a", {"group": "web", ZONE: "a"}, subnet_ids=("s-a",))
GPU = profile("gpu", {"accelerator": "nvidia"}, pre_allocate=1)
ARM = profile("arm", {"arch": "arm64"}, pre_allocate=3)


@pytest.mark.parametrize(
    ("labels", "chosen"),
    [
        ({"group": "web", ZONE: "a"}, "web-a"),  # two requirements beat one
        ({"group": "web", ZONE: "b"}, "web"),
        ({"group": "batch"}, "everyone"),
        ({"accelerator": "nvidia", "arch": "arm64"}, "arm"),  # a tie of one each: the first name
        ({"accelerator": "nvidia"}, "gpu"),
    ],
)
def test_the_most_specific_profile_is_chosen_and_a_tie_goes_by_name(
    labels: dict[str, str], chosen: str
) -> None:
    for order in (
        (EVERYONE, WEB, WEB_A, GPU, ARM),
        (ARM, GPU, WEB_A, WEB, EVERYONE),
    ):  # the list's order is moot
        assert ProfileSet(order).choose(labels)[0] == chosen


def test_a_node_no_profile_matches_follows_node_defaults() -> None:
    defaults = NodeSpec(pre_allocate=4)
    assert ProfileSet((WEB,), defaults).choose({"group": "batch"}) == ("", defaults)
    assert ProfileSet((), None).choose({}) == ("", None)


def test_a_profiles_keys_are_merged_over_node_defaults_and_win() -> None:
    defaults = NodeSpec(pre_allocate=4, first_interface_index=1)
    name, spec = ProfileSet((WEB,), defaults).choose({"group": "web"})
    assert name == "web"
    assert spec is not None
    assert (spec.pre_allocate, spec.first_interface_index) == (6, 1)
    # What a pool is given and records: the keys written in either, nothing else.
    assert spec.as_pool_spec() == {"preAllocate": 6, "firstInterfaceIndex": 1}
    assert merged(None, WEB.spec).as_pool_spec() == {"preAllocate": 6}


def test_only_the_label_keys_the_selectors_name_are_read() -> None:
    chosen = ProfileSet(
        (
            WEB_A,
            validate(
                Profile,
                {"name": "x", "node_selector": {"match_expressions": [{"key": "k", "operator": "Exists"}]}},
            ),
        )
    )
    assert chosen.label_keys == {"group", ZONE, "k"}
    assert not ProfileSet(())


BASE: dict[str, Any] = {
    "provider": "sim",
    "sim": {"cloud": {"vpcs": [{"id": "vpc-1", "cidr": "10.0.0.0/16"}]}},
}
WEB_ENTRY = {"name": "web", "node_selector": {"match_labels": {"group": "web"}}, "spec": {"pre_allocate": 6}}


@pytest.mark.parametrize(
    ("profiles", "field", "words"),
    [
        ([WEB_ENTRY, {**WEB_ENTRY, "node_selector": {}}], "profiles[1].name", "listed twice"),
        (
            [WEB_ENTRY, {**WEB_ENTRY, "name": "web2"}],
            "profiles[1].node_selector",
            "same selector as profile web",
        ),
        ([{**WEB_ENTRY, "spec": {"colour": "red"}}], "profiles[0].spec.colour", "unknown key"),
        ([{**WEB_ENTRY, "spec": {"min_allocate": -1}}], "profiles[0].spec.min_allocate", "negative"),
        ([{**WEB_ENTRY, "name": "Web_1"}], "profiles[0].name", "profile name"),
        ([{"name": "web", "spec": {}}], "profiles[0].node_selector", "required"),
        (
            [{**WEB_ENTRY, "node_selector": {"match_labels": {"bad key!": "x"}}}],
            "profiles[0].node_selector.match_labels.bad key!",
            "not a label key",
        ),
        (
            [{**WEB_ENTRY, "node_selector": {"match_labels": {"group": "no spaces"}}}],
            "profiles[0].node_selector.match_labels.group",
            "not a label value",
        ),
        (
            [{**WEB_ENTRY, "node_selector": {"match_expressions": [{"key": "g", "operator": "In"}]}}],
            "profiles[0].node_selector.match_expressions[0].values",
            "at least one value",
        ),
        (
            [{**WEB_ENTRY, "node_selector": {"match_expressions": [{"key": "g", "operator": "Like"}]}}],
            "profiles[0].node_selector.match_expressions[0].operator",
            "expected one of",
        ),
        (
            [{**WEB_ENTRY, "node_selector": {"matchLabels": {"group": "web"}}}],
            "profiles[0].node_selector.matchLabels",
            "unknown key",
        ),
    ],
)
def test_a_bad_profile_is_refused_naming_its_field(profiles: list[Any], field: str, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config_mapping({**BASE, "profiles": profiles})
    assert info.value.field == field
    assert words in info.value.message


def test_profiles_are_for_kubernetes_nodes_only() -> None:
    with pytest.raises(ConfigError) as info:
        load_config_mapping({**BASE, "node_source": "memory", "profiles": [WEB_ENTRY]})
    assert info.value.field == "profiles"


def test_a_valid_configuration_orders_its_profiles_most_specific_first() -> None:
    entries = [WEB_ENTRY, {"name": "web-a", "node_selector": {"match_labels": {"group": "web", ZONE: "a"}}}]
    config = load_config_mapping({**BASE, "profiles": entries, "node_defaults": {"pre_allocate": 4}})
    chosen = config.profile_set()
    assert [p.name for p in chosen.profiles] == ["web-a", "web"]
    assert chosen.choose({"group": "web", ZONE: "a"})[1] == NodeSpec(pre_allocate=4)


def test_the_examples_of_the_profiles_docs_are_valid_configurations() -> None:
    import re
    from pathlib import Path

    import yaml

    page = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text()
    section = page[page.index("## `profiles:`") :]
    section = section[: section.index("\n## ")]
    blocks = re.findall(r"```yaml\n(.*?)```", section, flags=re.DOTALL)
    assert len(blocks) == 2
    for block in blocks:
        config = load_config_mapping({**BASE, **yaml.safe_load(block)})
        assert config.profiles
    zonal = load_config_mapping({**BASE, **yaml.safe_load(blocks[1])}).profile_set()
    labels = {"eks.amazonaws.com/nodegroup": "web", ZONE: "us-east-1b"}
    name, spec = zonal.choose(labels)
    assert name == "web-us-east-1b" and spec is not None and spec.subnet_ids == ("subnet-0b2c3d4e5f6071829",)
