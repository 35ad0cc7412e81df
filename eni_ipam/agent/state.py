"""The allocator's state file: which address is allocated to whom, surviving a crash or restart.

Format: one JSON object ``{"version": 1, "checksum": "sha256:<hex>", "allocations": [...]}`` where the
checksum covers the canonical JSON of the allocations (sorted keys, no spaces). Each entry holds the
fields of an :class:`~eni_ipam.agent.types.Allocation`, plus ``expiration_timeout`` (seconds) when an
expiration timer runs, so that a restored allocation gets its timer back.

Invariants:

* A write is atomic and durable: the new content goes to a temporary file in the same directory,
  is flushed and fsync'd, renamed over the target, and the directory is fsync'd. A crash leaves
  either the old file or the new one, never a mix; a failed write leaves the old file in place.
* :meth:`StateFile.load` never guesses: a missing file is an empty state; anything else that is not
  exactly a valid file of this version (truncated, garbage, checksum mismatch, another version,
  an invalid entry, an address listed twice) raises :class:`~eni_ipam.core.errors.CorruptState`.
* :func:`recover` (behind ``Allocator.restore``) never resets silently: a corrupt file is logged, moved
  aside (``<name>.corrupt-<n>``) and reported, and the allocations are rebuilt from the runtime's view of
  the addresses in use.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import math
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import structlog

from eni_ipam.agent.files import checksum, move_aside, write_atomically
from eni_ipam.core.errors import CorruptState

from .types import Allocation

VERSION = 1
"""The format version this code writes and accepts."""

log = structlog.get_logger("eni_ipam.agent.state")

_STRING_FIELDS = ("address", "pool", "owner", "gateway", "interface_id", "subnet_id", "expiration_uuid")


@dataclasses.dataclass(frozen=True, slots=True)
class Snapshot:
    """What a state file holds: the allocations and, by address, the timeouts of their running timers."""

    allocations: list[Allocation]
    timeouts: dict[str, float]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class RestoreReport:
    """What ``Allocator.restore`` did."""

    restored: tuple[Allocation, ...] = ()
    """Read back from the state file."""
    rebuilt: tuple[Allocation, ...] = ()
    """Taken from the runtime's view, because the state file was corrupt or missing."""
    dropped: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Runtime entries (address → owner) not kept: not an address, no owner, or a duplicate."""
    not_in_pool: tuple[Allocation, ...] = ()
    """Restored or rebuilt allocations whose address is not (yet) a member of their pool: kept, never
    handed to another owner."""
    corrupt: str = ""
    """Why the state file was refused; empty when it was valid or missing."""
    moved_to: str = ""
    """Where the refused state file was moved."""
    missing: bool = False
    """There was no state file (first start, or it was deleted)."""


class StateFile:
    """One state file at ``path`` (its directory must exist and be writable)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"StateFile({str(self.path)!r})"

    # -- writing -----------------------------------------------------------------------------------

    def save(self, allocations: Iterable[Allocation], timeouts: Mapping[str, float] | None = None) -> None:
        """Replace the file's content with ``allocations`` atomically and durably.

        ``timeouts`` gives, by address, the timeout of each allocation that carries an
        ``expiration_uuid``; an allocation with a UUID but no timeout is a ValueError.
        """
        timeouts = timeouts or {}
        entries = []
        for allocation in sorted(allocations, key=lambda a: _sort_key(a.address)):
            entry: dict[str, Any] = dataclasses.asdict(allocation)
            if allocation.expiration_uuid:
                if allocation.address not in timeouts:
                    raise ValueError(f"{allocation.address}: expiration timer without a timeout")
                entry["expiration_timeout"] = float(timeouts[allocation.address])
            entries.append(entry)
        document = {"version": VERSION, "checksum": checksum(entries), "allocations": entries}
        data = json.dumps(document, sort_keys=True, indent=1).encode() + b"\n"
        write_atomically(self.path, data)

    # -- reading -----------------------------------------------------------------------------------

    def load(self) -> list[Allocation]:
        """The saved allocations; [] if the file does not exist. CorruptState for anything invalid."""
        return self.read().allocations

    def read(self) -> Snapshot:
        """The saved allocations with their timers' timeouts (see :meth:`load`)."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return Snapshot([], {})
        except OSError as exc:
            raise self._corrupt(f"unreadable: {exc}") from exc
        try:
            document = json.loads(raw.decode())
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise self._corrupt(f"not JSON: {exc}") from exc
        if not isinstance(document, dict):
            raise self._corrupt("not a JSON object")
        version = document.get("version")
        if version != VERSION:
            raise self._corrupt(f"format version {version!r}, expected {VERSION}")
        entries = document.get("allocations")
        if not isinstance(entries, list):
            raise self._corrupt("no allocation list")
        if document.get("checksum") != checksum(entries):
            raise self._corrupt("checksum mismatch")
        allocations: list[Allocation] = []
        timeouts: dict[str, float] = {}
        for index, entry in enumerate(entries):
            allocation, timeout = self._parse(index, entry)
            if any(a.address == allocation.address for a in allocations):
                raise self._corrupt(f"entry {index}: {allocation.address} is listed twice")
            allocations.append(allocation)
            if timeout is not None:
                timeouts[allocation.address] = timeout
        return Snapshot(allocations, timeouts)

    def _parse(self, index: int, entry: object) -> tuple[Allocation, float | None]:
        def bad(why: str) -> CorruptState:
            return self._corrupt(f"entry {index}: {why}")

        if not isinstance(entry, dict):
            raise bad("not an object")
        for name in _STRING_FIELDS:
            if not isinstance(entry.get(name, ""), str):
                raise bad(f"{name} is not a string")
        for name in ("address", "pool", "owner"):
            if not entry.get(name):
                raise bad(f"{name} is missing")
        try:
            address = ipaddress.ip_address(entry["address"])
        except ValueError as exc:
            raise bad(str(exc)) from exc
        if str(address) != entry["address"]:
            raise bad(f"{entry['address']} is not in canonical form")
        prefix_length = entry.get("prefix_length")
        if type(prefix_length) is not int or not 0 <= prefix_length <= address.max_prefixlen:
            raise bad(f"prefix_length {prefix_length!r} is invalid")
        timeout = entry.get("expiration_timeout")
        if entry.get("expiration_uuid"):
            if not isinstance(timeout, int | float) or isinstance(timeout, bool):
                raise bad(f"expiration_timeout {timeout!r} is not a number")
            if not (math.isfinite(timeout) and timeout >= 0):
                raise bad(f"expiration_timeout {timeout!r} is invalid")
        elif timeout is not None:
            raise bad("expiration_timeout without an expiration_uuid")
        allocation = Allocation(
            address=entry["address"],
            pool=entry["pool"],
            owner=entry["owner"],
            prefix_length=prefix_length,
            gateway=entry.get("gateway", ""),
            interface_id=entry.get("interface_id", ""),
            subnet_id=entry.get("subnet_id", ""),
            expiration_uuid=entry.get("expiration_uuid", ""),
        )
        return allocation, (float(timeout) if timeout is not None else None)

    def _corrupt(self, why: str) -> CorruptState:
        return CorruptState(f"state file {self.path}: {why}", path=str(self.path))

    # -- moving aside ------------------------------------------------------------------------------

    def move_aside(self) -> Path:
        """Rename the file to ``<name>.corrupt-<n>`` (the lowest free ``n`` from 1); returns the new path."""
        return move_aside(self.path)


def recover(
    state: StateFile | None, runtime: Mapping[str, str], place: Callable[[str, str], Allocation | None]
) -> tuple[RestoreReport, dict[str, float]]:
    """Read ``state``; when it is corrupt (then logged and moved aside) or missing, rebuild from ``runtime``.

    ``place(address, owner)`` gives the allocation to rebuild (None: drop the entry). Returns
    the report (``not_in_pool`` is left to the caller) and the timeouts of the restored timers.
    """
    snapshot, corrupt, moved_to, missing = Snapshot([], {}), "", "", state is None
    if state is not None:
        try:
            missing = not state.path.exists()
            snapshot = state.read()
        except CorruptState as exc:
            corrupt = str(exc)
            log.error("state_corrupt", path=str(state.path), error=corrupt)
            try:
                moved_to = str(state.move_aside())
            except OSError as error:
                log.error("state_move_aside_failed", path=str(state.path), error=str(error))
                raise CorruptState(f"{corrupt}; moving it aside failed: {error}", path=exc.path) from exc
    rebuilt: dict[str, Allocation] = {}
    dropped: dict[str, str] = {}
    for address, owner in runtime.items() if corrupt or missing else ():
        allocation = place(address, owner) if owner else None
        if allocation is None or allocation.address in rebuilt:
            dropped[address] = owner
        else:
            rebuilt[allocation.address] = allocation
    if rebuilt or dropped:
        log.warning("state_rebuilt", rebuilt=sorted(rebuilt, key=_sort_key), dropped=dropped)
    report = RestoreReport(
        restored=tuple(snapshot.allocations),
        rebuilt=tuple(sorted(rebuilt.values(), key=lambda a: _sort_key(a.address))),
        dropped=dropped,
        corrupt=corrupt,
        moved_to=moved_to,
        missing=missing,
    )
    return report, snapshot.timeouts


def _sort_key(address: str) -> tuple[int, int]:
    parsed = ipaddress.ip_address(address)
    return parsed.version, int(parsed)
