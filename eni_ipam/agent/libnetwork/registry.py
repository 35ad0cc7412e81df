"""The driver's registry of pools: every PoolID handed out, with what RequestPool granted for it.

It lives in memory and, given a path, in a state file (JSON with a format version and a checksum,
through :mod:`eni_ipam.agent.files`), so that PoolIDs stay valid across a restart of the agent.

Invariants:

* A change is kept only once the file holds it: :meth:`PoolRegistry.add` and :meth:`PoolRegistry.remove`
  write before they return and undo the change when the write fails (the request then fails with 500).
  Adopted pools are the exception: they stay registered in memory even when they cannot be written,
  since the allocations they were rebuilt from are real.
* Anything but a regular file at the path (a symbolic link, a FIFO) is a ConfigError naming it: the
  agent does not start (:mod:`eni_ipam.agent.files`).
* A file that cannot be read or fails its checksum is moved aside (``<name>.corrupt-<n>``) and reported,
  never silently replaced; the pools it held come back by adoption from their allocations.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
from collections.abc import Iterable
from pathlib import Path

import structlog

from eni_ipam.agent.files import NotRegularFile, checksum, move_aside, read_regular, write_atomically
from eni_ipam.agent.types import Family
from eni_ipam.errors import ConfigError, EniIpamError

from .protocol import IpamRequestError

log = structlog.get_logger("eni_ipam.agent.libnetwork")

OWNER_PREFIX = "libnetwork:"
"""Allocations of a libnetwork pool are owned by ``libnetwork:<PoolID>``."""
REGISTRY_FORMAT = 1

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def parse_network(text: str) -> Network | None:
    try:
        return ipaddress.ip_network(text, strict=False)
    except ValueError:
        return None


@dataclasses.dataclass(slots=True, kw_only=True)
class PoolRecord:
    """One libnetwork pool the driver handed out (an entry of the registry)."""

    pool_id: str
    address_space: str
    pool: str
    """The subnet, in CIDR form (the answer's Pool)."""
    sub_pool: str = ""
    """The CIDR dynamic allocation is restricted to; empty: the whole Pool."""
    allocator_pool: str
    """The allocator pool the addresses come from."""
    gateway: str = ""
    """The subnet's router; empty when unknown."""
    options: dict[str, str] = dataclasses.field(default_factory=dict)
    adopted: bool = False
    """Re-registered from allocations after its registry entry was lost."""
    cursor: str = ""
    """The last address serial allocation handed out from this pool's range (saved, so that a restart
    does not hand out again the address just released)."""

    @property
    def network(self) -> Network:
        return ipaddress.ip_network(self.pool)

    @property
    def range(self) -> Network:
        return ipaddress.ip_network(self.sub_pool or self.pool)

    @property
    def owner(self) -> str:
        return f"{OWNER_PREFIX}{self.pool_id}"

    @property
    def family(self) -> Family:
        return Family.IPV6 if self.network.version == 6 else Family.IPV4


class PoolRegistry:
    """PoolID → :class:`PoolRecord`, saved to ``path`` when there is one (see the module's invariants)."""

    def __init__(self, path: Path | None = None) -> None:
        self._path = path
        self._pools: dict[str, PoolRecord] = {}
        if path is not None:
            self._load(path)

    def get(self, pool_id: str) -> PoolRecord | None:
        return self._pools.get(pool_id)

    def __contains__(self, pool_id: object) -> bool:
        return pool_id in self._pools

    def records(self) -> list[PoolRecord]:
        """The registered pools by PoolID (the records themselves, not copies)."""
        return [r for _, r in sorted(self._pools.items())]

    def add(self, record: PoolRecord) -> None:
        """Register ``record`` and save; when the save fails nothing is registered (IpamRequestError)."""
        if record.pool_id in self._pools:
            raise IpamRequestError(f"PoolID {record.pool_id} is already in use", status=500)
        self._pools[record.pool_id] = record
        try:
            self._save()
        except IpamRequestError:
            del self._pools[record.pool_id]
            raise

    def remove(self, pool_id: str) -> None:
        """Forget ``pool_id`` and save; when the save fails it stays registered (IpamRequestError)."""
        record = self._pools.pop(pool_id)
        try:
            self._save()
        except IpamRequestError:
            self._pools[pool_id] = record
            raise

    def set_cursor(self, pool_id: str, address: str) -> None:
        """Remember the serial position; a failed save is logged, not raised (the position only orders
        the search: losing it costs an early reuse, never a double booking)."""
        record = self._pools.get(pool_id)
        if record is None or record.cursor == address:
            return
        record.cursor = address
        try:
            self._save()
        except IpamRequestError as exc:
            log.warning("libnetwork_cursor_not_saved", pool_id=pool_id, error=exc.message)

    def adopt(self, records: Iterable[PoolRecord]) -> None:
        """Register pools rebuilt from their allocations; kept even when they cannot be saved (logged)."""
        for record in records:
            self._pools[record.pool_id] = record
        try:
            self._save()
        except IpamRequestError as exc:
            log.error("libnetwork_adopted_pools_not_saved", error=exc.message)

    # -- the file --------------------------------------------------------------------------------

    def _save(self) -> None:
        if self._path is None:
            return
        pools = [dataclasses.asdict(r) for r in self.records()]
        document = {"format": REGISTRY_FORMAT, "pools": pools, "checksum": checksum(pools)}
        try:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(self._path, (json.dumps(document, indent=1, sort_keys=True) + "\n").encode())
        except OSError as exc:
            log.error("libnetwork_registry_save_failed", path=str(self._path), error=str(exc))
            raise IpamRequestError(f"cannot save the pool registry {self._path}: {exc}", status=500) from exc

    def _load(self, path: Path) -> None:
        text: str | None = None
        try:
            raw = read_regular(path)
            text = None if raw is None else raw.decode()
        except NotRegularFile as exc:  # put there, not gone bad: refused, as the state file is
            raise ConfigError("state_dir", str(exc)) from None
        except (OSError, UnicodeDecodeError) as exc:
            self._quarantine(path, f"unreadable: {exc}")
        if text is not None:
            try:
                records = _parse(text)
            except ValueError as exc:
                self._quarantine(path, str(exc))
            else:
                self._pools = {r.pool_id: r for r in records}
        log.info("libnetwork_registry_loaded", path=str(path), pools=len(self._pools))

    @staticmethod
    def _quarantine(path: Path, reason: str) -> None:
        try:
            aside = move_aside(path)
        except OSError as exc:
            raise EniIpamError(
                f"the libnetwork pool registry {path} is corrupt ({reason}) and cannot be moved aside: {exc}"
            ) from exc
        log.error("libnetwork_registry_corrupt", path=str(path), moved_to=str(aside), reason=reason)


def _parse(text: str) -> list[PoolRecord]:
    """Raises ValueError saying what is wrong."""
    try:
        document = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(document, dict) or document.get("format") != REGISTRY_FORMAT:
        raise ValueError(f"not a registry of format {REGISTRY_FORMAT}")
    pools = document.get("pools")
    if not isinstance(pools, list):
        raise ValueError("pools: expected a list")
    if document.get("checksum") != checksum(pools):
        raise ValueError("checksum mismatch")
    records = []
    strings = ("pool_id", "address_space", "pool", "sub_pool", "allocator_pool", "gateway")
    for n, raw in enumerate(pools):
        if not isinstance(raw, dict) or not all(isinstance(raw.get(k), str) for k in strings):
            raise ValueError(f"pools[{n}]: malformed entry")
        options = raw.get("options")
        if not isinstance(options, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in options.items()
        ):
            raise ValueError(f"pools[{n}].options: expected a mapping of strings")
        if parse_network(raw["pool"]) is None or (raw["sub_pool"] and parse_network(raw["sub_pool"]) is None):
            raise ValueError(f"pools[{n}]: malformed pool")
        cursor = raw.get("cursor", "")
        if not isinstance(cursor, str):
            raise ValueError(f"pools[{n}].cursor: expected a string")
        records.append(
            PoolRecord(
                **{k: raw[k] for k in strings},
                options=dict(options),
                adopted=bool(raw.get("adopted")),
                cursor=cursor,
            )
        )
    return records
