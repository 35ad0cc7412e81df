"""The allocator's state file: which address is allocated to whom, surviving a crash or restart.

Document: one JSON object ``{"version": 3, "generation": n, "checksum": "sha256:<hex>",
"allocations": [...], "cursors": {...}, "quarantine": {...}}`` where the checksum covers the canonical
JSON (sorted keys, no spaces) of ``{"allocations": ..., "cursors": ..., "generation": ...,
"quarantine": ...}`` (``quarantine`` only when the document has it: files written before it existed
read with an empty quarantine). Each allocation entry holds the
fields of an :class:`~eni_ipam.agent.types.Allocation` (what the runtime said of its container
included), plus ``expiration_timeout`` (seconds) when an expiration timer runs, so that a restored
allocation gets its timer back. ``cursors`` maps ``<pool>/<family>`` to the last address handed out
serially, so that serial allocation goes on after a restart instead of handing out the address just
released. ``quarantine`` maps each quarantined address to the wall time of its release (RFC 3339,
:mod:`~eni_ipam.agent.quarantine`), read leniently: a time that cannot be read is the quarantine's to
distrust, not a reason to refuse the file. ``generation`` counts the writes.

File: two slots of equal size, one after the other; each holds a document padded with spaces (and
ends with a newline), or only spaces. A change overwrites the slot that does *not* hold the newest
document, in place, and waits for ``fdatasync``: the file's size and blocks never change, so the disk
is asked to store the data alone (no journal commit, no directory entry; about a sixth of the cost
of a new file and a rename, which is a CNI ADD's latency) and a full disk does not stop it. Reading
takes the valid slot with the highest generation. A document that outgrows its slot is written as a
new file twice the size (temporary file, fsync, rename, fsync of the directory). Files of versions 1
and 2 (one document, no slots) are read as they are and replaced by the first write.

Invariants:

* A write is durable before :meth:`StateFile.save` returns, and a crash never loses the newest
  durable state: the slot being written is never the one holding it, so a torn slot (a crash or a
  kill mid-write) leaves the previous document, the last one acknowledged, readable beside it. A
  failed write is retried on the same slot.
* :meth:`StateFile.load` never guesses: a missing file is an empty state; anything but a regular
  file at the path (a symbolic link, a FIFO, a directory) is a ConfigError naming it, not followed
  and not moved aside (:mod:`~eni_ipam.agent.files`); a file with no valid
  document (truncated, garbage, checksum mismatch, another version, an invalid entry, an address listed
  twice) raises :class:`~eni_ipam.agent.errors.CorruptState`.
* A damaged slot beside a valid one is **suspect** when it may be the newer of the two (its generation
  is higher, or cannot be read): a torn write that was never acknowledged and a document damaged after
  its acknowledgement look alike, so it is never ignored (docs/decisions/0034). What can still be read
  of it (:mod:`~eni_ipam.agent.salvage`) is kept in :attr:`StateFile.salvaged`. A damaged slot whose
  generation reads lower than the valid one's is the older copy, superseded: it is logged only.
* :func:`read_state` (behind ``Allocator.restore``) never resets silently and never needs free disk:
  a corrupt file, or one with a suspect slot, is logged, renamed aside (``<name>.corrupt-<n>``,
  ``<name>.suspect-<n>``: a rename takes no space) with what could be read of it salvaged; whether the
  start can write again is the writer's business, and :func:`~eni_ipam.agent.files.compact` makes
  the renamed copy small when the disk has no room for a new file beside it.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import structlog

from eni_ipam.agent.errors import CorruptState
from eni_ipam.agent.files import (
    NotRegularFile,
    checksum,
    move_aside,
    read_regular,
    write_atomically,
    write_in_place,
)
from eni_ipam.errors import ConfigError

from .salvage import Salvage, merge_salvages, salvage
from .types import Allocation

VERSION = 3
"""The format version this code writes; it reads this one and versions 2 and 1."""
MIN_SLOT = 64 * 1024
"""Smallest slot (bytes): about 200 allocations before the file first grows."""

log = structlog.get_logger("eni_ipam.agent.state")

_STRING_FIELDS = (
    "address",
    "pool",
    "owner",
    "gateway",
    "interface_id",
    "subnet_id",
    "expiration_uuid",
    "network",
    "netns",
    "pod_uid",
    "pod",
)


@dataclasses.dataclass(frozen=True, slots=True)
class Snapshot:
    """What a state file holds: the allocations and, by address, the timeouts of their running timers."""

    allocations: list[Allocation]
    timeouts: dict[str, float]
    cursors: dict[str, str] = dataclasses.field(default_factory=dict)
    """``<pool>/<family>`` → the last address handed out serially."""
    quarantine: dict[str, object] = dataclasses.field(default_factory=dict)
    """Quarantined address → the wall time of its release, as saved (not checked: see the module)."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class RestoreReport:
    """What ``Allocator.restore`` did."""

    restored: tuple[Allocation, ...] = ()
    """Read back from the state file's newest valid slot."""
    salvaged: tuple[Allocation, ...] = ()
    """Read from a suspect slot or a corrupt file, and held (owner and address both read)."""
    rebuilt: tuple[Allocation, ...] = ()
    """Taken from what the runtimes hold and the state file did not say."""
    replaced: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Addresses the state file gave another owner than a runtime proven live holds them for: address
    → the owner dropped (the runtime's owner holds it now)."""
    dropped: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """Runtime entries (address → owner) not kept: not an address, no owner, or held by another owner
    that is kept."""
    not_in_pool: tuple[Allocation, ...] = ()
    """Restored or rebuilt allocations whose address is not (yet) a member of their pool: kept, never
    handed to another owner."""
    corrupt: str = ""
    """Why the state file was refused; empty when it was valid or missing."""
    suspect: str = ""
    """Why a slot of the state file is suspect; empty when none is."""
    moved_to: str = ""
    """Where the refused (or suspect) state file was renamed."""
    missing: bool = False
    """There was no state file (first start, or it was deleted)."""
    unaccounted: tuple[str, ...] = ()
    """Networks (CIDR) of addresses the damaged state may have listed without saying whose: the
    addresses read without their owner, and the gaps where damage may have hidden entries (logged: a
    runtime holding one is read, or withholds what it may hold)."""
    unsaved: str = ""
    """Why what the start settled could not be written (a full disk); empty when it was, or needed no
    write. The agent serves it from memory, and refuses changes until a write succeeds."""


@dataclasses.dataclass(frozen=True, slots=True)
class _Layout:
    """Where the newest durable document of the file is: slot size (0: not a slotted file), slot."""

    slot_size: int = 0
    slot: int = 0
    generation: int = 0


class StateFile:
    """One state file at ``path`` (its directory must exist and be writable)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._layout: _Layout | None = None
        """The file as last read or written (None: not looked at yet)."""
        self.salvaged: Salvage | None = None
        """What the last :meth:`read` could still read of a suspect slot, or of a corrupt file; None
        when it found neither."""
        self.suspect = ""
        """Why the last :meth:`read` found a suspect slot (empty: it did not)."""

    def __repr__(self) -> str:
        return f"StateFile({str(self.path)!r})"

    # -- writing -----------------------------------------------------------------------------------

    def save(
        self,
        allocations: Iterable[Allocation],
        timeouts: Mapping[str, float] | None = None,
        cursors: Mapping[str, str] | None = None,
        quarantine: Mapping[str, str] | None = None,
    ) -> None:
        """Replace the file's content with ``allocations`` atomically and durably.

        ``timeouts`` gives, by address, the timeout of each allocation that carries an
        ``expiration_uuid``; an allocation with a UUID but no timeout is a ValueError. ``cursors``:
        ``<pool>/<family>`` → the last address handed out serially. ``quarantine``: quarantined
        address → the wall time of its release.
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
        saved_cursors = dict(sorted((cursors or {}).items()))
        layout = self._known()
        generation = layout.generation + 1
        saved_quarantine = dict(sorted((quarantine or {}).items(), key=lambda item: _sort_key(item[0])))
        covered = {
            "allocations": entries,
            "cursors": saved_cursors,
            "generation": generation,
            "quarantine": saved_quarantine,
        }
        document = {"version": VERSION, "checksum": checksum(covered), **covered}
        data = json.dumps(document, sort_keys=True, indent=1).encode() + b"\n"
        if layout.slot_size and len(data) <= layout.slot_size:
            target = 1 - layout.slot
            write_in_place(self.path, target * layout.slot_size, _pad(data, layout.slot_size))
            self._layout = _Layout(layout.slot_size, target, generation)
            return
        size = max(MIN_SLOT, 1 << (2 * len(data) - 1).bit_length())
        write_atomically(self.path, _pad(data, size) + _pad(b"", size))
        self._layout = _Layout(size, 0, generation)

    def _known(self) -> _Layout:
        if self._layout is None:
            try:
                self.read()
            except CorruptState:
                self._layout = _Layout()  # the next write replaces the file (after recover moved it aside)
        return self._layout or _Layout()

    # -- reading -----------------------------------------------------------------------------------

    def load(self) -> list[Allocation]:
        """The saved allocations; [] if the file does not exist. CorruptState for anything invalid."""
        return self.read().allocations

    def read(self) -> Snapshot:
        """The saved allocations with their timers' timeouts, from the newest valid slot (see
        :meth:`load`); what a suspect slot or a corrupt file still says is left in :attr:`salvaged`."""
        self._layout = _Layout()
        self.salvaged, self.suspect = None, ""
        try:
            raw = read_regular(self.path)
        except NotRegularFile as exc:
            # Not a state file that went bad but something put in its place: moving it aside and
            # starting afresh would hide it; the agent refuses to start until a person looks.
            raise ConfigError("state_dir", str(exc)) from None
        except OSError as exc:
            raise self._corrupt(f"unreadable: {exc}") from exc
        if raw is None:
            return Snapshot([], {})
        size = len(raw) // 2
        if size >= MIN_SLOT and len(raw) % 2 == 0:
            found: list[tuple[int, int, Snapshot]] = []
            damaged: list[tuple[int, bytes, str]] = []
            for slot in (0, 1):
                chunk = raw[slot * size : (slot + 1) * size]
                if not chunk.strip():
                    continue
                try:
                    generation, snapshot = self._document(chunk, versions=(VERSION,))
                except CorruptState as exc:
                    damaged.append((slot, chunk, exc.args[0].split(": ", 1)[-1]))
                else:
                    found.append((generation, slot, snapshot))
            problems = [f"slot {slot}: {why}" for slot, _, why in damaged]
            if found:
                generation, slot, snapshot = max(found, key=lambda f: f[0])
                for bad, chunk, why in damaged:
                    self._judge_damaged_slot(bad, chunk, why, newest=generation)
                self._layout = _Layout(size, slot, generation)
                return snapshot
            try:
                generation, snapshot = self._document(raw, versions=(1, 2))
            except CorruptState:
                self.salvaged = merge_salvages([salvage(chunk) for _, chunk, _ in damaged])
                raise self._corrupt("; ".join(problems) or "no document in either slot") from None
        else:
            try:
                generation, snapshot = self._document(raw, versions=(1, 2))
            except CorruptState:
                self.salvaged = salvage(raw)
                raise
        self._layout = _Layout(0, 0, generation)
        return snapshot

    def _judge_damaged_slot(self, slot: int, chunk: bytes, why: str, *, newest: int) -> None:
        """A damaged slot beside the valid one of generation ``newest``: superseded when its own
        generation reads lower, suspect otherwise (see the module's invariants)."""
        found = salvage(chunk)
        if found.generation is not None and found.generation < newest:
            # The older copy, damaged: the valid slot holds everything acknowledged since. (A write
            # torn early leaves the older document's end, and its generation, in place.)
            log.warning(
                "state_slot_damaged", path=str(self.path), slot=slot, generation=found.generation,
                newest=newest, why=why,
            )  # fmt: skip
            return
        generation = "unreadable" if found.generation is None else str(found.generation)
        self.suspect = f"slot {slot} (generation {generation}, beside {newest}): {why}"
        self.salvaged = found
        log.warning(
            "state_slot_suspect",
            path=str(self.path),
            slot=slot,
            generation=found.generation,
            newest=newest,
            why=why,
            salvaged=sorted(found.entries),
            ownerless=list(found.ownerless),
            gaps=[list(g) for g in found.gaps],
        )

    def _document(self, raw: bytes, *, versions: tuple[int, ...]) -> tuple[int, Snapshot]:
        """(generation, snapshot) of one document of one of ``versions``; CorruptState otherwise."""
        try:
            document = json.loads(raw.decode())
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise self._corrupt(f"not JSON: {exc}") from exc
        if not isinstance(document, dict):
            raise self._corrupt("not a JSON object")
        version = document.get("version")
        if version not in versions or isinstance(version, bool):
            expected = f"{VERSION} (or 2 or 1, in a file without slots)"
            raise self._corrupt(f"format version {version!r}, expected {expected}")
        entries = document.get("allocations")
        if not isinstance(entries, list):
            raise self._corrupt("no allocation list")
        cursors = document.get("cursors", {}) if version >= 2 else {}
        if not isinstance(cursors, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in cursors.items()
        ):
            raise self._corrupt("cursors is not a map of strings")
        generation = document.get("generation", 0) if version >= 3 else 0
        if type(generation) is not int or generation < (1 if version >= 3 else 0):
            raise self._corrupt(f"generation {generation!r} is not a positive integer")
        covered: object = entries
        if version == 2:
            covered = {"allocations": entries, "cursors": cursors}
        elif version >= 3:
            # ``quarantine`` is covered when the document has it (written since the quarantine exists).
            extra = {"quarantine": document["quarantine"]} if "quarantine" in document else {}
            covered = {"allocations": entries, "cursors": cursors, "generation": generation, **extra}
        if document.get("checksum") != checksum(covered):
            raise self._corrupt("checksum mismatch")
        quarantine = document.get("quarantine", {}) if version >= 3 else {}
        if not isinstance(quarantine, dict) or not all(
            isinstance(k, str) and _canonical(k) for k in quarantine
        ):
            raise self._corrupt("quarantine is not a map of addresses")
        allocations: list[Allocation] = []
        timeouts: dict[str, float] = {}
        for index, entry in enumerate(entries):
            allocation, timeout = self._parse(index, entry)
            if any(a.address == allocation.address for a in allocations):
                raise self._corrupt(f"entry {index}: {allocation.address} is listed twice")
            allocations.append(allocation)
            if timeout is not None:
                timeouts[allocation.address] = timeout
        return generation, Snapshot(allocations, timeouts, dict(cursors), dict(quarantine))

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
            network=entry.get("network", ""),
            netns=entry.get("netns", ""),
            pod_uid=entry.get("pod_uid", ""),
            pod=entry.get("pod", ""),
        )
        return allocation, (float(timeout) if timeout is not None else None)

    def _corrupt(self, why: str) -> CorruptState:
        return CorruptState(f"state file {self.path}: {why}", path=str(self.path))

    # -- moving aside ------------------------------------------------------------------------------

    def move_aside(self, suffix: str = "corrupt") -> Path:
        """Rename the file to ``<name>.<suffix>-<n>`` (the lowest free ``n`` from 1); returns the new
        path. The next write makes a new file."""
        self._layout = _Layout()
        return move_aside(self.path, suffix)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Reading:
    """What a start read of its state file (:func:`read_state`)."""

    snapshot: Snapshot = dataclasses.field(default_factory=lambda: Snapshot([], {}))
    """The newest valid slot's allocations, timers and cursors (empty when none is valid)."""
    salvaged: Salvage | None = None
    """What a suspect slot or a corrupt file still says (None: nothing was damaged)."""
    corrupt: str = ""
    suspect: str = ""
    moved_to: str = ""
    missing: bool = False


