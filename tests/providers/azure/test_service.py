"""Azure as an ``eni-ipam run`` plug-in: its ``SETTINGS`` model reads the ``azure:`` section and
``open_provider`` opens the provider on ARM, then closes its clients and the credential it made."""

from __future__ import annotations

import pytest

from eni_ipam.adapters.metrics import Metrics
from eni_ipam.config.schema import validate
from eni_ipam.core.clock import LoopClock
from eni_ipam.errors import ConfigError
from eni_ipam_testkit.fake_azure import FakeCredential
from providers.azure import AzureProvider, client, service
from tests.providers.azure.conftest import GROUP, SUBSCRIPTION, World, sample

pytestmark = pytest.mark.looptime


def section(world: World) -> dict[str, object]:
    return {"subscription_id": SUBSCRIPTION, "resource_groups": [GROUP], "vnet_id": world.vnet_id}


async def test_open_provider_resyncs_on_arm_and_closes_the_clients(world: World) -> None:
    vm, _ = world.vm("node")
    settings = validate(service.SETTINGS, section(world), path="azure")
    metrics = Metrics()
    credential = FakeCredential()
    async with service.open_provider(
        settings,
        clock=LoopClock(),
        metrics=metrics,
        rate_limit_share=0.5,
        credential=credential,
        transport=world.fake,
    ) as provider:
        assert provider.name == "azure"
        assert vm.lower() in (await provider.resync()).instances
    assert world.fake.closed
    assert not credential.closed  # injected: its owner closes it
    assert credential.requests >= 1  # every request carried a bearer token
    assert sample(metrics, "eni_ipam_api_requests_total", operation="VirtualNetworks.Get") == 1


async def test_the_default_credential_is_made_for_the_cloud_and_closed_on_exit(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[FakeCredential] = []

    def fake_default(settings: object) -> FakeCredential:
        made.append(FakeCredential())
        return made[-1]

    monkeypatch.setattr(client, "make_credential", fake_default)
    settings = validate(service.SETTINGS, section(world), path="azure")
    async with service.open_provider(
        settings, clock=LoopClock(), metrics=Metrics(), rate_limit_share=1.0, transport=world.fake
    ) as provider:
        await provider.resync()
    assert len(made) == 1 and made[0].closed


def test_the_default_credential_uses_the_clouds_authority(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, object] = {}

    class Recorder:
        def __init__(self, **kwargs: object) -> None:
            seen.update(kwargs)

    monkeypatch.setattr("azure.identity.aio.DefaultAzureCredential", Recorder)
    vnet = f"/subscriptions/{SUBSCRIPTION}/resourceGroups/rg/providers/Microsoft.Network/virtualNetworks/v"
    data = {"subscription_id": SUBSCRIPTION, "resource_groups": ["rg"], "vnet_id": vnet}
    client.make_credential(validate(service.SETTINGS, {**data, "cloud": "AzureUSGovernment"}, path="azure"))
    assert seen == {"authority": "login.microsoftonline.us"}
    client.make_credential(validate(service.SETTINGS, data, path="azure"))
    assert seen == {"authority": "login.microsoftonline.com"}


def test_the_plugin_section_model_names_fields_under_the_section() -> None:
    with pytest.raises(ConfigError) as caught:
        validate(service.SETTINGS, {"subscription_id": "x"}, path="azure")
    assert caught.value.field == "azure.subscription_id"


async def test_closing_closes_every_client_and_the_credential_even_when_one_close_fails(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[FakeCredential] = []

    def fake_default(settings: object) -> FakeCredential:
        made.append(FakeCredential())
        return made[-1]

    monkeypatch.setattr(client, "make_credential", fake_default)
    provider = AzureProvider(world.settings(), clock=LoopClock(), metrics=Metrics(), transport=world.fake)
    closed: list[str] = []

    async def network_close() -> None:
        closed.append("network")
        raise RuntimeError("the network client's session would not close")

    async def compute_close() -> None:
        closed.append("compute")

    monkeypatch.setattr(provider.client.network, "close", network_close)
    monkeypatch.setattr(provider.client.compute, "close", compute_close)
    with pytest.raises(RuntimeError, match="would not close"):
        await provider.close()
    assert closed == ["network", "compute"]
    assert made[0].closed
