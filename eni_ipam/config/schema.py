"""The configuration layer: every input people write is typed and validated with this vocabulary.

One base (:class:`ConfigModel`, pydantic v2: strict, unknown keys refused, immutable, field
docstrings as descriptions), one set of field types (:data:`Duration`, :data:`Name`, :data:`Cidr`,
…; the domain's tags and token buckets are :mod:`eni_ipam.core.fields`) and one error type,
:class:`~eni_ipam.errors.ConfigError`, whose ``field`` is the path of the bad value
(``settings.gc_interval``, ``nodes[2].instance``). :func:`validate` turns pydantic's errors into it.
Files are read by :mod:`eni_ipam.config.files`.

This module sits below the domain (:mod:`eni_ipam.core` declares its settings and the node spec with
it) and knows nothing of it: no I/O, no domain type.

The models themselves live beside the code they configure: :mod:`eni_ipam.core.settings`,
:mod:`eni_ipam.core.spec` (the node spec), ``kube/settings.py``, ``agent/config.py``, each
provider's ``settings.py``, ``app/runconfig.py`` and ``simulator/scenario.py``. The choice of
pydantic and pydantic-settings is recorded in docs/decisions/0007-layers-and-configuration.md.

Invariants: a value that fails validation changes nothing (models are built whole or not at all);
booleans are never numbers and strings never numbers (strict mode); every message names the field.
"""

from __future__ import annotations

import ipaddress
import math
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
)
from pydantic_core import ErrorDetails

from eni_ipam.config.suggest import closest
from eni_ipam.errors import ConfigError

M = TypeVar("M", bound=BaseModel)


class ConfigModel(BaseModel):
    """Base of every configuration model: strict types, unknown keys refused, immutable."""

    model_config = ConfigDict(
        strict=True,
        extra="forbid",
        frozen=True,
        use_attribute_docstrings=True,
        arbitrary_types_allowed=True,
    )

    def replace(self: M, **changes: Any) -> M:
        """A validated copy with ``changes`` applied (``dataclasses.replace`` for models)."""
        return type(self).model_validate({**dict(self), **changes}, strict=False)


