"""The bounds of a listener: those of an HTTP endpoint (:mod:`eni_ipam.adapters.server`) that a
configuration may set, and the kernel's backlog every listener has (:mod:`eni_ipam.adapters.guard`).

Apart from the server, which needs aiohttp and prometheus_client: a configuration is validated
against these before a process imports what it serves with (the node agent listens as soon as its
configuration is read, :mod:`eni_ipam.agent.listen`).
"""

from __future__ import annotations

DEFAULT_MAX_CONNECTIONS = 64
"""Connections the endpoint serves at once by default: Prometheus (two servers of an HA pair, each
keeping one connection per target) and kubelet's two probes need a handful; 64 leaves room for
dashboards and ad-hoc ``curl`` while keeping a flood's cost to a few dozen files."""

DEFAULT_READ_TIMEOUT = 10.0
"""Seconds a client has by default to send a whole request (head, then body) once connected or
answered; also how long an idle kept-alive connection stays open. Scrapers and probes write their
request at once, and Prometheus opens a new connection when its kept one was closed."""

MAX_SERVER_CONNECTIONS = 10_000
"""Most connections a configuration may let the endpoint serve: every one is an open file, and the
process's own limit is usually 1,024 soft (raised at start) to 1,048,576 hard."""

MAX_SERVER_READ_TIMEOUT = 300.0
"""Longest request deadline a configuration may set: beyond five minutes the deadline stops bounding
how long a slow client holds a connection."""

LISTEN_BACKLOG = 128
"""Connections the kernel queues for a listener before the process accepts them (aiohttp's default).
asyncio accepts up to this many at once before the refusals close them: each listener may hold
``max_connections`` + this many files for an instant."""
