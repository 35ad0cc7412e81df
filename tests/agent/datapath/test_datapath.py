"""The datapath against a real kernel: a private network namespace per test, interfaces as veths.

Each test builds a node's interfaces (veth pairs with the pool's MAC addresses, the primary one
configured as a node's is), runs the datapath, and reads back with netlink what the kernel holds.
The SNAT table's ``nft`` is recorded here (tests/agent/datapath/test_nft.py runs the real one).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from pyroute2 import AsyncIPRoute

from eni_ipam.agent.datapath.datapath import Datapath
from eni_ipam.agent.datapath.netlink import Netlink
from eni_ipam.agent.datapath.nft import SnatTable
from eni_ipam.agent.datapath.plan import (
    FROM_POD_PRIORITY,
    MAIN_TABLE,
    PROTOCOL,
    TO_POD_PRIORITY,
    Interface,
    Route,
    Rule,
    plan,
)
from eni_ipam.agent.datapath.settings import DatapathSettings
from eni_ipam.config.schema import validate
from tests.agent.datapath import ETH0, ETH1, ETH2, RecordedNft, node, rp_filter

pytestmark = pytest.mark.usefixtures("private_netns")

SETTINGS = validate(DatapathSettings, {"enabled": True, "vpc_cidrs": ["10.0.0.0/16"]})
PODS = {"10.0.0.50": "eni-0", "10.0.1.50": "eni-1", "10.0.1.51": "eni-1", "10.0.2.50": "eni-2"}


@pytest.fixture
async def datapath() -> AsyncIterator[tuple[Datapath, RecordedNft]]:
    await node(ETH0, ETH1, ETH2)
    nft = RecordedNft()
    async with Netlink() as netlink:
        dp = Datapath(SETTINGS, netlink=netlink, snat=SnatTable(run=nft))
        dp.set_interfaces([ETH0, ETH1, ETH2])
        yield dp, nft


async def held(netlink: Netlink) -> tuple[set[Rule], set[Route]]:
    links = await netlink.links()
    return await netlink.rules(), await netlink.routes({link.index: link.mac for link in links.values()})


async def test_a_reconcile_makes_the_host_hold_exactly_the_plan(
    datapath: tuple[Datapath, RecordedNft],
) -> None:
    dp, nft = datapath
    changes = await dp.reconcile(PODS)
    wanted = plan([ETH0, ETH1, ETH2], PODS, SETTINGS)
    rules, routes = await held(dp.netlink)
    assert rules == set(wanted.rules)
    assert routes == set(wanted.routes)
    assert changes.rules_added == len(wanted.rules) and changes.routes_set == len(wanted.routes)
    assert changes.devices_set_up == 2 and changes.missing_devices == ()
    links = await dp.netlink.links()
    for interface in (ETH1, ETH2):
        link = links[interface.mac]
        assert link.up and link.mtu == 9001
        assert f"{interface.primary_ip}/24" in link.addresses
    for link in links.values():
        if link.mac in (ETH0.mac, ETH1.mac, ETH2.mac):
            assert rp_filter(link.name) == "2"
    assert len(nft.scripts) == 1 and 'oifname "ens5" snat ip to 10.0.0.10' in nft.scripts[0]
    again = await dp.reconcile(PODS)
    assert not again.any  # a second reconcile of the same plan changes nothing, nft included
    assert len(nft.scripts) == 1


async def test_the_subnet_route_of_a_secondary_interface_is_in_its_table_not_in_main(
    datapath: tuple[Datapath, RecordedNft],
) -> None:
    dp, _ = datapath
    await dp.reconcile(PODS)
    async with AsyncIPRoute() as ipr:
        main = [
            f"{r.get('dst')}/{r['dst_len']}" async for r in await ipr.get_routes(family=2, table=MAIN_TABLE)
        ]
    assert "10.0.1.0/24" not in main and "10.0.2.0/24" not in main
    assert "10.0.0.0/24" in main  # the primary's own, the kernel's


async def test_what_the_datapath_did_not_make_is_never_touched_and_what_it_made_stale_is_removed(
    datapath: tuple[Datapath, RecordedNft],
) -> None:
    dp, _ = datapath
    async with AsyncIPRoute() as ipr:
        # Another program's rule at the datapath's own priority, and a stale one of the datapath's.
        await ipr.rule("add", dst="10.0.7.7", dst_len=32, table=MAIN_TABLE, priority=TO_POD_PRIORITY)
        await ipr.rule(
            "add",
            src="10.0.1.99",
            src_len=32,
            table=30_001,
            priority=FROM_POD_PRIORITY,
            FRA_PROTOCOL=PROTOCOL,
        )
        await ipr.rule(
            "add",
            dst="10.0.1.99",
            dst_len=32,
            table=MAIN_TABLE,
            priority=TO_POD_PRIORITY,
            FRA_PROTOCOL=PROTOCOL,
        )
    changes = await dp.reconcile(PODS)
    assert changes.rules_deleted == 2
    async with AsyncIPRoute() as ipr:
        everything = [
            (r.get("priority"), r.get("dst"), r.get("src")) async for r in await ipr.get_rules(family=2)
        ]
    assert (TO_POD_PRIORITY, "10.0.7.7", None) in everything
    assert not any("10.0.1.99" in (dst, src) for _, dst, src in everything)


async def test_a_detached_interface_loses_its_table_and_an_attached_one_gets_one(
    datapath: tuple[Datapath, RecordedNft],
) -> None:
    dp, _ = datapath
    await dp.reconcile(PODS)
    dp.set_interfaces([ETH0, ETH1])
    pods = {a: i for a, i in PODS.items() if i != "eni-2"}
    changes = await dp.reconcile(pods)
    _, routes = await held(dp.netlink)
    assert {r.table for r in routes} == {30_001}
    assert changes.routes_deleted == 2
    dp.set_interfaces([ETH0, ETH1, ETH2])
    await dp.reconcile(PODS)
    _, routes = await held(dp.netlink)
    assert {r.table for r in routes} == {30_001, 30_002}


async def test_an_interface_whose_device_is_not_there_yet_is_unready_until_it_appears(
    datapath: tuple[Datapath, RecordedNft],
) -> None:
    dp, _ = datapath
    late = Interface(
        id="eni-3", mac="02:00:00:00:00:13", device_index=3, subnet="10.0.3.0/24", primary_ip="10.0.3.10"
    )
    dp.set_interfaces([ETH0, ETH1, ETH2, late])
    changes = await dp.reconcile(PODS)
    assert changes.missing_devices == ("eni-3",)
    assert dp.unready() == {"eni-3"} and "eni-3" in dp.problem()
    async with AsyncIPRoute() as ipr:
        await ipr.link("add", ifname="ens9", kind="veth", peer={"ifname": "peer9"}, address=late.mac)
    await dp.reconcile(PODS)
    assert dp.unready() == set() and dp.problem() == ""
    _, routes = await held(dp.netlink)
    assert 30_003 in {r.table for r in routes}


async def test_an_add_installs_a_pods_rules_and_a_remove_deletes_them_whatever_their_table(
    datapath: tuple[Datapath, RecordedNft],
) -> None:
    dp, _ = datapath
    await dp.reconcile({})
    await dp.add([("10.0.2.77", "eni-2"), ("10.0.0.77", "eni-0")])
    rules, _ = await held(dp.netlink)
    assert Rule(FROM_POD_PRIORITY, 30_002, source="10.0.2.77") in rules
    assert Rule(TO_POD_PRIORITY, MAIN_TABLE, destination="10.0.0.77") in rules
    assert await dp.check("10.0.2.77", "eni-2") == ""
    await dp.add([("10.0.2.77", "eni-2")])  # again: an ADD the runtime retried
    await dp.remove(["10.0.2.77", "10.0.0.77"])
    rules, _ = await held(dp.netlink)
    assert not any("77" in (r.source + r.destination) for r in rules)
    assert await dp.check("10.0.2.77", "eni-2") != ""
    await dp.remove(["10.0.2.77"])  # again: a DEL the runtime retried


async def test_clearing_removes_everything_the_datapath_made(datapath: tuple[Datapath, RecordedNft]) -> None:
    dp, nft = datapath
    await dp.reconcile(PODS)
    await dp.clear()
    rules, routes = await held(dp.netlink)
    assert rules == set() and routes == set()
    assert nft.table == ""


class Paused:
    """The datapath's netlink, its reading of the rules held at a gate: a reconcile stops there,
    between its plan and its changes, for as long as the test wants."""

    def __init__(self, netlink: Netlink) -> None:
        self.netlink = netlink
        self.entered = asyncio.Event()
        self.gate = asyncio.Event()

    def __getattr__(self, name: str) -> object:
        return getattr(self.netlink, name)

    async def rules(self) -> set[Rule]:
        self.entered.set()
        await self.gate.wait()
        return await self.netlink.rules()


async def test_an_add_during_a_reconcile_keeps_its_pods_rules(datapath: tuple[Datapath, RecordedNft]) -> None:
    """The reconcile planned before the pod was allocated: had the ADD's rules gone in meanwhile, the
    reconcile would find them unplanned and delete them."""
    dp, _ = datapath
    await dp.reconcile(PODS)
    netlink, paused = dp.netlink, Paused(dp.netlink)
    dp.netlink = paused  # type: ignore[assignment]
    reconcile = asyncio.create_task(dp.reconcile(PODS))
    await asyncio.wait_for(paused.entered.wait(), 5)
    adding = asyncio.create_task(dp.add([("10.0.1.60", "eni-1")]))
    await asyncio.sleep(0.05)
    paused.gate.set()
    await asyncio.gather(reconcile, adding)
    dp.netlink = netlink
    rules, _ = await held(netlink)
    assert Rule(FROM_POD_PRIORITY, 30_001, source="10.0.1.60") in rules
    assert Rule(TO_POD_PRIORITY, MAIN_TABLE, destination="10.0.1.60") in rules


async def test_a_del_during_a_reconcile_leaves_no_rule_of_its_pod(
    datapath: tuple[Datapath, RecordedNft],
) -> None:
    """The pod was held when the reconcile planned: had the DEL's removal gone in meanwhile, the
    reconcile would find the pod's rules missing and put them back, for an address no one holds."""
    dp, _ = datapath
    pods = dict(PODS)
    await dp.reconcile(pods)
    netlink, paused = dp.netlink, Paused(dp.netlink)
    dp.netlink = paused  # type: ignore[assignment]
    reconcile = asyncio.create_task(dp.reconcile(pods))
    await asyncio.wait_for(paused.entered.wait(), 5)
    del pods["10.0.2.50"]  # released by the allocator...
    removing = asyncio.create_task(dp.remove(["10.0.2.50"]))  # ...and its rules asked away
    await asyncio.sleep(0.05)
    paused.gate.set()
    await asyncio.gather(reconcile, removing)
    dp.netlink = netlink
    rules, _ = await held(netlink)
    assert not [r for r in rules if "10.0.2.50" in (r.source, r.destination)]