class FieldError(ValueError):
    """Raised by a model validator to blame one field (``field``, relative to the model)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


# -- field types ---------------------------------------------------------------------------------

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_duration(value: Any) -> float:
    """Seconds from a number or a string such as ``250ms``, ``30s``, ``5m``, ``1h``.

    Raises:
        ValueError: not a duration, not finite, too large, or negative (the message says which).
    """
    if isinstance(value, bool):
        raise ValueError(f"expected a duration such as 30s, 5m or 250ms, got {short(value)}")
    try:
        if isinstance(value, int | float):
            seconds = float(value)
        elif isinstance(value, str) and (m := _DURATION.match(value)):
            seconds = float(m.group(1)) * _UNITS[m.group(2)]
        else:
            raise ValueError(f"expected a duration such as 30s, 5m or 250ms, got {short(value)}")
    except OverflowError:
        raise ValueError("too large for a duration") from None
    if not math.isfinite(seconds):
        raise ValueError(f"expected a finite duration, got {short(value)}")
    if seconds < 0:
        raise ValueError("must not be negative")
    return seconds


def _positive(seconds: float) -> float:
    if seconds <= 0:
        raise ValueError("must be positive")
    return seconds


def _finite_positive(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"expected a positive number, got {short(value)}")
    try:
        number = float(value)
    except OverflowError:
        raise ValueError("too large") from None
    if not math.isfinite(number) or number <= 0:
        raise ValueError(f"expected a positive number, got {short(value)}")
    return number


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"expected a number, got {got(value)}")
    try:
        number = float(value)
    except OverflowError:
        raise ValueError("too large") from None
    if not math.isfinite(number):
        raise ValueError(f"expected a finite number, got {short(value)}")
    return number


def _network(raw: Any) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    if not isinstance(raw, str):
        raise ValueError(f"expected a CIDR such as 10.0.0.0/16, got {short(raw)}")
    try:
        return ipaddress.ip_network(raw, strict=True)
    except ValueError as exc:
        raise ValueError(f"not a CIDR ({exc})") from None


Duration = Annotated[float, BeforeValidator(parse_duration)]
"""Seconds, written as a number or as ``250ms``, ``30s``, ``5m``, ``1h``; never negative."""
PositiveDuration = Annotated[float, BeforeValidator(parse_duration), AfterValidator(_positive)]
"""A :data:`Duration` above zero."""
Number = Annotated[float, BeforeValidator(_number)]
"""A finite number (not a boolean)."""
PositiveNumber = Annotated[float, BeforeValidator(_finite_positive)]
"""A finite number above zero (rates, bucket sizes)."""
MAX_INT = 2**63 - 1
"""Largest integer a count setting takes (Kubernetes' and Go's int64): YAML reads a hexadecimal
number of any length, and a count of 20,000 bits would be accepted, then fail deep inside (a range
too large for a C integer) instead of naming its field."""
NonNegativeInt = Annotated[int, Field(ge=0, le=MAX_INT)]
PositiveInt = Annotated[int, Field(ge=1, le=MAX_INT)]
Cidr = Annotated[ipaddress.IPv4Network | ipaddress.IPv6Network, BeforeValidator(_network)]
"""An IPv4 or IPv6 network written as ``10.0.0.0/16`` (host bits refused)."""
Name = Annotated[str, Field(min_length=1)]
"""A non-empty string."""
Names = Annotated[tuple[Name, ...], Field(strict=False)]
"""A list of non-empty strings (kept as a tuple)."""
LOG_LEVELS = ("debug", "info", "warning", "error")
LogLevel = Literal["debug", "info", "warning", "error"]
"""How much the process logs (JSON lines when not on a terminal)."""


def check_names(value: Mapping[str, Any], check: Callable[[str], str | None]) -> Mapping[str, Any]:
    """Run ``check(name)`` on every key; a returned text is the error, blamed on that key."""
    for name in value:
        problem = check(name)
        if problem:
            raise FieldError(name, problem)
    return value


# -- validation and errors ---------------------------------------------------------------------


def nested(exc: ValidationError, *, prefix: str = "", data: Any = None) -> FieldError:
    """A validation error of a value (``data``) checked inside another model's validator, as a
    :class:`FieldError` for the outer model (its path under ``prefix``)."""
    inner = config_error(exc, data=data)
    return FieldError(join(prefix, inner.field) if inner.field else prefix, inner.message)


def validate(model: type[M], data: Any, *, path: str = "", by_alias: bool = False, context: Any = None) -> M:
    """``data`` validated as ``model``; ``path`` is where ``data`` sits in its document.

    Raises:
        ConfigError: the first problem, with ``field`` the full path of the bad value.
    """
    try:
        return model.model_validate(data, by_alias=by_alias, by_name=not by_alias, context=context)
    except ValidationError as exc:
        raise config_error(exc, path=path, model=model, by_alias=by_alias, data=data) from None


def config_error(
    exc: ValidationError,
    *,
    path: str = "",
    model: type[BaseModel] | None = None,
    by_alias: bool = False,
    data: Any = None,
) -> ConfigError:
    """The :class:`ConfigError` for the first error of ``exc`` (the one a reader meets first in the
    file; a misspelt key before the rest). :func:`config_errors` gives them all."""
    return config_errors(exc, path=path, model=model, by_alias=by_alias, data=data)[0]


def config_errors(
    exc: ValidationError,
    *,
    path: str = "",
    model: type[BaseModel] | None = None,
    by_alias: bool = False,
    data: Any = None,
) -> list[ConfigError]:
    """Every error of ``exc`` as a :class:`ConfigError`, one per field, the first one first.

    A misspelt key is reported as itself rather than as the key it should have been: it comes first,
    and the "required" of the key it is close to (``subnet_idd`` for ``subnet_id``) is left out,
    since its message already says ``did you mean 'subnet_id'?``."""
    errors = exc.errors(include_url=False)
    extra = [e for e in errors if e["type"] == "extra_forbidden"]
    ordered = extra + [e for e in errors if e["type"] != "extra_forbidden"]
    meant = {
        (tuple(e["loc"][:-1]), close)
        for e in extra
        if (close := closest(e["loc"][-1], _known_keys(model, list(e["loc"][:-1]), by_alias=by_alias)))
    }
    out: list[ConfigError] = []
    seen: set[str] = set()
    for error in ordered:
        if error["type"] == "missing" and (tuple(error["loc"][:-1]), error["loc"][-1]) in meant:
            continue
        found = _one(error, path=path, model=model, by_alias=by_alias, data=data)
        if found.field not in seen:  # a union's arms each blame the same field: once is enough
            seen.add(found.field)
            out.append(found)
    return out or [_one(errors[0], path=path, model=model, by_alias=by_alias, data=data)]


def _one(
    error: ErrorDetails, *, path: str, model: type[BaseModel] | None, by_alias: bool, data: Any
) -> ConfigError:
    loc = list(error["loc"])
    ctx = error.get("ctx") or {}
    cause = ctx.get("error")
    if isinstance(cause, FieldError):
        loc.extend(_parts(cause.field))
    if error["type"] in ("dict_type", "model_type", "mapping_type") and loc and loc[-1] == "[key]":
        loc.pop()
    field = join(path, *_keyed(loc, data))
    return ConfigError(field, message(error, model=model, loc=loc, by_alias=by_alias))


def did_you_mean(word: Any, known: Iterable[str]) -> str:
    """`` (did you mean 'pre_allocate'?)`` when ``word`` is close to one of ``known`` (a typo), else
    empty: the text to append to a message refusing ``word``."""
    close = closest(word, known)
    return f" (did you mean {close!r}?)" if close else ""


def _keyed(loc: list[Any], data: Any) -> list[Any]:
    """``loc`` with every integer that is a mapping's key (not a list's index) marked as a key, by
    following the input ``data`` (pydantic writes both as plain integers)."""
    out: list[Any] = []
    current = data
    for part in loc:
        if isinstance(part, int) and isinstance(current, Mapping):
            out.extend((part, "[key]"))  # ``.0`` rather than ``[0]``
        else:
            out.append(part)
        try:
            current = current[part] if current is not None and part != "[key]" else None
        except (KeyError, IndexError, TypeError):
            current = None
    return out


_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def _parts(field: str) -> list[str | int]:
    """``subnets[0].cidr`` → ["subnets", 0, "cidr"] (the inverse of :func:`join`)."""
    return [int(index) if index else name for name, index in _PART.findall(field)]


def join(path: str, *loc: Any) -> str:
    """``nodes`` + (2, "instance") → ``nodes[2].instance``."""
    out = path
    for n, part in enumerate(loc):
        if part == "[key]":
            continue
        if isinstance(part, int) and not (n + 1 < len(loc) and loc[n + 1] == "[key]"):
            out += f"[{part}]"  # a list index (an integer key of a mapping is a key like any other)
        else:
            text = str(part) or "''"  # an empty key, shown as one
            out = f"{out}.{text}" if out else text
    return out


def message(
    error: ErrorDetails,
    *,
    model: type[BaseModel] | None = None,
    loc: list[Any] | None = None,
    by_alias: bool = False,
) -> str:
    """One pydantic error in the project's words (``expected an integer, got str 'eight'``)."""
    kind_ = error["type"]
    value = error.get("input")
    ctx = error.get("ctx") or {}
    if "error" in ctx:
        return str(ctx["error"].message if isinstance(ctx["error"], FieldError) else ctx["error"])
    if kind_ == "missing":
        return "required"
    if kind_ == "extra_forbidden":
        key = short((loc or [""])[-1])
        known = _known_keys(model, (loc or [])[:-1], by_alias=by_alias)
        hint = did_you_mean((loc or [""])[-1], known)
        return f"unknown key {key}{hint} (known: {', '.join(known)})" if known else f"unknown key {key}"
    if kind_ in ("int_type", "int_parsing", "int_from_float"):
        return f"expected an integer, got {got(value)}"
    if kind_ in ("bool_type", "bool_parsing"):
        return f"expected true or false, got {short(value)}"
    if kind_ in ("float_type", "float_parsing"):
        return f"expected a number, got {got(value)}"
    if kind_ in ("string_type", "string_sub_type"):
        return f"expected a string, got {got(value)}"
    if kind_ == "string_too_short":
        return f"expected a non-empty string, got {short(value)}"
    if kind_ == "string_too_long":
        return f"at most {ctx.get('max_length')} characters, got {len(str(value))}"
    if kind_ in ("dict_type", "model_type", "mapping_type", "model_attributes_type", "dataclass_type"):
        return f"expected a mapping, got {kind(value)}"
    if kind_ in ("list_type", "tuple_type", "iterable_type", "set_type", "frozen_set_type"):
        return f"expected a list, got {kind(value)}"
    if kind_ == "greater_than_equal":
        bound = ctx.get("ge")
        if bound == 0:
            return f"must not be negative (at least 0), got {short(value)}"
        return f"must be at least {bound}, got {short(value)}"
    if kind_ == "greater_than":
        return f"must be greater than {ctx.get('gt')}, got {short(value)}"
    if kind_ == "less_than_equal":
        return f"must be at most {ctx.get('le')}, got {short(value)}"
    if kind_ == "less_than":
        return f"must be less than {ctx.get('lt')}, got {short(value)}"
    if kind_ == "literal_error":
        expected = ctx.get("expected")
        hint = did_you_mean(value, re.findall(r"'([^']*)'", str(expected)))
        return f"expected one of {expected}, got {short(value)}{hint}"
    if kind_ == "too_short":
        return f"expected at least {ctx.get('min_length')} item(s)"
    if kind_ == "too_long":
        return f"expected at most {ctx.get('max_length')} items, got {ctx.get('actual_length')}"
    return str(error["msg"])


