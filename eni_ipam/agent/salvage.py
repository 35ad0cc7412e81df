"""What can still be read from a damaged document of the state file: entries, addresses and gaps.

A slot of the state file whose checksum fails may be a write that never completed (a crash, a kill
mid-write) or a document acknowledged and damaged afterwards (a bad sector, a stray write, a
restored block): the two look alike, so a damaged slot is *suspect*, never ignored
(docs/decisions/0034). This module reads what it can of one, without trusting it as a whole.

The document is written by :meth:`~eni_ipam.agent.state.StateFile.save` as JSON with sorted keys and
an indent of one space, so it has a fixed shape line by line: each allocation entry is an object
whose fields are lines indented by three spaces, in sorted order, ``address`` first; the entries are
sorted by address (IPv4 first, then numerically). Reading it line by line:

* a line that is not one of the shapes the writer produces (a field whose value is not JSON, bytes
  overwritten, zeros of a lost sector) is *damage* at that place;
* an entry begins at its ``address`` line, or where a field's key does not sort after the one before
  it (the next entry, whose ``address`` line was damaged);
* the fields of an entry read before the first damage in it are trusted: an entry whose address and
  owner were both read so is *salvaged* whole (with whatever else was read before the damage);
* an address read without its owner is *known* but ownerless;
* every damage may have hidden entries, which lie between the nearest addresses read on either side
  of it (the entries are sorted): that open interval is a *gap*.

Invariants: nothing is guessed. An owner is attached to an address only when both were read, in that
order, with no damage between; a gap is never narrower than the damage could hide. Damage that turns
a value into another well-formed value (a digit changed into another) cannot be located here: that is
why a start also reads every runtime (:mod:`~eni_ipam.agent.start`), which holds the proof.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import re
from collections.abc import Iterable

from .members import canonical_address
from .types import Attachment, RuntimeEntry

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

_FIELD = re.compile(r'^   "([a-z_]+)": (.+?)$')
"""An entry's field: three spaces of indent, a key, a JSON value (with a comma unless last)."""
_STRUCTURE = re.compile(
    r"^(?:\{|\}|  \{|  \},?| \],?| \},?"
    r'| "allocations": \[(?:\],)?| "cursors": \{(?:\},)?| "quarantine": \{(?:\},)?'
    r'|  "[^"]+": "[^"]*",?| "checksum": "sha256:[0-9a-f]{64}",| "generation": \d+,| "version": \d+)$'
)
"""Every other line the writer produces: braces, the top-level keys, the cursors' and the
quarantine's lines."""
_GENERATION = re.compile(r'^ "generation": (\d+),$')
_END = frozenset({" ],", ' "allocations": [],'})
"""The end of the allocations: damage after it hides no entry."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Salvage:
    """What one damaged document still says."""

    generation: int | None = None
    """The document's generation, when its line was read; None otherwise."""
    entries: dict[str, RuntimeEntry] = dataclasses.field(default_factory=dict)
    """address → its owner (and what else was read of it), for entries read with both."""
    ownerless: tuple[str, ...] = ()
    """Addresses read whose owner was not."""
    gaps: tuple[tuple[str | None, str | None], ...] = ()
    """Open intervals ``(after, before)`` of addresses where damage may have hidden entries; None:
    unbounded on that side."""
    damaged_lines: int = 0

    def __bool__(self) -> bool:
        return bool(self.entries or self.ownerless or self.gaps)

    def networks(self) -> list[str]:
        """The ownerless addresses and the gaps, as CIDR networks (for withholding)."""
        out = [str(ipaddress.ip_network(a)) for a in self.ownerless]
        for after, before in self.gaps:
            out += [str(n) for n in interval_networks(after, before)]
        return out


Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def interval_networks(after: str | None, before: str | None) -> list[Network]:
    """The networks covering every address strictly between ``after`` and ``before`` (None: from the
    lowest IPv4 address, or up to the highest IPv6 one), IPv4 sorting before IPv6 as the file does."""
    low: Address = ipaddress.IPv4Address(0)
    high: Address = ipaddress.IPv6Address((1 << 128) - 1)
    first = _step(ipaddress.ip_address(after), +1) if after is not None else low
    last = _step(ipaddress.ip_address(before), -1) if before is not None else high
    if first is None or last is None or _key(first) > _key(last):
        return []
    spans: list[tuple[Address, Address]] = []
    if first.version == last.version:
        spans.append((first, last))
    else:  # from IPv4 into IPv6
        spans += [(first, ipaddress.IPv4Address((1 << 32) - 1)), (ipaddress.IPv6Address(0), last)]
    networks: list[Network] = []
    for start, end in spans:
        networks += ipaddress.summarize_address_range(start, end)
    return networks


