"""A token credential for the Azure SDK clients that needs no network (and no Azure AD).

Role: what a test hands the provider as its credential, so that azure-core's bearer-token policy runs
as it does in production and the fake ARM sees an ``Authorization`` header. Invariants: the token
never expires within a test (it is valid until 2100), so the policy never refreshes it;
:attr:`FakeCredential.requests` counts the asks and :attr:`FakeCredential.closed` says whether its
owner closed it (the provider closes only the credentials it made itself).
"""

from __future__ import annotations

from typing import Any

from azure.core.credentials import AccessToken


class FakeCredential:
    """An async token credential answering a fixed token; counts requests and remembers ``close``."""

    def __init__(self) -> None:
        self.requests = 0
        self.closed = False

    async def get_token(
        self,
        *scopes: str,
        claims: str | None = None,
        tenant_id: str | None = None,
        enable_cae: bool = False,
        **kwargs: Any,
    ) -> AccessToken:
        self.requests += 1
        return AccessToken("fake-token", 4_102_444_800)  # 2100-01-01: never refreshed during a test

    async def close(self) -> None:
        self.closed = True

    async def __aenter__(self) -> FakeCredential:
        return self

    async def __aexit__(self, *args: Any) -> None:
        await self.close()
