"""The node's SNAT of pod traffic leaving the VPC: one nftables table, ``ip eni_ipam``.

Role: render the table from a :class:`~eni_ipam.agent.datapath.plan.Snat` and keep the host's copy
equal to it, through the ``nft`` command (nftables' own tool: the ruleset is small, changes only
when the primary interface or the settings change, and is written in one atomic transaction).

The table:

* ``pods_leaving_vpc`` (prerouting, after the services' DNAT — kube-proxy's in iptables and
  nftables modes alike — so a Service's cluster address is judged by the pod it was translated to):
  a new connection from the VPC's addresses to anything outside ``keep`` gets the SNAT bit in its
  conntrack mark, and every packet of such a connection gets it in its firewall mark, which the
  ``fwmark`` rule routes through the main table (the primary interface);
* ``snat_to_primary`` (postrouting, after other source NAT): marked connections leaving through the
  primary interface take its primary address.

Invariants: nothing outside the table ``ip eni_ipam`` is ever read or changed; the table is replaced
whole in one transaction (``table``, ``delete table``, the new table), so a packet never meets half
of it; a change made to it by hand is found (the listing differs from the one the last write left)
and undone at the next reconcile.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Awaitable, Callable

from eni_ipam.agent.datapath.errors import DatapathError
from eni_ipam.agent.datapath.plan import Snat

TABLE = "eni_ipam"
FAMILY = "ip"

Runner = Callable[[list[str], str], Awaitable[tuple[int, str, str]]]
"""Runs ``nft`` with arguments and standard input; (exit status, standard output, standard error)."""


def render(snat: Snat, device: str) -> str:
    """The table for ``snat``, its primary interface being the device named ``device``."""
    mark = f"{snat.mark:#x}"
    keep = ", ".join(snat.keep)
    sources = ", ".join(snat.sources)
    return f"""table {FAMILY} {TABLE} {{
	comment "eni-ipam: SNAT of pod traffic leaving the VPC (docs/node.md)"
	set keep {{
		type ipv4_addr
		flags interval
		elements = {{ {keep} }}
	}}
	set sources {{
		type ipv4_addr
		flags interval
		elements = {{ {sources} }}
	}}
	chain pods_leaving_vpc {{
		type filter hook prerouting priority dstnat + 10; policy accept;
		ct state new ip saddr @sources ip daddr != @keep ct mark set ct mark | {mark}
		ct mark & {mark} == {mark} meta mark set meta mark | {mark}
	}}
	chain snat_to_primary {{
		type nat hook postrouting priority srcnat + 10; policy accept;
		ct mark & {mark} == {mark} oifname "{device}" snat ip to {snat.to_address}
	}}
}}
"""


async def run_nft(arguments: list[str], stdin: str) -> tuple[int, str, str]:
    """The ``nft`` command of the host, run with ``arguments`` and ``stdin``.

    Raises:
        DatapathError: no ``nft`` on the PATH (the nftables package).
    """
    binary = shutil.which("nft")
    if binary is None:
        raise DatapathError("nft is not installed (the nftables package): the datapath cannot SNAT")
    process = await asyncio.create_subprocess_exec(
        binary,
        *arguments,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate(stdin.encode())
    return int(process.returncode or 0), out.decode(errors="replace"), err.decode(errors="replace")


class SnatTable:
    """The host's ``ip eni_ipam`` table, kept equal to what :meth:`ensure` was last given."""

    def __init__(self, run: Runner = run_nft) -> None:
        self._run = run
        self._written = ""
        """The table as ``nft`` listed it after the last write (empty: not written by this process)."""
        self._rendered = ""
        """What that write rendered."""

    async def listing(self) -> str:
        """The table as the host holds it now (empty: there is none)."""
        status, out, _ = await self._run(["list", "table", FAMILY, TABLE], "")
        return out if status == 0 else ""

    async def ensure(self, snat: Snat | None, device: str) -> bool:
        """Make the host's table the one ``snat`` needs (none for ``None``); whether it changed.

        Raises:
            DatapathError: ``nft`` refused the table (its message), or is missing.
        """
        if snat is None:
            return await self.remove()
        wanted = render(snat, device)
        current = await self.listing()
        if self._written and current == self._written and wanted == self._rendered:
            return False
        script = f"table {FAMILY} {TABLE}\ndelete table {FAMILY} {TABLE}\n{wanted}"
        status, _, err = await self._run(["-f", "-"], script)
        if status != 0:
            raise DatapathError(f"nft refused the SNAT table: {err.strip() or f'exit status {status}'}")
        self._rendered = wanted
        self._written = await self.listing()
        return True

    async def remove(self) -> bool:
        """Delete the table if the host has one; whether it had."""
        if not await self.listing():
            self._written = ""
            return False
        status, _, err = await self._run(["delete", "table", FAMILY, TABLE], "")
        if status != 0:
            raise DatapathError(
                f"nft could not delete the SNAT table: {err.strip() or f'exit status {status}'}"
            )
        self._written = ""
        return True
