"""An AWS environment no test can escape: dummy credentials, one region, no profile or endpoint."""

from __future__ import annotations

import pytest

REGION = "us-east-1"


def isolate(monkeypatch: pytest.MonkeyPatch, region: str = REGION) -> None:
    """Dummy credentials and a region; nothing may reach a real account (or a user's profile)."""
    for key in ("AWS_PROFILE", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", region)
    monkeypatch.setenv("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")  # no AMI is validated; saves ~0.2 s per test
