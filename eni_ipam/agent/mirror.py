"""A second record of the addresses handed to Docker: what Docker may hold while it cannot be read.

The agent is Docker's only allocator on its networks (the libnetwork driver), so Docker can hold an
address only if the agent handed it to a ``libnetwork:`` owner and Docker has not released it. The
state file says so, unless it is damaged or an older copy was put back; Docker's API says so, unless
dockerd does not answer (it waits for this driver while it starts, or it hangs). When neither can be
trusted, everything in Docker's subnets would have to be withheld, and with a pool shared by Docker
and CNI every pod's ADD would wait for dockerd. This file, ``libnetwork-addresses.json`` beside the
state file, is a record of its own: a state file of the same format (two slots written in place, a
checksum, so it works on a full disk) holding the ``libnetwork:`` allocations alone.

Invariants:

* **A superset.** Whenever an address is handed to a ``libnetwork:`` owner, the mirror holds it
  before the allocator's state file does (:meth:`Mirror.before`); it drops an address only after the
  state file no longer holds it (:meth:`Mirror.after`). A failed write of the mirror before the change
  fails the change (undone, as a failed state write); one after it is logged, and the mirror keeps an
  address too many: it over-withholds, never under-withholds.
* **Trusted only when it is whole.** Read at the start (:meth:`Mirror.load`): a valid file is trusted,
  and what it lists stays in it (:attr:`Mirror.floor`) until Docker has been read (:meth:`settle`),
  whatever the allocations say, since a stale state file may lack them. A damaged, suspect or missing
  mirror is not trusted and is not written until Docker has been read: writing it would make an
  incomplete record look whole to the next start.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

import structlog

from .errors import CorruptState
from .state import StateFile
from .types import Allocation

log = structlog.get_logger("eni_ipam.agent.mirror")

FILE_NAME = "libnetwork-addresses.json"


class Mirror:
    """The allocations of the owners ``mirrored`` selects, in a state file of their own."""

    def __init__(self, state: StateFile, mirrored: Callable[[str], bool]) -> None:
        self.state = state
        self.mirrored = mirrored
        self.trusted = False
        """Written as allocations change (a valid file was read, or Docker has been read since)."""
        self.floor: dict[str, Allocation] = {}
        """What the file listed at the start: kept in it until Docker has been read."""
        self._saved: dict[str, Allocation] = {}

    def load(self) -> tuple[str, list[Allocation]]:
        """Read the file at the start: ``("valid", allocations)`` (then trusted), ``("missing", [])``,
        or ``("damaged: <why>", what its valid slot lists)`` (not trusted)."""
        try:
            allocations = self.state.load()
        except CorruptState as exc:
            log.warning("libnetwork_mirror_damaged", path=str(self.state.path), error=str(exc))
            return f"damaged: {exc}", []
        if self.state.suspect:
            log.warning("libnetwork_mirror_damaged", path=str(self.state.path), error=self.state.suspect)
            return f"damaged: {self.state.suspect}", allocations
        if not self.state.path.exists():
            return "missing", []
        self.trusted = True
        self.floor = self._saved = {a.address: a for a in allocations}
        return "valid", allocations

    def before(self, allocations: Mapping[str, Allocation]) -> None:
        """Before the state file is written: record what is being handed out. Raises OSError."""
        if not self.trusted:
            return
        wanted = self._wanted(allocations)
        if wanted.keys() <= self._saved.keys():
            return
        self._write({**self._saved, **wanted})

    def after(self, allocations: Mapping[str, Allocation]) -> None:
        """After the state file is written: forget what was released (a failure is logged)."""
        if not self.trusted:
            return
        wanted = self._wanted(allocations)
        if wanted.keys() == self._saved.keys():
            return
        try:
            self._write(wanted)
        except OSError as exc:  # the mirror keeps a released address a while: over-withholding only
            log.warning("libnetwork_mirror_not_written", path=str(self.state.path), error=str(exc))

    def settle(self, allocations: Mapping[str, Allocation]) -> None:
        """Docker has been read, and what it holds adopted: from now on the mirror is exactly the
        ``libnetwork:`` allocations (a failure is logged; the next change writes it again)."""
        self.trusted = True
        self.floor = {}
        try:
            self._write(self._wanted(allocations))
        except OSError as exc:
            self._saved = {}
            log.warning("libnetwork_mirror_not_written", path=str(self.state.path), error=str(exc))

    def _wanted(self, allocations: Mapping[str, Allocation]) -> dict[str, Allocation]:
        wanted = dict(self.floor)
        wanted.update((a, x) for a, x in allocations.items() if self.mirrored(x.owner))
        return wanted

    def _write(self, allocations: Mapping[str, Allocation]) -> None:
        # Only the addresses matter here: an expiration timer is the state file's business.
        self.state.save(dataclasses.replace(a, expiration_uuid="") for a in allocations.values())
        self._saved = dict(allocations)