async def test_a_reconcile_plans_the_pods_held_when_its_turn_comes(
    datapath: tuple[Datapath, RecordedNft],
) -> None:
    dp, _ = datapath
    pods = dict(PODS)
    adding = asyncio.create_task(dp.add([("10.0.1.61", "eni-1")]))
    pods["10.0.1.61"] = "eni-1"  # allocated before the reconcile was asked for; its rules under way
    await dp.reconcile(lambda: pods)
    await adding
    rules, _ = await held(dp.netlink)
    assert Rule(FROM_POD_PRIORITY, 30_001, source="10.0.1.61") in rules


async def test_looks_for_previous_pods_routes_share_the_netlink_socket_with_everything_else(
    datapath: tuple[Datapath, RecordedNft],
) -> None:
    """The datapath's one netlink socket serves one dump at a time (a second is refused, EBUSY): ADDs
    waiting for their addresses' previous pods look at the routes while reconciles and other ADDs
    dump the host too."""
    dp, _ = datapath
    await dp.reconcile(PODS)
    async with AsyncIPRoute() as ipr:  # a previous pod's host route, still there
        (index,) = await ipr.link_lookup(address=ETH1.mac)
        await ipr.route("add", dst="10.0.1.70/32", oif=index, scope=253)
    looks = [dp.vacated(["10.0.1.70"], limit=0.3) for _ in range(10)]
    results = await asyncio.gather(*looks, dp.reconcile(PODS), dp.add([("10.0.1.71", "eni-1")]))
    assert results[:10] == [["10.0.1.70"]] * 10
