"""structlog set-up: event-named, context-bound logs; JSON when not on a terminal.

Library code only calls ``structlog.get_logger()`` and binds context (``node=…``); this module
decides rendering, once, at process start (the CLI calls :func:`configure`).
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

import structlog


def configure(*, level: str = "info", json: bool | None = None, stream: TextIO | None = None) -> None:
    out = stream or sys.stderr
    use_json = (not out.isatty()) if json is None else json
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer() if use_json else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        logger_factory=structlog.PrintLoggerFactory(out),
        cache_logger_on_first_use=False,
    )
