"""AWS as an ``eni-ipam run`` provider (``provider: aws``, settings in the ``aws:`` section).

Imports no boto3 until asked to check or open: the run configuration loads every plug-in.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Collection

from eni_ipam.core.clock import Clock
from eni_ipam.core.observe import ApiObserver
from eni_ipam.core.provider import Provider
from eni_ipam.core.records import NodeRecords
from eni_ipam.errors import ConfigError
from providers.aws.settings import AwsSettings

SETTINGS = AwsSettings
PROVIDER_ID_SCHEMES = ("aws",)
"""Nodes of EC2 carry ``aws:///<zone>/<instance id>``."""
REQUIRED = False


TOKEN_FILE = "AWS_WEB_IDENTITY_TOKEN_FILE"
"""The variable naming the web identity token botocore exchanges for the role's credentials: IRSA
(EKS's pod identity webhook sets it, with ``AWS_ROLE_ARN``, and mounts the file)."""


def check(settings: AwsSettings) -> None:
    """The EC2 client can be made: a region is set or found (``AWS_DEFAULT_REGION``, the profile),
    and a web identity token file the environment names exists (botocore would only find out at the
    first call, and every call would then fail).

    Raises:
        ConfigError: ``aws.region`` when no region resolves, ``AWS_WEB_IDENTITY_TOKEN_FILE`` for a
            token file that is not there, ``aws`` for another client problem.
    """
    from providers.aws.client import make_client

    token = os.environ.get(TOKEN_FILE, "")
    if token and not os.path.isfile(token):
        raise ConfigError(
            TOKEN_FILE,
            f"names {token}, which does not exist: the role's credentials cannot be had. In a pod, the "
            "service account needs its eks.amazonaws.com/role-arn annotation (docs/aws.md); elsewhere, "
            f"unset {TOKEN_FILE} and AWS_ROLE_ARN, or point it at the token",
        )
    make_client(settings)


def instance_types(settings: AwsSettings) -> tuple[Collection[str], bool]:
    """The instance types whose limits are known without EC2 (the shipped table), and whether they
    are all: not when ``update_limits_via_api`` asks EC2 about the others (a type newer than the
    table)."""
    from providers.ec2.limits import load_limits

    return load_limits().keys(), not settings.update_limits_via_api


@contextlib.asynccontextmanager
async def open_provider(
    settings: AwsSettings,
    *,
    clock: Clock,
    metrics: ApiObserver,
    rate_limit_share: float,
    records: NodeRecords | None = None,
) -> AsyncIterator[Provider]:
    from providers.aws.client import make_client
    from providers.aws.provider import AwsProvider

    # botocore loads EC2's service model (tenths of a second of CPU): not on the event loop.
    client = await asyncio.to_thread(make_client, settings)
    provider = AwsProvider(
        settings, clock=clock, metrics=metrics, rate_limit_share=rate_limit_share, client=client
    )
    try:
        yield provider
    finally:
        provider.close()
