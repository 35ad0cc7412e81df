"""The provider registry: plug-ins found by name through the ``eni_ipam.providers`` entry points.

Each installed distribution may register providers (``aws = "providers.aws.service"``); this module
is the only place that looks them up, so adding a provider touches no core file — only its own
package and its entry point (docs/architecture.md, "Adding a provider").
"""

from __future__ import annotations

import functools
from importlib.metadata import entry_points
from typing import cast

from eni_ipam.core.provider import PLUGIN_GROUP, ProviderPlugin
from eni_ipam.errors import ConfigError


@functools.cache
def plugins() -> dict[str, ProviderPlugin]:
    """Every registered provider by name, loaded (their modules are light: no cloud SDK)."""
    found: dict[str, ProviderPlugin] = {}
    for entry in sorted(entry_points(group=PLUGIN_GROUP), key=lambda e: e.name):
        found.setdefault(entry.name, cast(ProviderPlugin, entry.load()))
    return found


def plugin(name: str) -> ProviderPlugin:
    """The provider registered as ``name``.

    Raises:
        ConfigError: ``provider``: no provider of that name is installed.
    """
    known = plugins()
    if name not in known:
        raise ConfigError("provider", f"expected one of {', '.join(sorted(known))}, got {name!r}")
    return known[name]
