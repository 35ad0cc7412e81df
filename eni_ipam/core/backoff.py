"""Per-node exponential backoff with jitter (the Kubernetes node-IPAM ``Timeout`` semantics).

Delay for failure *k* (1-based): ``initial * 2**(k-1)`` capped at ``maximum``, jittered uniformly
into ``[delay/2, delay]`` so that nodes failing together do not retry together; a success resets
it. Randomness is injected so tests are reproducible.
"""

from __future__ import annotations

import random


class Backoff:
    __slots__ = ("_rng", "failures", "initial", "maximum")

    def __init__(
        self, *, initial: float = 1.0, maximum: float = 300.0, rng: random.Random | None = None
    ) -> None:
        self.initial = initial
        self.maximum = maximum
        self.failures = 0
        self._rng = rng or random.Random()

    def next_delay(self) -> float:
        """Record a failure and return how long to wait before the next attempt."""
        self.failures += 1
        delay = min(self.initial * 2.0 ** min(self.failures - 1, 62), self.maximum)
        return delay / 2 + self._rng.random() * delay / 2

    def reset(self) -> None:
        self.failures = 0
