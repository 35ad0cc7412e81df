"""Suggestions for a misspelt name: the known names closest to it, for an error or an explanation
to offer ("did you mean m5.xlarge?"). Pure and standard library only, so that the command line's
plug-ins, the simulator and the configuration layer's errors can use it without importing what they
explain.

Two policies, one matcher: :func:`closest` offers the one name a configuration value most likely
misspells (a key, a choice, an instance type in an error naming one field), :func:`did_you_mean` up to
three for a person reading an explanation."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

CUTOFF = 0.8
"""How alike a known name must be to be offered (difflib's ratio): a letter or two off in a name of
a handful of characters, not a name merely of the same family."""
ONE_CUTOFF = 0.75
"""The same for :func:`closest`, which offers a single name: a little looser, as one name offered
misleads less than three."""


def close_names(name: str, known: Iterable[str], *, most: int, cutoff: float) -> list[str]:
    """Up to ``most`` of ``known`` at least ``cutoff`` alike to ``name`` (difflib's ratio), the
    closest first; ``name`` itself is never one of them."""
    return difflib.get_close_matches(name, [k for k in known if k != name], n=most, cutoff=cutoff)


def closest(word: Any, known: Iterable[str]) -> str | None:
    """The one of ``known`` that ``word`` most likely misspells (a letter or two), or None."""
    if not isinstance(word, str):
        return None
    candidates = [k for k in known if k != word]
    # Case first: ``M5.Large`` is ``m5.large`` before it is anything else.
    same = [k for k in candidates if k.lower() == word.lower()]
    found = same[:1] or close_names(word, candidates, most=1, cutoff=ONE_CUTOFF)
    return found[0] if found else None


def did_you_mean(name: str, known: Iterable[str], *, most: int = 3) -> str:
    """``did you mean m5.xlarge?`` (up to ``most`` names, the closest first), or empty when no known
    name is close to ``name`` (or ``name`` is one of them)."""
    names = sorted(set(known))
    if name in names:
        return ""
    close = close_names(name, names, most=most, cutoff=CUTOFF)
    if not close:
        return ""
    if len(close) == 1:
        return f"did you mean {close[0]}?"
    return f"did you mean {', '.join(close[:-1])} or {close[-1]}?"
