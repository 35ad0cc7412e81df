"""The provider registry: plug-ins found by name through the ``eni_ipam.providers`` entry points.

Each installed distribution may register providers (``aws = "providers.aws.service"``); this module
is the only place that looks them up, so adding a provider touches no core file — only its own
package and its entry point (docs/architecture.md, "Adding a provider").
"""

from __future__ import annotations

from typing import cast

from eni_ipam.adapters.plugins import named, registered
from eni_ipam.core.provider import PLUGIN_GROUP, ProviderPlugin


def plugins() -> dict[str, ProviderPlugin]:
    """Every registered provider by name, loaded (their modules are light: no cloud SDK)."""
    return cast(dict[str, ProviderPlugin], registered(PLUGIN_GROUP))


def plugin(name: str) -> ProviderPlugin:
    """The provider registered as ``name``.

    Raises:
        ConfigError: ``provider``: no provider of that name is installed.
    """
    return cast(ProviderPlugin, named(PLUGIN_GROUP, name, field="provider"))
