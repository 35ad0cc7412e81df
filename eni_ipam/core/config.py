"""Operator-wide settings: frozen, validated, every default justified.

The same names are used in the run configuration, scenario files (``settings:``) and, later, the
Helm chart. :func:`settings_from_mapping` is the one parser: it rejects unknown keys and bad values
with a :class:`~eni_ipam.core.errors.ConfigError` naming the field, and never half-applies anything.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from eni_ipam.core.errors import ConfigError
from eni_ipam.core.model import EMPTY_TAGS, Tags, frozen_tags
from eni_ipam.core.ratelimit import Bucket


@dataclasses.dataclass(frozen=True, kw_only=True)
class Settings:
    release_excess_ips: bool = False
    """Release addresses above the watermarks. Off by default, as in the reference systems: releasing
    costs API calls and risks churn, while holding a few spare addresses costs nothing."""

    excess_ip_release_delay: float = 180.0
    """Seconds an address must stay continuously excess before it is marked for release, so a node
    whose pods churn does not give back addresses it is about to need again."""

    prefix_delegation: bool = False
    """Allocate /28 prefixes (16 addresses a slot) on Nitro instances. Off by default because it
    needs subnets with free aligned /28 blocks, which fragmented subnets often lack."""

    parallel_workers: int = 50
    """Nodes maintained at once. Bounds memory and concurrent cloud calls; the per-operation rate
    limiter, not this, is what protects the cloud's API budget."""

    resync_interval: float = 60.0
    """Seconds between full resyncs: the safety net that catches changes made outside eni-ipam."""

    trigger_min_interval: float = 0.01
    """Minimum seconds between two maintenance passes of one node; events in between fold into one."""

    backoff_initial: float = 1.0
    """First retry delay of a node whose maintenance failed (doubles per failure, jittered)."""

    backoff_max: float = 300.0
    """Retry delay cap: a broken node is retried at least every five minutes."""

    cluster_name: str = "default"
    """Written to every interface eni-ipam creates, so garbage collection only ever touches its own."""

    interface_tags: Tags = EMPTY_TAGS
    """Extra tags for created interfaces (cost allocation, ownership)."""

    rate_limit_share: float = 1.0
    """Fraction of each cloud API bucket this controller may spend (lower it when other controllers
    share the account)."""

    gc_interval: float = 300.0
    """Seconds between garbage-collection runs; an interface must stay detached a whole interval
    (marked in one run, deleted in the next) before it is deleted. 0 turns garbage collection off
    (for a second controller sharing the cluster tag, which must not collect twice)."""

    gc_max_per_run: int = 25
    """Interfaces marked per garbage-collection run, to bound the DeleteNetworkInterface burst."""


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_duration(value: Any, field: str) -> float:
    """Seconds from a number or a string like ``"180s"``, ``"5m"``, ``"250ms"``."""
    if isinstance(value, bool):
        raise ConfigError(field, f"expected a duration, got {value!r}")
    try:
        if isinstance(value, int | float):
            seconds = float(value)
        elif isinstance(value, str) and (m := _DURATION.match(value)):
            seconds = float(m.group(1)) * _UNITS[m.group(2)]
        else:
            raise ConfigError(field, f"expected a duration such as 30s, 5m or 250ms, got {_short(value)}")
    except OverflowError:
        raise ConfigError(field, "too large for a duration") from None
    if not math.isfinite(seconds):
        raise ConfigError(field, f"expected a finite duration, got {value!r}")
    if seconds < 0:
        raise ConfigError(field, "must not be negative")
    return seconds


def parse_positive(field: str, raw: Any) -> float:
    """A finite number above zero (not a boolean): rates, bucket sizes."""
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise ConfigError(field, f"expected a positive number, got {_short(raw)}")
    try:
        value = float(raw)
    except OverflowError:
        raise ConfigError(field, "too large") from None
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(field, f"expected a positive number, got {raw!r}")
    return value


