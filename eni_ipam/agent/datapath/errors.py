"""The datapath's error (drawn with the whole tree in :mod:`eni_ipam.errors`)."""

from __future__ import annotations

from eni_ipam.errors import EniIpamError


class DatapathError(EniIpamError):
    """The host refused a change of the datapath, or a tool it needs is missing (the message says
    which and why). An ADD that meets it is undone: the address is released, the runtime told to
    try again."""
