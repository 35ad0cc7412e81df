"""The call wrapper's error translation: callers never see a botocore exception."""

from __future__ import annotations

import botocore.exceptions
import pytest

from eni_ipam.adapters.metrics import Metrics
from eni_ipam.core import errors
from eni_ipam.core.clock import LoopClock
from eni_ipam.core.ratelimit import RateLimiter
from eni_ipam.errors import ConfigError
from providers.aws.client import Ec2Client, make_client, translate
from providers.aws.settings import AwsSettings


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (botocore.exceptions.EndpointConnectionError(endpoint_url="https://ec2"), errors.TransientError),
        (botocore.exceptions.ReadTimeoutError(endpoint_url="https://ec2"), errors.TransientError),
        (botocore.exceptions.NoCredentialsError(), errors.Unauthorized),
        (botocore.exceptions.ParamValidationError(report="bad"), errors.InvalidRequest),
        (botocore.exceptions.WaiterError(name="w", reason="r", last_response={}), errors.ProviderError),
        (
            botocore.exceptions.ClientError(
                {"Error": {"Code": "InsufficientFreeAddressesInSubnet", "Message": "full"}},
                "CreateNetworkInterface",
            ),
            errors.SubnetExhausted,
        ),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, Exception) else v.__name__,
)
def test_botocore_exceptions_become_project_errors(exc: Exception, kind: type[errors.ProviderError]) -> None:
    translated = translate(exc, "CreateNetworkInterface")
    assert isinstance(translated, kind)
    assert isinstance(translated, errors.ProviderError) and translated.operation == "CreateNetworkInterface"


def test_foreign_exceptions_are_not_translated() -> None:
    assert translate(ValueError("ours"), "X") is None


def test_a_missing_region_is_a_config_error_naming_the_field(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    monkeypatch.delenv("AWS_REGION", raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/eni-ipam-test")
    with pytest.raises(ConfigError) as caught:
        make_client(AwsSettings())
    assert caught.value.field == "aws.region"


def test_an_unknown_profile_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_PROFILE", "eni-ipam-no-such-profile")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/eni-ipam-test")
    with pytest.raises(ConfigError) as caught:
        make_client(AwsSettings(region="us-east-1"))
    assert caught.value.field == "aws"


async def test_a_call_after_close_is_a_transient_error_not_a_runtime_error() -> None:
    client = Ec2Client(
        AwsSettings(region="us-east-1"), limiter=RateLimiter(), metrics=Metrics(), clock=LoopClock()
    )
    client.close()
    with pytest.raises(errors.TransientError) as caught:
        await client.call("DescribeVpcs")
    assert caught.value.code == "ClientClosed"
