"""``eni-ipam run`` with ``provider: azure``: the service opens the plug-in from its configuration and
fills the nodes' NICs on the fake ARM (only the transport and the credential are swapped)."""

from __future__ import annotations

import asyncio
import contextlib
import functools

import pytest

from eni_ipam.app.runconfig import load_config_mapping
from eni_ipam.app.service import serve
from eni_ipam_testkit.fake_azure import FakeCredential
from providers.azure import service as azure_service
from tests.providers.azure.conftest import GROUP, SUBSCRIPTION, World

pytestmark = [pytest.mark.system, pytest.mark.looptime]


def secondaries(world: World, nic_id: str) -> int:
    configurations = world.fake.nic_document(nic_id)["properties"]["ipConfigurations"]
    return sum(1 for c in configurations if not c["properties"].get("primary"))


async def test_run_fills_the_nics_of_configured_nodes_and_stops_cleanly(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    vm, nics = world.vm("node-a")
    opened = azure_service.open_provider
    monkeypatch.setattr(
        azure_service,
        "open_provider",
        functools.partial(opened, credential=FakeCredential(), transport=world.fake),
    )
    config = load_config_mapping(
        {
            "provider": "azure",
            "node_source": "memory",
            "server": {"host": "127.0.0.1", "port": 0, "probe_port": 0},
            "azure": {"subscription_id": SUBSCRIPTION, "resource_groups": [GROUP], "vnet_id": world.vnet_id},
            "nodes": [{"name": "node-a", "instance": vm.lower(), "pre_allocate": 6}],
        }
    )
    stop = asyncio.Event()
    task = asyncio.create_task(serve(config, stop=stop, environ={}))
    try:
        async with asyncio.timeout(120):
            while secondaries(world, nics[0]) < 6:
                await asyncio.sleep(0.5)
    finally:
        stop.set()
        with contextlib.suppress(asyncio.CancelledError):
            assert await task == 0
    assert secondaries(world, nics[0]) == 6
