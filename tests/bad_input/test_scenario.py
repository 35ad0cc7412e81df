"""Scenario files (``eni-ipam simulate``): every bad document or file is a
:class:`~eni_ipam.simulator.scenario.ScenarioError` naming the offending key's path, raised before
anything runs, and the caller's document is left as it was."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings

from eni_ipam.simulator.scenario import Scenario, ScenarioError, load_scenario, parse_scenario
from tests.bad_input import corpus
from tests.bad_input.mutations import mutated, truncated

EXAMPLES_DIR = Path(__file__).parents[2] / "examples" / "scenarios"
EXAMPLES = sorted(EXAMPLES_DIR.glob("*.yaml"))
SEED_TEXTS = [path.read_text(encoding="utf-8") for path in EXAMPLES]
SEEDS = [yaml.safe_load(text) for text in SEED_TEXTS]
"""The example scenarios (cloud and generic ones): valid documents the fuzzing starts from."""

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _check(error: ScenarioError, expect: dict[str, Any]) -> None:
    assert isinstance(error.path, str) and error.message
    assert str(error) == (f"{error.path}: {error.message}" if error.path else error.message)
    corpus.check_named(error.path, str(error), expect, key="path", contains="message_contains")


@pytest.mark.parametrize("case", corpus.params("scenario", lambda case: case.has("input")))
def test_a_bad_scenario_document_is_refused_naming_the_path_and_left_unchanged(case: corpus.Case) -> None:
    document = case.data["input"]
    before = repr(document)
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(document)
    _check(caught.value, case.expect)
    assert repr(document) == before


@pytest.mark.parametrize("case", corpus.params("scenario"))
def test_a_bad_scenario_file_is_refused_naming_the_path(case: corpus.Case, tmp_path: Path) -> None:
    path = case.write(tmp_path / "scenario.yaml", allow_unicode=True)
    before = path.read_bytes()
    with pytest.raises(ScenarioError) as caught:
        load_scenario(path)
    _check(caught.value, case.expect)
    assert path.read_bytes() == before


def test_parsing_a_cloud_change_leaves_the_callers_document_unchanged() -> None:
    document = yaml.safe_load((EXAMPLES_DIR / "basics.yaml").read_text(encoding="utf-8"))
    document["steps"] = [{"cloud": {"subnets": {"s-1": {"available": 3, "tags": {"rack": 7}}}}}]
    before = repr(document)
    parse_scenario(document)
    assert repr(document) == before


def test_every_example_scenario_is_a_valid_fuzzing_seed() -> None:
    assert len(SEEDS) >= 17
    assert any("generic" in seed for seed in SEEDS) and any("cloud" in seed for seed in SEEDS)
    for seed in SEEDS:
        before = repr(seed)
        assert isinstance(parse_scenario(seed), Scenario)
        assert repr(seed) == before


def _parses_or_refuses(load: Any, *args: Any) -> None:
    try:
        scenario = load(*args)
    except ScenarioError as error:
        assert isinstance(error.path, str) and error.message
    else:
        assert isinstance(scenario, Scenario)
        assert (scenario.generic is None) != (scenario.cloud is None)


@FUZZ
@given(document=mutated(SEEDS))
def test_a_mutated_scenario_parses_or_is_refused_with_a_scenario_error(document: Any) -> None:
    before = repr(document)
    _parses_or_refuses(parse_scenario, document)
    assert repr(document) == before


@FUZZ
@given(text=truncated(SEED_TEXTS))
def test_a_truncated_scenario_file_parses_or_is_refused_with_a_scenario_error(
    text: str, tmp_path: Path
) -> None:
    path = tmp_path / "scenario.yaml"
    path.write_text(text, encoding="utf-8")
    _parses_or_refuses(load_scenario, path)