def parse_buckets(
    field: str, raw: Any, *, check_name: Callable[[str, Any], None], names: str = "operation"
) -> Mapping[str, Bucket]:
    """Token buckets by name, ``{name: {burst: N, refill: N}}``; ``check_name(where, name)`` raises
    ConfigError for a name the caller does not know."""
    if not isinstance(raw, Mapping):
        raise ConfigError(field, f"expected a mapping of {names} to {{burst, refill}}, got {_short(raw)}")
    out: dict[str, Bucket] = {}
    for name, spec in raw.items():
        where = f"{field}.{name}"
        check_name(where, name)
        if not isinstance(spec, Mapping) or set(spec) != {"burst", "refill"}:
            raise ConfigError(where, f"expected {{burst: N, refill: N}}, got {_short(spec)}")
        out[name] = Bucket(
            burst=parse_positive(f"{where}.burst", spec["burst"]),
            refill=parse_positive(f"{where}.refill", spec["refill"]),
        )
    return MappingProxyType(out)


def _short(value: Any) -> str:
    """``repr`` of a bad value, cut short: an error names the field, it does not echo a megabyte."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def parse_bool(field: str, raw: Any) -> bool:
    """``raw`` if it is a YAML boolean (not ``"yes"``, not 1)."""
    if not isinstance(raw, bool):
        raise ConfigError(field, f"expected true or false, got {raw!r}")
    return raw


def parse_int(field: str, raw: Any, *, minimum: int | None = None) -> int:
    """``raw`` if it is an integer (not a boolean), at least ``minimum`` when given."""
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise ConfigError(field, f"expected an integer, got {raw!r}")
    if minimum is not None and raw < minimum:
        raise ConfigError(field, f"expected an integer of at least {minimum}, got {raw!r}")
    return raw


def parse_tags(field: str, raw: Any) -> Tags:
    """An immutable string → string mapping."""
    if not isinstance(raw, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in raw.items()
    ):
        raise ConfigError(field, f"expected a mapping of strings to strings, got {raw!r}")
    return frozen_tags(raw)


MAX_DEPTH = 64
"""Deepest nesting accepted in a YAML document: no configuration or scenario comes near it."""
MAX_NODES = 1_000_000
"""Most values accepted in one document (a large scenario has some thousands)."""


def load_yaml_file(path: str | Path) -> Any:
    """The YAML document in ``path``, checked to be plain data (see :func:`plain_data_problem`).

    Raises:
        ValueError: why it cannot be used: unreadable, not UTF-8, not YAML, nested too deeply, or
            referring to itself.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path} is not UTF-8 text (byte {exc.start})") from None
    return load_yaml_text(text, what=str(path))


