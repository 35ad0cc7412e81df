"""structlog set-up: event-named, context-bound logs; JSON when not on a terminal.

Library code only calls ``structlog.get_logger()`` and binds context (``node=…``); this module
decides rendering, once, at process start (the CLI calls :func:`configure`).
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TextIO

import structlog

from eni_ipam.adapters.terminal import inert_event


def configure(*, level: str = "info", json: bool | None = None, stream: TextIO | None = None) -> None:
    out = stream or sys.stderr
    use_json = (not out.isatty()) if json is None else json
    # JSON escapes control characters itself; the console renderer writes values as they are, so
    # what a Node or a tag holds is made inert first (a log line must not drive the terminal).
    renderers: list[structlog.types.Processor] = (
        [structlog.processors.JSONRenderer()]
        if use_json
        else [inert_event, structlog.dev.ConsoleRenderer(colors=False)]
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            *renderers,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        logger_factory=structlog.PrintLoggerFactory(out),
        cache_logger_on_first_use=False,
    )


@contextlib.contextmanager
def diverted(sink: Callable[[Mapping[str, Any]], None]) -> Iterator[None]:
    """Every log event at the configured level goes to ``sink`` (its event dict: ``event``,
    ``level`` and the bound keys) instead of the stream, for the block; the configuration before it
    is restored after. For a full-screen view, which owns the terminal the stream writes to."""
    before = structlog.get_config()

    def divert(logger: Any, method: str, event: structlog.types.EventDict) -> Any:
        sink(event)
        raise structlog.DropEvent

    structlog.configure(
        processors=[structlog.contextvars.merge_contextvars, structlog.processors.add_log_level, divert]
    )
    try:
        yield
    finally:
        structlog.configure(**before)
