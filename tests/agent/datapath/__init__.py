"""The datapath's tests: :func:`node` gives the test's private network namespace the interfaces of a
node, as EC2 presents them; :class:`RecordedNft` stands in for the ``nft`` command."""

from __future__ import annotations

from pathlib import Path

from pyroute2 import AsyncIPRoute

from eni_ipam.agent.datapath.plan import Interface

ETH0 = Interface(
    id="eni-0", mac="02:00:00:00:00:10", device_index=0, subnet="10.0.0.0/24", primary_ip="10.0.0.10"
)
ETH1 = Interface(
    id="eni-1", mac="02:00:00:00:00:11", device_index=1, subnet="10.0.1.0/24", primary_ip="10.0.1.10"
)
ETH2 = Interface(
    id="eni-2", mac="02:00:00:00:00:12", device_index=2, subnet="10.0.2.0/24", primary_ip="10.0.2.10"
)
"""A node's three interfaces: the primary one and two secondary ones, each in a subnet of its own."""


async def node(*interfaces: Interface, first: int = 5) -> None:
    """The interfaces as a node has them: veths with the pool's MACs, down and unaddressed but the
    primary, which has its address and the default route through its router; named ``ens<first>``
    on (the datapath finds them by MAC, never by name)."""
    async with AsyncIPRoute() as ipr:
        for n, interface in enumerate(interfaces):
            await ipr.link(
                "add",
                ifname=f"ens{first + n}",
                kind="veth",
                peer={"ifname": f"peer{first + n}"},
                address=interface.mac,
            )
            (peer,) = await ipr.link_lookup(ifname=f"peer{first + n}")
            await ipr.link("set", index=peer, state="up")
            if interface.device_index == 0:
                (index,) = await ipr.link_lookup(address=interface.mac)
                await ipr.link("set", index=index, state="up")
                await ipr.addr("add", index=index, address=interface.primary_ip, prefixlen=24)
                await ipr.route("add", dst="0.0.0.0/0", gateway=interface.router)


class RecordedNft:
    """``nft`` as the datapath runs it, recorded; ``list`` answers what the last script defined."""

    def __init__(self) -> None:
        self.scripts: list[str] = []
        self.table = ""

    async def __call__(self, arguments: list[str], stdin: str) -> tuple[int, str, str]:
        if arguments[:1] == ["-f"]:
            self.scripts.append(stdin)
            self.table = stdin.split("\n", 2)[2]
            return 0, "", ""
        if arguments[:1] == ["list"]:
            return (0, self.table, "") if self.table else (1, "", "No such file or directory")
        if arguments[:1] == ["delete"]:
            self.table = ""
            return 0, "", ""
        raise AssertionError(arguments)


def rp_filter(device: str) -> str:
    """The device's ``net.ipv4.conf.<device>.rp_filter``, in this thread's namespace."""
    return Path(f"/proc/sys/net/ipv4/conf/{device}/rp_filter").read_text().strip()