def read_state(state: StateFile | None) -> Reading:
    """Read ``state`` at a start: the newest valid slot, and what any damage left readable.

    A corrupt file, and a file with a suspect slot, are renamed aside (logged) so that the first write
    cannot overwrite the evidence; a corrupt file that cannot be renamed stops the start
    (CorruptState), a suspect one is then kept in place (the next write overwrites the damaged slot:
    what it says has been salvaged, and the renaming failure is logged)."""
    if state is None:
        return Reading(missing=True)
    missing = not os.path.lexists(state.path)
    try:
        snapshot = state.read()
    except CorruptState as exc:
        corrupt = str(exc)
        log.error("state_corrupt", path=str(state.path), error=corrupt)
        try:
            moved_to = str(state.move_aside())
        except OSError as error:
            log.error("state_move_aside_failed", path=str(state.path), error=str(error))
            raise CorruptState(f"{corrupt}; moving it aside failed: {error}", path=exc.path) from exc
        return Reading(salvaged=state.salvaged, corrupt=corrupt, moved_to=moved_to)
    if not state.suspect:
        return Reading(snapshot=snapshot, missing=missing)
    salvaged, suspect = state.salvaged, state.suspect
    moved_to = ""
    try:
        moved_to = str(state.move_aside(suffix="suspect"))
    except OSError as error:
        log.error("state_move_aside_failed", path=str(state.path), error=str(error))
    else:
        log.warning("state_moved_aside", path=str(state.path), moved_to=moved_to, why=suspect)
    return Reading(snapshot=snapshot, salvaged=salvaged, suspect=suspect, moved_to=moved_to)


def _pad(data: bytes, size: int) -> bytes:
    """``data`` padded with spaces to ``size`` bytes, the last a newline (JSON allows the spaces)."""
    return data.rstrip(b"\n").ljust(size - 1) + b"\n"


def _canonical(text: str) -> bool:
    """Whether ``text`` is an address in canonical form."""
    try:
        return str(ipaddress.ip_address(text)) == text
    except ValueError:
        return False


def _sort_key(address: str) -> tuple[int, int]:
    parsed = ipaddress.ip_address(address)
    return parsed.version, int(parsed)
