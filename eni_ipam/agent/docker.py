"""Docker's own view of the networks that use the libnetwork driver, read from its API.

Two readers need it: the sweep (:class:`~eni_ipam.agent.sweep.DockerJudge`) releases what no Docker
network or endpoint holds any more, and the start (:mod:`~eni_ipam.agent.start`) rebuilds a lost
state file from Docker's endpoints and releases the pools of networks removed while the agent was
down. Both read Docker through :class:`DockerApi`, so they agree on what Docker holds.

Invariants:

* Only networks whose IPAM driver is ``driver_name`` are read. What such a network holds is, for
  each of its IPAM configurations, the gateway and the auxiliary addresses, and every endpoint's
  ``IPv4Address`` and ``IPv6Address``.
* A view is whole or nothing: a socket that does not answer, a status other than 200, a body that is
  not what Docker sends — any of them raises :class:`DockerUnreachable`, never a partial view
  (a network missing from a view would read as "removed", and its addresses as free).
"""

from __future__ import annotations

import asyncio
import dataclasses
import ipaddress
import json
import urllib.parse
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from eni_ipam.errors import EniIpamError

from .members import canonical_address

if TYPE_CHECKING:
    from .libnetwork import PoolRecord

CONNECT_TIMEOUT = 10.0
"""Seconds to connect to Docker's socket (a dockerd that is starting queues connections)."""
READ_TIMEOUT = 30.0
"""Seconds for one answer of Docker's API."""


class DockerUnreachable(EniIpamError):
    """Docker's API did not give a usable view (not answering, an error status, a malformed body)."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class DockerSubnet:
    """One IPAM configuration of a network: its subnet and what Docker reserved in it."""

    subnet: str
    """In canonical CIDR form (``10.99.0.0/24``); the text as Docker gave it when it is not a network."""
    ip_range: str = ""
    gateway: str = ""
    auxiliary: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class DockerNetwork:
    """A network that uses this driver, with the addresses of its endpoints."""

    id: str
    name: str = ""
    subnets: tuple[DockerSubnet, ...] = ()
    endpoints: tuple[str, ...] = ()
    """The endpoints' addresses (canonical, without prefix length)."""

    def holds(self) -> set[str]:
        """Every address the network holds: endpoints, gateways, auxiliary addresses."""
        held = set(self.endpoints)
        for subnet in self.subnets:
            held.update(a for a in (subnet.gateway, *subnet.auxiliary) if a)
        return held


@dataclasses.dataclass(frozen=True, slots=True)
class DockerView:
    """The networks using this driver, as Docker's API reported them at one time."""

    networks: tuple[DockerNetwork, ...] = ()

    def in_use(self) -> set[str]:
        """Every address a network using this driver holds."""
        return set().union(*(n.holds() for n in self.networks))

    def subnets(self) -> set[str]:
        """The subnets of the networks using this driver (canonical CIDR)."""
        return {s.subnet for n in self.networks for s in n.subnets}

    def unused(self, records: Iterable[PoolRecord]) -> list[PoolRecord]:
        """The registered pools no network using this driver has as its subnet any more."""
        subnets = self.subnets()
        return [r for r in records if canonical_network(r.pool) not in subnets]


class DockerApi:
    """Reads Docker's API on its unix ``socket`` (HTTP/1.0: each answer ends with its connection)."""

    def __init__(
        self,
        socket: str,
        *,
        driver_name: str,
        connect_timeout: float = CONNECT_TIMEOUT,
        read_timeout: float = READ_TIMEOUT,
    ) -> None:
        self.socket = socket
        self.driver_name = driver_name
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout

    async def view(self) -> DockerView:
        """The networks using this driver, each with its endpoints (``GET /networks`` lists none, so
        each is inspected). Raises DockerUnreachable."""
        try:
            listed = await self._get("/networks")
            if not isinstance(listed, list):
                raise ValueError("GET /networks: not a list")
            networks = []
            for item in listed:
                if isinstance(item, dict) and self._ours(item):
                    path = f"/networks/{urllib.parse.quote(str(item['Id']), safe='')}"
                    inspected = await self._get(path)
                    if not isinstance(inspected, dict):
                        raise ValueError(f"GET {path}: not an object")
                    networks.append(_network(inspected))
        except (TimeoutError, OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise DockerUnreachable(f"Docker's API on {self.socket}: {exc or type(exc).__name__}") from exc
        return DockerView(tuple(networks))

    def _ours(self, network: dict[str, Any]) -> bool:
        return ((network.get("IPAM") or {}).get("Driver") or "") == self.driver_name

    async def _get(self, path: str) -> Any:
        reader, writer = await asyncio.wait_for(
            asyncio.open_unix_connection(self.socket), self.connect_timeout
        )
        try:
            writer.write(f"GET {path} HTTP/1.0\r\nHost: docker\r\n\r\n".encode())
            await writer.drain()
            raw = await asyncio.wait_for(reader.read(), self.read_timeout)
        finally:
            writer.close()
        head, _, body = raw.partition(b"\r\n\r\n")
        if head.split(b" ", 2)[1:2] != [b"200"]:
            first = head.splitlines()[0].decode(errors="replace") if head else "no answer"
            raise ValueError(f"GET {path}: {first}")
        return json.loads(body)


def _network(raw: dict[str, Any]) -> DockerNetwork:
    subnets = []
    for config in (raw.get("IPAM") or {}).get("Config") or ():
        auxiliary = (config.get("AuxiliaryAddresses") or {}).values()
        subnets.append(
            DockerSubnet(
                subnet=canonical_network(config.get("Subnet") or ""),
                ip_range=canonical_network(config.get("IPRange") or ""),
                gateway=bare(config.get("Gateway") or ""),
                auxiliary=tuple(bare(a) for a in auxiliary if a),
            )
        )
    endpoints = [
        bare(endpoint[field])
        for endpoint in (raw.get("Containers") or {}).values()
        for field in ("IPv4Address", "IPv6Address")
        if endpoint.get(field)
    ]
    return DockerNetwork(
        id=str(raw.get("Id") or ""),
        name=str(raw.get("Name") or ""),
        subnets=tuple(subnets),
        endpoints=tuple(endpoints),
    )


def bare(address: str) -> str:
    """``10.99.0.5/24`` → ``10.99.0.5`` (canonical); the text as given when it is not an address."""
    text = str(address).split("/")[0]
    return canonical_address(text) or text


def canonical_network(text: str) -> str:
    """A network in canonical CIDR form; the text as given when it is not a network (or empty)."""
    try:
        return str(ipaddress.ip_network(text, strict=False))
    except ValueError:
        return text
