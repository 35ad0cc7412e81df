"""The node side of the release handshake: answers to the controller's marks, and the holds they put on
addresses.

The controller marks an excess address (``marked-for-release``); the agent answers ``do-not-release`` if
it is allocated, else ``ready-for-release``; only then does the controller unassign it (``released``),
and the agent drops it from the pool.

Invariants:

* An address a pool's current marks name is held: never handed out, from any pool, until a later answer
  for that pool no longer names it.
* An address whose ``ready-for-release`` answer is still published stays held even when its mark is
  withdrawn, until the answer is gone too: the controller never acts on a stale answer for an address
  handed out meanwhile.
* No answers before the allocator is restored: until then, what is allocated is not known.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

import structlog

from eni_ipam.core.model import ReleaseState

from .members import PoolMembers, address_key, canonical_address
from .types import Allocation

log = structlog.get_logger("eni_ipam.agent.allocator")


class ReleaseHolds:
    """The addresses held by the release handshake, by the pool whose marks (or answers) name them."""

    def __init__(self) -> None:
        self._held: dict[str, set[str]] = {}

    def __contains__(self, address: object) -> bool:
        return any(address in held for held in self._held.values())

    def count(self) -> int:
        """Addresses held, across pools (one held for two pools counts once)."""
        return len(set().union(*self._held.values()))

    def answer(
        self,
        marks: Mapping[str, ReleaseState],
        pool: str,
        *,
        members: PoolMembers | None,
        allocations: Mapping[str, Allocation],
        published: Collection[str],
        restored: bool,
    ) -> dict[str, ReleaseState]:
        """Answer ``pool``'s whole current set of marks and replace its holds; see
        :meth:`eni_ipam.agent.allocator.Allocator.answer_release`. A released address is dropped from
        ``members``."""
        held: set[str] = set()
        answers: dict[str, ReleaseState] = {}
        for address, state in marks.items():
            if (canonical := canonical_address(address)) is None:
                log.warning("release_mark_invalid", address=address, pool=pool)
                continue
            held.add(canonical)
            current = allocations.get(canonical)
            if state == ReleaseState.MARKED:
                answers[address] = ReleaseState.DO_NOT_RELEASE if current else ReleaseState.READY
            elif state == ReleaseState.RELEASED:
                if members is not None and members.discard(canonical):
                    log.info("released_address_dropped", address=canonical, pool=pool)
                if current is not None:
                    log.warning(
                        "released_address_allocated", address=canonical, owner=current.owner, pool=pool
                    )
        for address in published:
            canonical = canonical_address(address)
            if canonical is not None and marks.get(address) != ReleaseState.RELEASED:
                held.add(canonical)
        previous = self._held.pop(pool, set())
        if held:
            self._held[pool] = held
        if held != previous:
            added, freed = sorted(held - previous, key=address_key), sorted(previous - held, key=address_key)
            log.info("release_holds_changed", pool=pool, held=len(held), added=added, freed=freed)
        if not restored:
            log.info("release_answers_deferred", pool=pool, marks=len(marks), reason="not restored yet")
            return {}
        log.debug("release_answered", pool=pool, answers=len(answers))
        return answers
