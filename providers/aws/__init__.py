"""The AWS provider: eni-ipam on EC2 through boto3 (the only package that imports boto3).

:class:`AwsProvider` implements :class:`eni_ipam.core.provider.Provider`; :class:`AwsSettings` configures
it (docs/aws.md). The logic it shares with the in-memory cloud lives in
:mod:`providers.ec2.provider`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from providers.aws.provider import AwsProvider
    from providers.aws.settings import AwsSettings

__all__ = ["AwsProvider", "AwsSettings"]


def __getattr__(name: str) -> Any:
    # Lazily: importing the package (its settings, its plug-in) must not import the cloud's SDK.
    if name == "AwsProvider":
        from providers.aws.provider import AwsProvider

        return AwsProvider
    if name == "AwsSettings":
        from providers.aws.settings import AwsSettings

        return AwsSettings
    raise AttributeError(name)
