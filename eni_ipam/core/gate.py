"""Whether a mutating cloud call may go out *now*, asked where it goes out.

The mutation fence (:mod:`eni_ipam.core.fence`) admits a provider's mutating method at its start.
Between that moment and the request reaching the cloud, time passes: the call waits for a token of
its rate limiter's bucket (seconds under throttling), an SDK retries it after a backoff, one method
makes several requests (create, then attach). A process stopped meanwhile (SIGSTOP, a frozen VM)
resumes with all of them due at once. So the fence is also asked again at each request: the
admitted method runs with the fence as the *current gate* (a context variable, so it follows the
call into the tasks and the worker threads that carry it out), and
:meth:`~eni_ipam.core.caller.ApiCaller.call` asks it once the token is granted, as a provider's
SDK hook does before each retry.

Invariant: a request made on behalf of a fenced method goes out only if the gate said yes just
before; a request outside any fenced method (a read, a resync) has no gate and is never refused.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Protocol


class Gate(Protocol):
    def check(self) -> None:
        """Return if a mutating request may go out now; raise
        :class:`~eni_ipam.core.errors.Fenced` (or its :class:`~eni_ipam.core.errors.Lapsed`)
        otherwise. Cheap, and safe to call from any thread."""
        ...


_CURRENT: contextvars.ContextVar[Gate | None] = contextvars.ContextVar("eni_ipam_gate", default=None)


def check_current_gate() -> None:
    """Ask the current gate, if there is one (raises as :meth:`Gate.check`)."""
    gate = _CURRENT.get()
    if gate is not None:
        gate.check()


@contextlib.contextmanager
def gated(gate: Gate) -> Iterator[None]:
    """Run the block (and what it starts, in its context) with ``gate`` as the current gate."""
    token = _CURRENT.set(gate)
    try:
        yield
    finally:
        _CURRENT.reset(token)
