"""What reaches a terminal is shown, never obeyed: escape sequences and control characters from the
cluster, the cloud or a file are written as escapes (console logs, the live view, the CLI)."""

from __future__ import annotations

import io

import pytest
import structlog

from eni_ipam.adapters.logging import configure
from eni_ipam.adapters.terminal import inert

HOSTILE = "node-1\x1b]0;owned\x07\x1b[2J\x1b]8;;https://evil\x1b\\link\x1b]8;;\x1b\\\r\u202e"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("ip-10-0-1-5.ec2.internal", "ip-10-0-1-5.ec2.internal"),
        ("a b", "a b"),
        ("zone-é", "zone-é"),
        ("\x1b[31mred", "\\x1b[31mred"),
        ("bell\x07", "bell\\x07"),
        ("rtl\u202eoverride", "rtl\\u202eoverride"),
        ("tab\tnew\nline", "tab\\x09new\\x0aline"),
    ],
)
def test_control_and_format_characters_are_written_as_escapes(text: str, shown: str) -> None:
    assert inert(text) == shown


def test_nothing_a_terminal_obeys_is_left() -> None:
    assert all(c.isprintable() for c in inert(HOSTILE))


def test_a_message_of_several_lines_keeps_its_lines_and_loses_its_escapes() -> None:
    assert inert("line 1:\n\x1b[2J  x\tz", lines=True) == "line 1:\n\\x1b[2J  x\tz"


def test_console_logs_write_what_a_node_holds_as_escapes_and_json_escapes_it_itself() -> None:
    saved = structlog.get_config()
    try:
        for json in (False, True):
            out = io.StringIO()
            configure(level="info", json=json, stream=out)
            structlog.get_logger().warning("node_added", node=HOSTILE)
            written = out.getvalue()
            assert "\x1b" not in written and "\x07" not in written and "\r" not in written, written
            assert "node-1" in written
    finally:
        structlog.configure(**saved)
