"""Settings parsing: defaults, durations, and errors that name the field."""

import pytest

from eni_ipam.core.config import Settings, parse_duration, settings_from_mapping
from eni_ipam.core.errors import ConfigError


def test_empty_settings_are_the_documented_defaults():
    s = settings_from_mapping(None)
    assert s == Settings()
    assert (s.release_excess_ips, s.excess_ip_release_delay, s.prefix_delegation, s.parallel_workers) == (
        False,
        180.0,
        False,
        50,
    )


@pytest.mark.parametrize(
    ("text", "seconds"), [("180s", 180), ("5m", 300), ("250ms", 0.25), ("1h", 3600), (7, 7)]
)
def test_durations(text, seconds):
    assert parse_duration(text, "x") == seconds


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"parallel_workers": "many"}, "settings.parallel_workers"),
        ({"parallel_workers": 0}, "settings.parallel_workers"),
        ({"excess_ip_release_delay": "soon"}, "settings.excess_ip_release_delay"),
        ({"excess_ip_release_delay": -1}, "settings.excess_ip_release_delay"),
        ({"rate_limit_share": 2}, "settings.rate_limit_share"),
        ({"prefix_delegation": "yes"}, "settings.prefix_delegation"),
        ({"interface_tags": {"a": 1}}, "settings.interface_tags"),
        ({"unknown": 1}, "settings.unknown"),
    ],
)
def test_bad_values_name_the_field(data, field):
    with pytest.raises(ConfigError) as info:
        settings_from_mapping(data)
    assert info.value.field == field


def test_values_are_applied():
    s = settings_from_mapping(
        {"release_excess_ips": True, "excess_ip_release_delay": "5s", "interface_tags": {"a": "b"}}
    )
    assert s.release_excess_ips and s.excess_ip_release_delay == 5.0 and dict(s.interface_tags) == {"a": "b"}


def test_a_yaml_alias_bomb_is_refused_at_once() -> None:
    import time

    from eni_ipam.core.config import load_yaml_text

    levels = "".join(f"l{n + 1}: &l{n + 1} [{', '.join([f'*l{n}'] * 9)}]\n" for n in range(12))
    started = time.perf_counter()
    with pytest.raises(ValueError, match="expands to more than"):
        load_yaml_text("l0: &l0 [1, 2, 3, 4, 5, 6, 7, 8, 9]\n" + levels, what="bomb")
    assert time.perf_counter() - started < 5  # linear in the file, not in what it expands to