def salvage(raw: bytes) -> Salvage:
    """Read what can be read of one damaged document (a slot, or a whole file without slots)."""
    text = raw.decode("utf-8", errors="replace")
    events: list[tuple[str, str, object]] = []  # ("field", key, value) | ("damage", "", None)
    generation: int | None = None
    damaged = 0
    closed = False  # past the end of the allocations
    for line in text.split("\n"):
        line = line.rstrip(" ")
        if not line:
            continue
        if (field := _FIELD.match(line)) is not None:
            value = field[2].removesuffix(",")
            try:
                events.append(("field", field[1], json.loads(value)))
                closed = False
                continue
            except ValueError:
                pass
        elif _STRUCTURE.match(line):
            if (found := _GENERATION.match(line)) is not None:
                generation = int(found[1])
            closed = closed or line in _END
            continue
        damaged += 1
        if not closed:
            events.append(("damage", "", None))
    return _assemble(events, generation, damaged)


@dataclasses.dataclass(slots=True)
class _Entry:
    fields: dict[str, object] = dataclasses.field(default_factory=dict)
    trusted: bool = True
    """No damage yet since the entry began (its fields so far are its own)."""
    address: str | None = None


def _assemble(events: Iterable[tuple[str, str, object]], generation: int | None, damaged: int) -> Salvage:
    # The sequence of entries and damages, in file order.
    sequence: list[_Entry | None] = []  # None: a damage
    current: _Entry | None = None
    last_key = ""
    for kind, key, value in events:
        if kind == "damage":
            sequence.append(None)
            if current is not None:
                current.trusted = False
            continue
        if current is None or key == "address" or key <= last_key:
            current = _Entry()
            sequence.append(current)
            if key != "address":  # its address line was lost: nothing of it is attributable
                current.trusted = False
                sequence.append(None)
        last_key = key
        if key == "address":
            current.address = canonical_address(value) if isinstance(value, str) else None
            if current.address is None:
                current.trusted = False
                sequence.append(None)
            continue
        if current.trusted:
            current.fields[key] = value
    entries: dict[str, RuntimeEntry] = {}
    ownerless: list[str] = []
    for entry in (e for e in sequence if e is not None and e.address is not None):
        assert entry.address is not None
        owner = entry.fields.get("owner")
        if isinstance(owner, str) and owner and entry.address not in entries:
            entries[entry.address] = _runtime_entry(owner, entry.fields)
        elif entry.address not in entries:
            ownerless.append(entry.address)
    return Salvage(
        generation=generation,
        entries=entries,
        ownerless=tuple(a for a in dict.fromkeys(ownerless) if a not in entries),
        gaps=_gaps(sequence),
        damaged_lines=damaged,
    )


def merge_salvages(found: Iterable[Salvage]) -> Salvage:
    """What several damaged documents (both slots of a corrupt file) say together: every entry, the one
    of the higher generation (an unreadable one counting as the highest) where two disagree; every
    ownerless address and gap."""
    ranked = sorted(found, key=lambda f: float("inf") if f.generation is None else f.generation)
    entries: dict[str, RuntimeEntry] = {}
    for one in ranked:  # lowest first: the higher generation's entry is written last
        entries.update(one.entries)
    generations = [f.generation for f in ranked if f.generation is not None]
    return Salvage(
        generation=max(generations) if generations else None,
        entries=entries,
        ownerless=tuple(dict.fromkeys(a for f in ranked for a in f.ownerless if a not in entries)),
        gaps=tuple(dict.fromkeys(g for f in ranked for g in f.gaps)),
        damaged_lines=sum(f.damaged_lines for f in ranked),
    )


def _runtime_entry(owner: str, fields: dict[str, object]) -> RuntimeEntry:
    def text(name: str) -> str:
        value = fields.get(name, "")
        return value if isinstance(value, str) else ""

    attachment = Attachment(
        network=text("network"), netns=text("netns"), pod_uid=text("pod_uid"), pod=text("pod")
    )
    return RuntimeEntry(owner=owner, attachment=attachment, pool=text("pool"))


def _gaps(sequence: list[_Entry | None]) -> tuple[tuple[str | None, str | None], ...]:
    """For each run of damages, the open interval between the nearest addresses read around it."""
    gaps: list[tuple[str | None, str | None]] = []
    for n, item in enumerate(sequence):
        if item is not None or (n and sequence[n - 1] is None):
            continue  # not a damage, or not the first of a run
        after = next((e.address for e in reversed(sequence[:n]) if e is not None and e.address), None)
        before = next((e.address for e in sequence[n + 1 :] if e is not None and e.address), None)
        if (after, before) not in gaps:
            gaps.append((after, before))
    return tuple(gaps)


def _key(address: Address) -> tuple[int, int]:
    return address.version, int(address)


def _step(address: Address, by: int) -> Address | None:
    """The next (or previous) address in the file's order, crossing from IPv4 to IPv6; None at the ends."""
    number = int(address) + by
    if address.version == 4:
        if number < 0:
            return None
        return ipaddress.IPv4Address(number) if number < (1 << 32) else ipaddress.IPv6Address(0)
    if number > (1 << 128) - 1:
        return None
    return ipaddress.IPv6Address(number) if number >= 0 else ipaddress.IPv4Address((1 << 32) - 1)
