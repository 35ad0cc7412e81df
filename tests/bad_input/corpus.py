"""The bad-input corpus: one YAML file per malformed input under ``corpus/<surface>/``, each carrying its
expected outcome (the format is in README.md).

:func:`params` turns a surface's files into ``pytest.param`` objects (id: the file's stem; an ``xfail``
key becomes a strict xfail mark); :func:`check_named` asserts that an error names what the case expects.
A malformed corpus file is an error here, not a silently skipped case.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

CORPUS = Path(__file__).parent / "corpus"

COMMON_KEYS = frozenset({"description", "expect", "xfail"})
SURFACES: Mapping[str, frozenset[str]] = {
    "runconfig": frozenset({"input", "text", "bytes", "env"}),
    "scenario": frozenset({"input", "text", "bytes"}),
    "enipool": frozenset({"write", "input", "text"}),
    "cni": frozenset({"env", "stdin", "stdin_text", "stdin_bytes"}),
    "libnetwork": frozenset({"method", "body", "text", "bytes"}),
    "agentconfig": frozenset({"input", "text", "bytes", "path"}),
}
"""Surface → the input keys its files may carry (besides description, expect and xfail)."""

EXPECT_KEYS: Mapping[str, frozenset[str]] = {
    "runconfig": frozenset({"field", "message_contains"}),
    "scenario": frozenset({"path", "message_contains"}),
    "enipool": frozenset({"api", "convert"}),
    "cni": frozenset({"code", "msg_contains", "version"}),
    "libnetwork": frozenset({"status", "err_contains"}),
    "agentconfig": frozenset({"field", "message_contains"}),
}

MIN_CASES = 12
"""Each surface holds at least this many distinct defects."""


@dataclasses.dataclass(frozen=True)
class Case:
    surface: str
    name: str
    path: Path
    data: Mapping[str, Any]

    @property
    def expect(self) -> Mapping[str, Any]:
        expect: Mapping[str, Any] = self.data["expect"]
        return expect

    def has(self, key: str) -> bool:
        return key in self.data

    def text(self, key: str) -> str:
        """The raw text under ``key``, with a ``{repeat, times, prefix?, suffix?}`` mapping expanded."""
        return expand(self.data[key])

    def write(self, path: Path, **dump: Any) -> Path:
        """The case as the file a loader reads: ``bytes`` or ``text`` as they are, else ``input``
        dumped as YAML (``dump``: options of ``yaml.safe_dump``). Returns ``path``."""
        if self.has("bytes"):
            path.write_bytes(self.data["bytes"])
        elif self.has("text"):
            path.write_text(self.text("text"), encoding="utf-8")
        else:
            path.write_text(yaml.safe_dump(self.data["input"], **dump), encoding="utf-8")
        return path

    def __repr__(self) -> str:
        return f"{self.surface}/{self.name}"


def expand(value: Any) -> str:
    """Text as written in a corpus file: a string, or ``{repeat: S, times: N, prefix: P, suffix: Q}``
    for inputs too large to write out (deep nesting, huge strings)."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) and set(value) <= {"repeat", "times", "prefix", "suffix"}:
        return (
            str(value.get("prefix", ""))
            + str(value["repeat"]) * int(value["times"])
            + str(value.get("suffix", ""))
        )
    raise ValueError(f"expected text or a repeat directive, got {value!r}")


def load(surface: str) -> list[Case]:
    """Every corpus file of ``surface``, validated, by name."""
    allowed = COMMON_KEYS | SURFACES[surface]
    cases = []
    for path in sorted((CORPUS / surface).glob("*.yaml")):
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise ValueError(f"{path}: a corpus file is a mapping")
        unknown = set(data) - allowed
        if unknown:
            raise ValueError(f"{path}: unknown keys {sorted(unknown)} (allowed: {sorted(allowed)})")
        if not isinstance(data.get("description"), str) or not data["description"].strip():
            raise ValueError(f"{path}: description is required (what is wrong with the input)")
        expect = data.get("expect")
        if not isinstance(expect, dict) or not expect or set(expect) - EXPECT_KEYS[surface]:
            raise ValueError(f"{path}: expect must be a non-empty mapping of {sorted(EXPECT_KEYS[surface])}")
        if "xfail" in data and (not isinstance(data["xfail"], str) or not data["xfail"].strip()):
            raise ValueError(f"{path}: xfail is the reason, a non-empty string")
        cases.append(Case(surface=surface, name=path.stem, path=path, data=data))
    return cases


def params(
    surface: str,
    select: Callable[[Case], bool] = lambda _: True,
    *,
    xfail: Callable[[Case], str] | None = None,
) -> list[Any]:
    """``pytest.param(case)`` for every selected case; ``xfail(case)`` (default: the file's ``xfail``
    key) gives the reason of a strict xfail, empty for none."""
    reason_of = xfail or (lambda case: str(case.data.get("xfail", "")))
    out = []
    for case in load(surface):
        if not select(case):
            continue
        reason = reason_of(case)
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        out.append(pytest.param(case, id=case.name, marks=marks))
    return out


def as_list(value: Any) -> list[str]:
    if value is None:
        return []
    return [str(v) for v in value] if isinstance(value, list) else [str(value)]


def check_named(named: str, message: str, expect: Mapping[str, Any], *, key: str, contains: str) -> None:
    """``named`` (the error's field or path) is one of ``expect[key]`` (a string or a list of the
    acceptable ones), and ``message`` holds every ``expect[contains]``."""
    if key in expect:
        assert named in as_list(expect[key]), f"named {named!r}, expected {expect[key]!r}: {message}"
    for text in as_list(expect.get(contains)):
        assert text in message, f"{text!r} not in {message!r}"


def contains_all(message: str, expected: Iterable[str] | str | None) -> None:
    for text in as_list(expected):
        assert text in message, f"{text!r} not in {message!r}"
