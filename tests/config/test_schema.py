"""The configuration layer: one duration type, one YAML reader, one error naming the field."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Literal

import pytest
from pydantic import ValidationError

from eni_ipam.app.runconfig import load_config
from eni_ipam.config.files import load_yaml_file, load_yaml_text, read_config_file
from eni_ipam.config.schema import ConfigModel, closest, config_error, config_errors, parse_duration, validate
from eni_ipam.core.fields import LooseTagMap, TagMap
from eni_ipam.core.model import EMPTY_TAGS
from eni_ipam.core.settings import MAX_EXTRA_TAGS, Settings
from eni_ipam.errors import ConfigError, ConfigErrors, combine
from eni_ipam.simulator.scenario import ScenarioError


def test_empty_settings_are_the_documented_defaults() -> None:
    s = validate(Settings, {})
    assert s == Settings()
    assert (s.release_excess_ips, s.excess_ip_release_delay, s.prefix_delegation, s.parallel_workers) == (
        False,
        180.0,
        False,
        50,
    )


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("180s", 180), ("5m", 300), ("250ms", 0.25), ("1h", 3600), (7, 7), ("90", 90), (1.5, 1.5)],
)
def test_durations_accept_numbers_and_units(text: object, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["1d", "soon", True, -1, float("nan"), 10**400, "", None])
def test_bad_durations_are_refused(text: object) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


@pytest.mark.parametrize(
    ("data", "field", "words"),
    [
        ({"parallel_workers": "many"}, "settings.parallel_workers", "expected an integer, got str 'many'"),
        ({"parallel_workers": 0}, "settings.parallel_workers", "at least 1"),
        ({"parallel_workers": True}, "settings.parallel_workers", "expected an integer, got bool"),
        ({"excess_ip_release_delay": "soon"}, "settings.excess_ip_release_delay", "such as 30s"),
        ({"excess_ip_release_delay": -1}, "settings.excess_ip_release_delay", "negative"),
        ({"rate_limit_share": 2}, "settings.rate_limit_share", "(0, 1]"),
        ({"prefix_delegation": "yes"}, "settings.prefix_delegation", "true or false"),
        ({"interface_tags": {"a": 1}}, "settings.interface_tags.a", "expected a string"),
        ({"interface_tags": ["a"]}, "settings.interface_tags", "expected a mapping"),
        ({"unknown": 1}, "settings.unknown", "unknown key 'unknown' (known: backoff_initial"),
        ({"backoff_initial": "10s", "backoff_max": "5s"}, "settings.backoff_max", "backoff_initial"),
        ({"cluster_name": ""}, "settings.cluster_name", "non-empty"),
    ],
)
def test_bad_values_name_the_field_and_what_is_wrong(data: dict, field: str, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        validate(Settings, data, path="settings")
    assert info.value.field == field
    assert words in info.value.message


def test_values_are_applied() -> None:
    s = validate(
        Settings, {"release_excess_ips": True, "excess_ip_release_delay": "5s", "interface_tags": {"a": "b"}}
    )
    assert s.release_excess_ips and s.excess_ip_release_delay == 5.0 and dict(s.interface_tags) == {"a": "b"}


def test_more_interface_tags_than_ec2_allows_are_refused() -> None:
    tags = {f"team-{n}": "x" for n in range(MAX_EXTRA_TAGS + 1)}
    with pytest.raises(ConfigError) as info:
        validate(Settings, {"interface_tags": tags}, path="settings")
    assert info.value.field == "settings.interface_tags" and "EC2 allows 50" in info.value.message
    assert len(
        validate(Settings, {"interface_tags": dict(list(tags.items())[:MAX_EXTRA_TAGS])}).interface_tags
    )


def test_a_copy_with_changes_is_validated_too() -> None:
    s = Settings(parallel_workers=3)
    assert (
        s.replace(gc_interval="2m").gc_interval == 120.0 and s.replace(gc_interval="2m").parallel_workers == 3
    )
    with pytest.raises(ValueError):
        s.replace(parallel_workers=0)


class _Tags(ConfigModel):
    strict: TagMap = EMPTY_TAGS
    loose: LooseTagMap = EMPTY_TAGS


def test_number_tag_values_are_text_only_where_files_are_loose() -> None:
    assert dict(validate(_Tags, {"loose": {"rack": 12}}).loose) == {"rack": "12"}
    with pytest.raises(ConfigError) as info:
        validate(_Tags, {"strict": {"rack": 12}})
    assert info.value.field == "strict.rack"
    with pytest.raises(ConfigError) as info:
        validate(_Tags, {"loose": {"rack": {"nested": 1}}})
    assert info.value.field == "loose.rack"


def test_scenario_errors_are_config_errors() -> None:
    assert ScenarioError is ConfigError
    assert ConfigError("steps[0]", "x").path == "steps[0]"
    assert str(ConfigError("", "whole file")) == "whole file"


# -- YAML ------------------------------------------------------------------------------------------


def test_a_key_written_twice_is_refused_with_its_lines(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("provider: sim\nsettings:\n  gc_interval: 1m\n  gc_interval: 2m\n")
    with pytest.raises(ValueError) as info:
        load_yaml_file(path)
    assert "duplicate key 'gc_interval' (line 4; first on line 3)" in str(info.value)
    with pytest.raises(ConfigError) as caught:
        read_config_file(path)
    assert caught.value.field == "--config" and "duplicate key 'gc_interval'" in caught.value.message


def test_a_key_written_twice_in_a_list_entry_is_refused() -> None:
    with pytest.raises(ValueError, match="duplicate key 'name'"):
        load_yaml_text("nodes:\n  - {name: a, name: b}\n", what="x")


def test_base_60_numbers_are_strings_a_numeric_field_then_refuses_by_name(tmp_path: Path) -> None:
    # YAML 1.1 read 1:30 as 90 (and a long one in quadratic time); YAML 1.2 has no such numbers.
    assert load_yaml_text("a: 1:30\nb: 0x1f\ne: -1.5\nf: .inf\n", what="x") == {
        "a": "1:30",
        "b": 31,
        "e": -1.5,
        "f": float("inf"),
    }
    assert load_yaml_text("a: 1" + ":1" * 100_000, what="x")["a"].startswith("1:1:1")
    path = tmp_path / "config.yaml"
    path.write_text("provider: aws\naws:\n  region: us-east-1\n  max_results: 1:30\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ={})
    assert caught.value.field == "aws.max_results" and "'1:30'" in caught.value.message


def test_an_integer_of_thousands_of_digits_is_refused_naming_its_field(tmp_path: Path) -> None:
    # Python refuses to turn an integer of over 4,300 digits into text: the message must not try.
    path = tmp_path / "config.yaml"
    path.write_text("provider: aws\naws:\n  region: us-east-1\n  max_results: 0x" + "f" * 4000 + "\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ={})
    assert caught.value.field == "aws.max_results"
    assert "an integer of 16000 bits" in caught.value.message
    path.write_text("provider: aws\naws:\n  region: us-east-1\n  max_results: " + "9" * 5000 + "\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ={})
    assert "an integer of 5000 digits" in caught.value.message and "line 4" in caught.value.message


def test_yaml_syntax_errors_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("provider: [unclosed\n")
    with pytest.raises(ValueError) as info:
        load_yaml_file(path)
    assert str(path) in str(info.value).split("not valid YAML", 1)[1]
    assert "<unicode string>" not in str(info.value)


def test_a_yaml_alias_bomb_is_refused_at_once() -> None:
    levels = "".join(f"l{n + 1}: &l{n + 1} [{', '.join([f'*l{n}'] * 9)}]\n" for n in range(12))
    started = time.perf_counter()
    with pytest.raises(ValueError, match="expands to more than"):
        load_yaml_text("l0: &l0 [1, 2, 3, 4, 5, 6, 7, 8, 9]\n" + levels, what="bomb")
    assert time.perf_counter() - started < 5  # linear in the file, not in what it expands to


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("017", 17),  # decimal in YAML 1.2 (YAML 1.1's octal 15)
        ("0o17", 15),  # YAML 1.2's octal
        ("0x1f", 31),
        ("-12", -12),
        ("+12", 12),
        ("0b11", "0b11"),  # YAML 1.1's binary: a string
        ("1_000", "1_000"),  # YAML 1.1's underscores: a string
        ("0x_1", "0x_1"),
        ("-0x1", "-0x1"),  # YAML 1.2 signs only decimals
        ("1:30", "1:30"),
        ("1e3", 1000.0),  # YAML 1.2 needs no dot before the exponent
        ("1.", 1.0),
        (".5", 0.5),
        ("-.INF", float("-inf")),
        ("yes", "yes"),  # YAML 1.1's booleans: strings
        ("no", "no"),
        ("on", "on"),
        ("True", True),
        ("FALSE", False),
    ],
)
def test_numbers_and_booleans_are_read_exactly_as_yaml_1_2_reads_them(text: str, value: object) -> None:
    read = load_yaml_text(f"a: {text}\n", what="x")["a"]
    assert read == value and type(read) is type(value)


def test_a_tagged_integer_yaml_1_2_cannot_write_is_refused_with_its_line() -> None:
    with pytest.raises(ValueError, match=r"'0b1' is not an integer as YAML 1\.2 writes one"):
        load_yaml_text("a: 1\nb: !!int 0b1\n", what="x")


class _Section(ConfigModel):
    subnet_id: str
    count: int = 0
    mode: Literal["fast", "safe"] = "safe"


def test_config_errors_lists_every_error_the_misspelt_key_first() -> None:
    try:
        _Section.model_validate({"count": "x", "mode": "quick", "subnet_idd": "s-1"})
    except ValidationError as exc:
        errors = config_errors(exc, path="section", model=_Section)
        first = config_error(exc, path="section", model=_Section)
    assert [e.field for e in errors] == ["section.subnet_idd", "section.count", "section.mode"]
    assert (first.field, first.message) == (errors[0].field, errors[0].message)
    # the "required" of the key the typo is close to says nothing the typo's message does not
    assert "did you mean 'subnet_id'?" in errors[0].message
    assert "did you mean 'fast'?" not in errors[2].message  # 'quick' is close to neither


def test_a_literal_close_to_a_choice_names_it() -> None:
    with pytest.raises(ConfigError) as caught:
        validate(_Section, {"subnet_id": "s", "mode": "saf"})
    assert caught.value.message == "expected one of 'fast' or 'safe', got 'saf' (did you mean 'safe'?)"


@pytest.mark.parametrize(
    ("word", "meant"),
    [("pre_alocate", "pre_allocate"), ("M5.Large", "m5.large"), ("colour", None), (3, None)],
)
def test_closest_is_a_typo_or_a_case_away(word: object, meant: str | None) -> None:
    assert closest(word, ["pre_allocate", "min_allocate", "m5.large", "m5.xlarge"]) == meant


def test_several_errors_keep_the_first_ones_field_and_message_and_print_one_per_line() -> None:
    errors = ConfigErrors(
        [ConfigError("a", "one"), ConfigErrors([ConfigError("b", "two"), ConfigError("c", "x")])]
    )
    assert (errors.field, errors.message) == ("a", "one")
    assert [e.field for e in errors.errors] == ["a", "b", "c"]
    assert str(errors) == "a: one\nb: two\nc: x"
    assert combine([]) is None
    one = ConfigError("a", "one")
    assert combine([one]) is one
