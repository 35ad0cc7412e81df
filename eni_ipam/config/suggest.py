"""Suggestions for a misspelt name: the known names closest to it, for an error or an explanation
to offer ("did you mean m5.xlarge?"). Pure and standard library only, so that the command line's
plug-ins and the simulator can use it without importing what they explain."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

CUTOFF = 0.8
"""How alike a known name must be to be offered (difflib's ratio): a letter or two off in a name of
a handful of characters, not a name merely of the same family."""


def did_you_mean(name: str, known: Iterable[str], *, most: int = 3) -> str:
    """``did you mean m5.xlarge?`` (up to ``most`` names, the closest first), or empty when no known
    name is close to ``name`` (or ``name`` is one of them)."""
    names = sorted(set(known))
    if name in names:
        return ""
    close = difflib.get_close_matches(name, names, n=most, cutoff=CUTOFF)
    if not close:
        return ""
    if len(close) == 1:
        return f"did you mean {close[0]}?"
    return f"did you mean {', '.join(close[:-1])} or {close[-1]}?"