def _known_keys(model: type[BaseModel] | None, loc: list[Any], *, by_alias: bool) -> list[str]:
    """The keys the model at ``loc`` accepts (for "unknown key" messages), or [] when not a model."""
    current: Any = model
    for part in loc:
        if isinstance(part, int):
            continue
        fields = getattr(current, "model_fields", None)
        if fields is None:
            return []
        field = next((f for n, f in fields.items() if (f.alias or n) == part or n == part), None)
        if field is None:
            return []
        current = _model_of(field.annotation)
    fields = getattr(current, "model_fields", None)
    if not fields:
        return []
    return sorted((f.alias or n) if by_alias else n for n, f in fields.items())


def _model_of(annotation: Any) -> Any:
    """The model class inside ``annotation`` (``Model``, ``Model | None``, ``tuple[Model, ...]``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _model_of(arg)
        if found is not None:
            return found
    return None


def kind(value: Any) -> str:
    """A value's type as people read it: ``str``, ``int``, ``nothing``."""
    return "nothing" if value is None else type(value).__name__


def got(value: Any) -> str:
    """A bad value for a message: ``str 'eight'``, ``int 12345``, ``nothing``."""
    return "nothing" if value is None else f"{kind(value)} {short(value)}"


def short(value: Any) -> str:
    """``repr`` of a bad value, cut short: an error names the field, it does not echo a megabyte
    (nor turns an integer of thousands of digits into text, which Python refuses)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 256:
        return f"an integer of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
