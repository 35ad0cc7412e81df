"""The Azure provider: eni-ipam on Azure Resource Manager through the async Azure SDK (the only package
that imports ``azure.*``).

:class:`AzureProvider` implements :class:`eni_ipam.core.provider.Provider` by filling the NICs VMs already
have with secondary IP configurations; :class:`AzureSettings` configures it (docs/azure.md). The SDK is
the optional extra ``eni-ipam[azure]``; nothing here is imported unless ``provider: azure`` is chosen.
"""

from providers.azure.provider import AzureProvider
from providers.azure.settings import AzureSettings, azure_settings_from_mapping

__all__ = ["AzureProvider", "AzureSettings", "azure_settings_from_mapping"]
