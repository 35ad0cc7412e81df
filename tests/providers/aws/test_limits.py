"""Instance-type limits on AWS: EC2's answer wins, the table is the fallback, and lookups are bounded."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from eni_ipam.core import errors
from eni_ipam.core.model import InstanceLimits
from providers.aws.limits import Ec2InstanceTypes


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now


def record(name: str, adapters: int = 3, ipv4: int = 10) -> dict[str, Any]:
    return {
        "InstanceType": name,
        "BareMetal": False,
        "Hypervisor": "nitro",
        "NetworkInfo": {
            "MaximumNetworkInterfaces": adapters,
            "Ipv4AddressesPerInterface": ipv4,
            "Ipv6AddressesPerInterface": ipv4,
            "Ipv6Supported": True,
        },
    }


class FakeClient:
    """Answers DescribeInstanceTypes from ``catalogue``; an unknown type spoils the request, as on EC2."""

    def __init__(
        self, catalogue: dict[str, dict[str, Any]], fail: errors.ProviderError | None = None
    ) -> None:
        self.catalogue = catalogue
        self.fail = fail
        self.requests: list[list[str]] = []

    async def pages(self, operation: str, key: str, **params: Any) -> list[dict[str, Any]]:
        assert (operation, key) == ("DescribeInstanceTypes", "InstanceTypes")
        types = params["InstanceTypes"]
        self.requests.append(types)
        if self.fail is not None:
            raise self.fail
        if any(t not in self.catalogue for t in types):
            raise errors.InvalidRequest("no such type", code="InvalidInstanceType")
        return [self.catalogue[t] for t in types]


TABLE = {"m5.large": InstanceLimits(adapters=3, ipv4_per_interface=10, hypervisor="nitro")}


def source(client: FakeClient | None, clock: FakeClock | None = None) -> Ec2InstanceTypes:
    return Ec2InstanceTypes(client, table=TABLE, clock=clock or FakeClock(), refresh_interval=60)  # type: ignore[arg-type]


async def test_ec2s_answer_wins_over_the_shipped_table() -> None:
    client = FakeClient({"m5.large": record("m5.large", adapters=4)})
    limits = await source(client).limits("m5.large")
    assert limits.adapters == 4 and client.requests == [["m5.large"]]


async def test_only_the_clusters_types_are_asked_about_in_one_request() -> None:
    client = FakeClient({t: record(t) for t in ("m5.large", "c5.large", "x1.new")})
    known = await source(client).known(["x1.new", "m5.large", "c5.large"])
    assert set(known) == {"m5.large", "c5.large", "x1.new"}
    assert client.requests == [["c5.large", "m5.large", "x1.new"]]


async def test_a_batch_spoiled_by_an_unknown_type_is_asked_again_one_by_one() -> None:
    client = FakeClient({"c5.large": record("c5.large")})
    known = await source(client).known(["c5.large", "x9.bogus"])
    assert set(known) == {"c5.large"}
    assert client.requests == [["c5.large", "x9.bogus"], ["c5.large"], ["x9.bogus"]]


async def test_an_unknown_type_is_asked_about_at_most_once_per_interval() -> None:
    clock = FakeClock()
    client = FakeClient({})
    limits = source(client, clock)
    for _ in range(5):
        with pytest.raises(errors.LimitsUnknown):
            await limits.limits("x9.bogus")
    assert client.requests == [["x9.bogus"]]
    clock.now = 61
    with pytest.raises(errors.LimitsUnknown):
        await limits.limits("x9.bogus")
    assert len(client.requests) == 2


async def test_a_described_type_is_never_asked_about_again() -> None:
    clock = FakeClock()
    client = FakeClient({"m5.large": record("m5.large")})
    limits = source(client, clock)
    await limits.limits("m5.large")
    clock.now = 3600
    await limits.known(["m5.large"])
    assert client.requests == [["m5.large"]]


async def test_without_permission_the_table_answers_and_ec2_is_not_asked_again() -> None:
    clock = FakeClock()
    client = FakeClient({}, fail=errors.Unauthorized("not allowed", code="UnauthorizedOperation"))
    limits = source(client, clock)
    assert await limits.limits("m5.large") == TABLE["m5.large"]
    clock.now = 3600
    with pytest.raises(errors.LimitsUnknown):
        await limits.limits("c5.large")
    assert client.requests == [["m5.large"]]


async def test_a_failed_request_is_retried_after_the_interval() -> None:
    clock = FakeClock()
    client = FakeClient({}, fail=errors.TransientError("down", code="ServiceUnavailable"))
    limits = source(client, clock)
    await limits.known(["m5.large"])
    await limits.known(["m5.large"])
    clock.now = 61
    await limits.known(["m5.large"])
    assert client.requests == [["m5.large"], ["m5.large"]]


async def test_table_only_mode_makes_no_request() -> None:
    limits = source(None)
    assert await limits.known(["m5.large", "c5.large"]) == {"m5.large": TABLE["m5.large"]}


async def test_a_lookup_waiting_while_another_is_denied_answers_from_the_table() -> None:
    client = FakeClient({}, fail=errors.Unauthorized("no", code="UnauthorizedOperation"))
    limits = source(client)
    first, second = await asyncio.gather(limits.limits("m5.large"), limits.known(["m5.large", "c5.large"]))
    assert first == TABLE["m5.large"] and second == {"m5.large": TABLE["m5.large"]}


async def test_passing_credential_failures_do_not_turn_the_lookups_off() -> None:
    clock = FakeClock()
    client = FakeClient({}, fail=errors.Unauthorized("expired", code="AuthFailure"))
    limits = source(client, clock)
    await limits.known(["m5.large"])
    clock.now = 61
    client.fail = None
    client.catalogue["m5.large"] = record("m5.large", adapters=5)
    assert (await limits.limits("m5.large")).adapters == 5
