"""An AWS environment no test can escape: dummy credentials, one region, no profile or endpoint; and
the plain boto3 EC2 client the test kit's EC2 doubles are checked with."""

from __future__ import annotations

from typing import Any

import boto3
import pytest

REGION = "us-east-1"

_SESSION: list[boto3.session.Session] = []


def isolate(monkeypatch: pytest.MonkeyPatch, region: str = REGION) -> None:
    """Dummy credentials and a region; nothing may reach a real account (or a user's profile)."""
    for key in ("AWS_PROFILE", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", region)
    monkeypatch.setenv("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")  # no AMI is validated; saves ~0.2 s per test


def ec2_client(endpoint_url: str | None = None) -> Any:
    """A boto3 EC2 client in :data:`REGION` from one plain boto3 session, shared by the modules that
    use it (a new session reloads EC2's model, ~0.4 s). The AWS provider's tests use the product's
    session instead (``tests/providers/aws/conftest.py``)."""
    if not _SESSION:
        _SESSION.append(boto3.session.Session())
    return _SESSION[0].client("ec2", region_name=REGION, endpoint_url=endpoint_url)
