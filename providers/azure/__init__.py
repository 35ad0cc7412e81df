"""The Azure provider: eni-ipam on Azure Resource Manager through the async Azure SDK (the only package
that imports ``azure.*``).

:class:`AzureProvider` implements :class:`eni_ipam.core.provider.Provider` by filling the NICs VMs already
have with secondary IP configurations; :class:`AzureSettings` configures it (docs/azure.md). The SDK is
the optional extra ``eni-ipam[azure]``; nothing here is imported unless ``provider: azure`` is chosen.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from providers.azure.provider import AzureProvider
    from providers.azure.settings import AzureSettings

__all__ = ["AzureProvider", "AzureSettings"]


def __getattr__(name: str) -> Any:
    # Lazily: importing the package (its settings, its plug-in) must not import the cloud's SDK.
    if name == "AzureProvider":
        from providers.azure.provider import AzureProvider

        return AzureProvider
    if name == "AzureSettings":
        from providers.azure.settings import AzureSettings

        return AzureSettings
    raise AttributeError(name)
