"""Text bound for a terminal: what came from the cluster, the cloud or a file is shown, never obeyed.

A node name, an instance id, a tag or a configuration value can hold escape sequences (clearing the
screen, setting a window title, an OSC 8 link that hides where it points) or other control
characters. Everything this package writes to a terminal for people (console logs, the live view,
the CLI's messages) goes through :func:`inert` first; JSON output escapes them by itself.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any


def inert(text: str, *, lines: bool = False) -> str:
    """``text`` with every character that is not printable (controls, format characters, lone
    surrogates, unassigned code points) written as its Python escape (``\\x1b``, ``\\u200e``).
    ``lines``: keep line breaks and tabs (a message of several lines, where no line can be forged);
    without, a value stays on its one line (a log line's)."""
    if text.isprintable():
        return text
    kept = "\n\t" if lines else ""
    return "".join(c if c.isprintable() or c in kept else _escape(c) for c in text)


def plural(count: int, noun: str, nouns: str = "") -> str:
    """``1 node``, ``2 nodes``, ``0 nodes``: a count and its noun as a person writes them (``nouns``:
    the plural when it is not the noun and an ``s``, ``addresses``)."""
    return f"{count} {noun if count == 1 else nouns or noun + 's'}"


def _escape(char: str) -> str:
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def inert_event(logger: Any, method: str, event: MutableMapping[str, Any]) -> dict[str, Any]:
    """A structlog processor: every string of the event made :func:`inert` (before a console
    renderer, which writes values as they are)."""
    return {
        (inert(k) if isinstance(k, str) else k): (inert(v) if isinstance(v, str) else v)
        for k, v in event.items()
    }
