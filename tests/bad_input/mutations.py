"""Hypothesis strategies that break valid documents the way people and programs do.

:func:`mutated` starts from one of some valid documents and applies one to three mutations at random
places: drop a key or list item, replace a value with a JSON value of another type, insert an unknown
key (or item), empty a value, wrap a value one level deeper. :func:`truncated` cuts a text anywhere.

Values include integers beyond a float's range, NaN and infinities; nesting beyond Python's
recursion limit stays a corpus case of its own (``corpus/``), being too slow to draw.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from hypothesis import strategies as st

KeyPath = tuple[Any, ...]

SPECIAL_STRINGS = (
    "",
    " ",
    "x" * 300,
    "é",
    "😀",
    "\u202e",
    "\u0000",
    "１０.0.0.0/24",
    "10.0.0.0/33",
    "10.0.0.1/24",
    "fd00::/129",
    "::/0",
    "-1",
    "5m",
    "-5s",
    "true",
    "null",
    "ipv4",
    "eni-ipam-local",
)
"""Strings that are almost right somewhere: bad CIDRs, durations, booleans, unicode look-alikes."""

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63),
    st.sampled_from((10**400, -(10**400))),
    st.floats(),
    st.text(max_size=12),
    st.sampled_from(SPECIAL_STRINGS),
)

KEYS = st.one_of(
    st.text(max_size=10),
    st.sampled_from(("unknown", "pre_alocate", "subnetIds", "Pool ", "cniversion", "ÿ", "")),
)
"""Keys to insert: random text and near misses of real keys (never a real key of any surface)."""

VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(KEYS, inner, max_size=3)),
    max_leaves=6,
)

MUTATIONS = ("drop", "replace", "insert", "empty", "wrap")


def paths(doc: Any, prefix: KeyPath = ()) -> list[KeyPath]:
    """The path of every value in ``doc``, the document itself first."""
    out = [prefix]
    if isinstance(doc, dict):
        for key, value in doc.items():
            out.extend(paths(value, (*prefix, key)))
    elif isinstance(doc, list):
        for index, value in enumerate(doc):
            out.extend(paths(value, (*prefix, index)))
    return out


def _get(doc: Any, path: KeyPath) -> Any:
    for step in path:
        doc = doc[step]
    return doc


def _other_type(value: Any) -> st.SearchStrategy[Any]:
    """A JSON value whose type differs from ``value``'s."""
    kind = type(value)
    return VALUES.filter(lambda v: type(v) is not kind)


@st.composite
def mutated(draw: st.DrawFn, seeds: Sequence[Any], *, max_mutations: int = 3) -> Any:
    """One of ``seeds`` (a deep copy) with one to ``max_mutations`` mutations applied."""
    doc = copy.deepcopy(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(min_value=1, max_value=max_mutations))):
        path = draw(st.sampled_from(paths(doc)))
        kind = draw(st.sampled_from(MUTATIONS))
        current = _get(doc, path)
        if kind == "drop" and path:
            parent = _get(doc, path[:-1])
            del parent[path[-1]]
            continue
        if kind == "insert" and isinstance(current, dict):
            current[draw(KEYS)] = draw(VALUES)
            continue
        if kind == "insert" and isinstance(current, list):
            current.insert(draw(st.integers(min_value=0, max_value=len(current))), draw(VALUES))
            continue
        if kind == "empty":
            new: Any = type(current)() if isinstance(current, dict | list | str) else None
        elif kind == "wrap":
            new = draw(st.sampled_from(([current], {"value": current})))
        else:  # replace (and drop/insert where they do not apply): a value of another type
            new = draw(_other_type(current))
        if path:
            _get(doc, path[:-1])[path[-1]] = new
        else:
            doc = new
    return doc


@st.composite
def truncated(draw: st.DrawFn, texts: Sequence[str]) -> str:
    """One of ``texts`` cut at a random point (possibly not at all, possibly to nothing)."""
    text = draw(st.sampled_from(texts))
    return text[: draw(st.integers(min_value=0, max_value=len(text)))]
