"""The agent program listens as soon as its configuration is read (eni_ipam/agent/listen.py): what
connects while it starts waits for its answer instead of being refused; a second agent on the same
state directory leaves the first one's socket alone; a SIGTERM while it starts is a clean stop."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.agent import agent_paths

pytestmark = [pytest.mark.system, pytest.mark.timeout(60)]

AGENT = str(Path(sys.executable).parent / "eni-ipam-agent")


def write_config(tmp_path: Path, **more: Any) -> Path:
    config = {
        **agent_paths(tmp_path),
        "node_source": "memory",
        "claims": False,
        "sweep_interval": "0s",
        "pools": {"default": {"cidr": "10.99.0.0/24", "ranges": ["10.99.0.10-10.99.0.20"]}},
        **more,
    }
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def start(config: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [AGENT, "--node", "n1", "--config", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def connect(path: Path, agent: subprocess.Popen[str], within: float = 30.0) -> socket.socket:
    """A connection to the agent's socket, as soon as it accepts one."""
    deadline = time.perf_counter() + within
    while True:
        client = socket.socket(socket.AF_UNIX)
        try:
            client.connect(str(path))
            return client
        except OSError:
            client.close()
            assert agent.poll() is None, f"the agent exited {agent.returncode}: {agent.stderr}"
            assert time.perf_counter() < deadline, "the agent's socket accepted nothing"
            time.sleep(0.005)


def add(client: socket.socket, container: str) -> tuple[bytes, Any]:
    """An ADD on ``client``; the answer's status line and body."""
    body = json.dumps({"containerID": container, "ifname": "eth0", "netns": "/x"}).encode()
    client.sendall(
        b"POST /v1/cni/add HTTP/1.1\r\nHost: agent\r\nConnection: close\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    client.settimeout(30)
    answer = b""
    while chunk := client.recv(65536):
        answer += chunk
    head, _, text = answer.partition(b"\r\n\r\n")
    return head.split(b"\r\n")[0], json.loads(text)


@pytest.fixture
def silent_docker(tmp_path: Path) -> Iterator[Path]:
    """A Docker socket that takes connections and never answers: the agent's start waits its 3 s for
    Docker before it serves (eni_ipam/agent/start.py)."""
    path = tmp_path / "docker.sock"
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(path))
        listener.listen(16)
        yield path


def test_a_request_sent_while_the_agent_starts_waits_for_its_answer(
    tmp_path: Path, silent_docker: Path
) -> None:
    config = write_config(tmp_path, docker_socket=str(silent_docker))
    sock = tmp_path / "run" / "agent.sock"
    sock.parent.mkdir()
    with socket.socket(socket.AF_UNIX) as stale:  # a previous run's socket file, refusing connections
        stale.bind(str(sock))
    agent = start(config)
    try:
        began = time.perf_counter()
        with connect(sock, agent) as client:
            connected = time.perf_counter() - began
            status, answer = add(client, "c1")
            answered = time.perf_counter() - began
        assert status.endswith(b"200 OK"), (status, answer)
        assert answer["ips"][0]["address"] == "10.99.0.10"
        # Connected while Docker held the start up (3 s), answered once the agent served.
        assert connected < answered - 2.0, (connected, answered)
        assert oct(sock.stat().st_mode & 0o777) == oct(0o660)
    finally:
        agent.terminate()
        assert agent.wait(20) == 0, agent.stderr


def test_a_second_agent_on_the_same_state_directory_leaves_the_first_ones_socket_alone(
    tmp_path: Path,
) -> None:
    config = write_config(tmp_path)
    sock = tmp_path / "run" / "agent.sock"
    first = start(config)
    try:
        with connect(sock, first) as client:
            assert add(client, "c1")[0].endswith(b"200 OK")
        second = start(config)
        assert second.wait(30) == 2
        assert "another agent is running" in (second.stderr.read() if second.stderr else "")
        with connect(sock, first, within=1.0) as client:
            status, answer = add(client, "c1")
        assert status.endswith(b"200 OK") and answer["existing"] is True, answer
    finally:
        first.terminate()
        assert first.wait(20) == 0


def test_a_sigterm_while_the_agent_starts_is_a_clean_stop(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    sock = tmp_path / "run" / "agent.sock"
    agent = start(config)
    connect(sock, agent).close()  # listening: it may still be importing what it runs on
    agent.terminate()
    assert agent.wait(20) == 0, agent.stderr.read() if agent.stderr else ""
