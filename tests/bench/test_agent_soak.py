"""The node agent's soak, short: a real agent and the real plugin under every hostile input it is known
to meet (its TCP port flooded beyond its file limit included), restarts and (as root) a full disk, with
no invariant broken. `make soak` runs the long one."""

from __future__ import annotations

import dataclasses
import os

import pytest

from bench.agent_soak import QUICK, agent_soak, render

pytestmark = [pytest.mark.system, pytest.mark.timeout(240)]

HOSTILE = {
    "body over 64 KiB",
    "container id of 20,000 characters",
    "interface name with a NUL",
    "interface name of 16 bytes",
    "JSON nested 60,000 deep",
    "100 libnetwork options",
    "libnetwork option of 50,000 characters",
    "body that never finishes",
    "request head trickling in",
    "idle connection (flood)",
    "TCP connection (flood of the port)",
    "slow reader (pipelined, never read)",
    "plugin: container id of 300 characters",
    "plugin: interface name of 16 bytes",
    "start: symbolic link at .lock",
}


def test_the_agent_keeps_every_invariant_under_hostile_input_restarts_and_a_full_disk() -> None:
    report = agent_soak(QUICK)
    assert report.violations == [], render(report)
    assert set(report.hostile) == HOSTILE
    assert report.valid["ADD ok"] > 0 and report.valid["DEL ok"] > 0 and report.valid["CHECK ok"] > 0
    assert report.events["SIGKILL"] and report.events["SIGTERM"]
    if os.geteuid() == 0 and not report.full_disk:
        assert report.events["full disk"] and report.valid["ADD refused (full disk)"]


def test_the_soak_catches_an_agent_that_does_not_bound_its_connections() -> None:
    config = dataclasses.replace(QUICK, seconds=0.0, restart_every=1e9, full_disk_every=1e9)
    report = agent_soak(config, agent_options={"socket_max_connections": 10_000})
    assert any("files (limit" in v for v in report.violations), render(report)


def test_the_soak_catches_an_agent_whose_tcp_port_is_not_bounded() -> None:
    """Without its limits (the connection limit, and a deadline that closes idle connections within
    the flood) the port takes every file the agent has, and the plugin's ADD fails."""
    config = dataclasses.replace(QUICK, seconds=0.0, restart_every=1e9, full_disk_every=1e9)
    unbounded = {"server": {"max_connections": 10_000, "read_timeout": "5m"}}
    report = agent_soak(config, agent_options=unbounded)
    assert any("files (limit" in v for v in report.violations), render(report)
    assert any(v.startswith("ADD ") for v in report.violations), render(report)
