"""The SNAT table: rendered from the plan, written whole, rewritten when changed by hand."""

from __future__ import annotations

import json
import shutil

import pytest

from eni_ipam.agent.datapath.errors import DatapathError
from eni_ipam.agent.datapath.nft import SnatTable, render, run_nft
from eni_ipam.agent.datapath.plan import Snat

SNAT = Snat(
    keep=("10.0.0.0/16", "192.168.0.0/16"),
    sources=("10.0.0.0/16",),
    device_mac="02:00:00:00:00:10",
    to_address="10.0.0.10",
    mark=0x80,
)


class FakeNft:
    """``nft`` that keeps one table: what the last ``-f`` defined, as ``list`` prints it."""

    def __init__(self, *, refuse: str = "") -> None:
        self.table = ""
        self.writes = 0
        self.refuse = refuse

    async def __call__(self, arguments: list[str], stdin: str) -> tuple[int, str, str]:
        if arguments[:1] == ["-f"]:
            if self.refuse:
                return 1, "", self.refuse
            self.writes += 1
            self.table = stdin.split("\n", 2)[2]
            return 0, "", ""
        if arguments[:1] == ["list"]:
            return (0, self.table, "") if self.table else (1, "", "Error: No such file or directory")
        if arguments[:1] == ["delete"]:
            self.table = ""
            return 0, "", ""
        raise AssertionError(arguments)


def test_the_table_marks_connections_leaving_the_vpc_after_dnat_and_snats_them_on_the_primary() -> None:
    text = render(SNAT, "ens5")
    assert "elements = { 10.0.0.0/16, 192.168.0.0/16 }" in text
    assert "type filter hook prerouting priority dstnat + 10" in text
    assert "ct state new ip saddr @sources ip daddr != @keep ct mark set ct mark | 0x80" in text
    assert 'oifname "ens5" snat ip to 10.0.0.10' in text


async def test_the_table_is_written_once_and_again_only_when_the_plan_or_the_host_changed() -> None:
    nft = FakeNft()
    table = SnatTable(run=nft)
    assert await table.ensure(SNAT, "ens5")
    assert not await table.ensure(SNAT, "ens5")
    assert nft.writes == 1
    nft.table = nft.table.replace("snat ip to 10.0.0.10", "snat ip to 10.0.0.99")  # changed by hand
    assert await table.ensure(SNAT, "ens5")
    assert "10.0.0.10" in nft.table and nft.writes == 2
    assert await table.ensure(SNAT, "ens6")  # the primary interface's name changed
    assert await table.ensure(None, "ens6")  # no SNAT wanted: the table goes
    assert nft.table == ""
    assert not await table.remove()


async def test_a_restarted_agent_writes_the_table_again_whatever_the_host_holds() -> None:
    nft = FakeNft()
    await SnatTable(run=nft).ensure(SNAT, "ens5")
    assert await SnatTable(run=nft).ensure(SNAT, "ens5")  # a new process proves nothing it did not write
    assert nft.writes == 2


async def test_a_table_nft_refuses_is_an_error_with_nfts_message() -> None:
    with pytest.raises(DatapathError, match="nft refused the SNAT table: Error: Could not process rule"):
        await SnatTable(run=FakeNft(refuse="Error: Could not process rule")).ensure(SNAT, "ens5")


@pytest.mark.system
@pytest.mark.usefixtures("private_netns")
async def test_the_real_nft_accepts_the_table_lists_it_and_replaces_it_atomically() -> None:
    if shutil.which("nft") is None:
        pytest.skip("nft is not installed (Debian's nftables package)")
    table = SnatTable()
    assert await table.ensure(SNAT, "ens5")
    assert not await table.ensure(SNAT, "ens5")
    status, out, _ = await run_nft(["-j", "list", "table", "ip", "eni_ipam"], "")
    assert status == 0
    chains = {item["chain"]["name"]: item["chain"] for item in json.loads(out)["nftables"] if "chain" in item}
    assert chains["pods_leaving_vpc"]["hook"] == "prerouting" and chains["pods_leaving_vpc"]["prio"] == -90
    assert chains["snat_to_primary"]["hook"] == "postrouting" and chains["snat_to_primary"]["prio"] == 110
    await run_nft(["delete", "chain", "ip", "eni_ipam", "snat_to_primary"], "")  # by hand
    assert await table.ensure(SNAT, "ens5")
    assert "snat_to_primary" in await table.listing()
    assert await table.remove()
    assert await table.listing() == ""
