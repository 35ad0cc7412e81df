"""The AWS provider: eni-ipam on EC2 through boto3 (the only package that imports boto3).

:class:`AwsProvider` implements :class:`eni_ipam.core.provider.Provider`; :class:`AwsSettings` configures
it (docs/aws.md). The logic it shares with the in-memory cloud lives in
:mod:`providers.ec2_provider`.
"""

from providers.aws.provider import AwsProvider
from providers.aws.settings import AwsSettings, aws_settings_from_mapping

__all__ = ["AwsProvider", "AwsSettings", "aws_settings_from_mapping"]