def load_yaml_text(text: str, *, what: str) -> Any:
    """``text`` parsed as YAML and checked to be plain data. Raises ValueError as :func:`load_yaml_file`."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(f"{what} is not valid YAML: {exc}") from None
    except RecursionError:
        raise ValueError(f"{what} is nested too deeply") from None
    problem = plain_data_problem(data)
    if problem:
        raise ValueError(f"{what} {problem}")
    return data


def plain_data_problem(data: Any) -> str:
    """Why ``data`` is not a finite tree of at most :data:`MAX_DEPTH` levels and :data:`MAX_NODES`
    values once aliases are expanded (a YAML alias can make a document refer to itself, or
    multiply it), or ``""``. Each shared value is visited once: the check is linear in the file."""
    on_path: set[int] = set()
    size: dict[int, int] = {}
    # Depth-first, with an explicit "leave" step so ``on_path`` holds exactly the current branch and
    # a value's expanded size is known once its children's are.
    stack: list[tuple[Any, int, bool]] = [(data, 0, False)]
    while stack:
        value, depth, leaving = stack.pop()
        if not isinstance(value, Mapping | list):
            continue
        children = list(value.values()) if isinstance(value, Mapping) else value
        if leaving:
            on_path.discard(id(value))
            size[id(value)] = 1 + sum(size.get(id(c), 1) for c in children)
            if size[id(value)] > MAX_NODES:
                return f"expands to more than {MAX_NODES} values (aliases multiplying it)"
            continue
        if id(value) in on_path:
            return "refers to itself (a YAML alias inside its own anchor)"
        if depth >= MAX_DEPTH:
            return f"is nested more than {MAX_DEPTH} levels deep"
        if id(value) in size:
            continue  # shared by aliases, already measured
        on_path.add(id(value))
        stack.append((value, depth, True))
        stack.extend((child, depth + 1, False) for child in children)
    return ""


def read_config_file(path: str | Path) -> Any:
    """The YAML document in ``path`` (``{}`` for an empty file).

    Raises:
        ConfigError: ``--config``: the file cannot be read, is not UTF-8 YAML, or is not plain data.
    """
    try:
        data = load_yaml_file(path)
    except ValueError as exc:
        raise ConfigError("--config", str(exc)) from None
    return {} if data is None else data


def section_items(data: Any, path: str, known: Collection[str]) -> list[tuple[str, str, Any]]:
    """``(key, field, raw value)`` for every entry of a settings section (``field`` = ``path.key``,
    or ``key`` for the top of a file, ``path`` empty).

    Raises:
        ConfigError: the section is not a mapping, or a key is unknown.
    """
    if data is None:
        return []
    if not isinstance(data, Mapping):
        raise ConfigError(path or "config", f"expected a mapping, got {type(data).__name__}")
    items = []
    for key, raw in data.items():
        field = f"{path}.{key}" if path else str(key)
        if key not in known:
            raise ConfigError(field, f"unknown setting (known: {', '.join(sorted(known))})")
        items.append((key, field, raw))
    return items


def _check(field: str, value: Any, kind: type, raw: Any) -> Any:
    if kind is bool:
        return parse_bool(field, raw)
    if kind is int:
        return parse_int(field, raw)
    if kind is str:
        if not isinstance(raw, str) or not raw:
            raise ConfigError(field, f"expected a non-empty string, got {raw!r}")
        return raw
    if kind is Tags:
        return parse_tags(field, raw)
    return value


def settings_from_mapping(data: Mapping[str, Any] | None, *, path: str = "settings") -> Settings:
    """Build :class:`Settings` from plain data (YAML), validating every key.

    Raises:
        ConfigError: unknown key or invalid value; ``field`` is ``path.key``.
    """
    fields = {f.name: f for f in dataclasses.fields(Settings)}
    values: dict[str, Any] = {}
    for key, field, raw in section_items(data, path, fields):
        default = fields[key].default
        if isinstance(default, float):
            values[key] = (
                parse_duration(raw, field)
                if "interval" in key or "delay" in key or "backoff" in key
                else _number(field, raw)
            )
        else:
            values[key] = _check(field, raw, type(default), raw)
    settings = Settings(**values)
    _validate(settings, path)
    return settings


def _number(field: str, raw: Any) -> float:
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise ConfigError(field, f"expected a number, got {raw!r}")
    return float(raw)


def _validate(s: Settings, path: str) -> None:
    if s.parallel_workers < 1:
        raise ConfigError(f"{path}.parallel_workers", "must be at least 1")
    if not 0 < s.rate_limit_share <= 1:
        raise ConfigError(f"{path}.rate_limit_share", "must be in (0, 1]")
    if s.resync_interval <= 0:
        raise ConfigError(f"{path}.resync_interval", "must be positive")
    if s.backoff_initial <= 0 or s.backoff_max < s.backoff_initial:
        raise ConfigError(f"{path}.backoff_max", "must be at least backoff_initial, which must be positive")
    if s.gc_max_per_run < 0:
        raise ConfigError(f"{path}.gc_max_per_run", "must not be negative")
