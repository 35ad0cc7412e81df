"""The node-local allocator's errors (drawn with the whole tree in :mod:`eni_ipam.errors`).

The agent's JSON API, the CNI plugin and the libnetwork driver map each to their protocol's own
answer; ``address`` and ``pool`` say which, when known.
"""

from __future__ import annotations

from eni_ipam.errors import EniIpamError


class AllocatorError(EniIpamError):
    """The node-local allocator refused a request. ``address`` and ``pool`` say which, when known."""

    def __init__(self, message: str, *, address: str = "", pool: str = "") -> None:
        super().__init__(message)
        self.address = address
        self.pool = pool


class FamilyDisabled(AllocatorError):
    """The address family is not enabled on this node (the seed's ErrIPv4Disabled / ErrIPv6Disabled)."""


class UnknownPool(AllocatorError):
    """No pool of that name exists on this node."""


class NotInPool(AllocatorError):
    """The address is not available in the pool: not a member, excluded, or held for release."""


class AlreadyAllocated(AllocatorError):
    """The address is allocated to an owner already."""


class NotAllocated(AllocatorError):
    """The address is not allocated, so it cannot be released."""


class PoolExhausted(AllocatorError):
    """No free address of the requested family is left in the pool."""


class PoolWithheld(PoolExhausted):
    """No address of the pool can be handed out *now*: the free ones are withheld while a source that
    may hold them cannot be read (Docker's API, the API server's pods, a damaged state file's gaps).
    ``waiting`` says which, in words; try again later."""

    def __init__(self, message: str, *, pool: str = "", waiting: tuple[str, ...] = ()) -> None:
        super().__init__(message, pool=pool)
        self.waiting = waiting


class ExpirationMismatch(AllocatorError):
    """The UUID does not name the address's running expiration timer."""


class StateNotWritten(AllocatorError):
    """The allocator's state file could not be written (a full or failing disk): the change was
    undone, nothing was handed out or released; try again later."""


class CorruptState(AllocatorError):
    """The allocator's state file cannot be trusted: unreadable, not JSON, another format version,
    a checksum mismatch, or an invalid entry. ``path`` names the file."""

    def __init__(self, message: str, *, path: str = "") -> None:
        super().__init__(message)
        self.path = path
