"""Plug-ins found by entry-point group: the one place the product looks up what other code registers.

The product names none of its plug-ins (providers, emulators, subcommands, demos): a distribution
registers them under an entry-point group, and this module loads a group as ``{name: object}``, the
first registration of a name winning. Role: the command line loads groups at every start, so this
module imports only the standard library; a plug-in's own module must be light too (it imports what
it needs when it runs).
"""

from __future__ import annotations

import functools
from importlib.metadata import entry_points
from typing import Any

from eni_ipam.errors import ConfigError


@functools.cache
def registered(group: str) -> dict[str, Any]:
    """Every plug-in of ``group`` by name, loaded, in name order."""
    found: dict[str, Any] = {}
    for entry in sorted(entry_points(group=group), key=lambda e: e.name):
        found.setdefault(entry.name, entry.load())
    return found


def named(group: str, name: str, *, field: str) -> Any:
    """The plug-in ``name`` of ``group``.

    Raises:
        ConfigError: ``field``: no plug-in of that name is installed (the message lists those that are).
    """
    known = registered(group)
    if name not in known:
        raise ConfigError(field, f"expected one of {', '.join(sorted(known))}, got {name!r}")
    return known[name]
