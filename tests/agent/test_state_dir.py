"""The agent's state directory holds regular files only: a symbolic link, a FIFO or a directory where
a state file or the lock belongs is refused by name, never followed, written through or waited on."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from eni_ipam.agent.allocator import Allocator
from eni_ipam.agent.config import agent_config_from_mapping
from eni_ipam.agent.daemon import Agent
from eni_ipam.agent.files import NotRegularFile, open_regular, write_in_place
from eni_ipam.agent.state import StateFile
from eni_ipam.agent.types import Allocation, PoolAddress
from eni_ipam.errors import ConfigError
from tests.agent import FakeClock, agent_paths

pytestmark = pytest.mark.timeout(60)

OUTSIDE = b"root:x:0:0:root:/root:/bin/bash\n" * 4096
"""An outside file the state file must never write (longer than a slot, as a real target would be)."""


def memory_config(tmp_path: Path) -> dict[str, object]:
    return {**agent_paths(tmp_path), "node_source": "memory", "pools": {"default": {"cidr": "10.9.0.0/28"}}}


async def start(tmp_path: Path) -> None:
    """Run an agent on ``tmp_path``'s state directory until it serves (then stop it)."""
    import asyncio

    agent = Agent(agent_config_from_mapping(memory_config(tmp_path)), node="n1")  # reads the registry
    stop = asyncio.Event()
    task = asyncio.create_task(agent.run(stop))
    while not agent.restored and not task.done():
        await asyncio.sleep(0.01)
    stop.set()
    await asyncio.wait_for(task, 10)


@pytest.mark.parametrize("name", ["allocations.json", "libnetwork.json"])
async def test_a_symlink_at_a_state_file_is_refused_and_its_target_untouched(
    tmp_path: Path, name: str
) -> None:
    outside = tmp_path / "outside"
    outside.write_bytes(OUTSIDE)
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / name).symlink_to(outside)
    with pytest.raises(ConfigError, match=f"{name} is a symbolic link to {outside}") as caught:
        await start(tmp_path)
    assert caught.value.field == "state_dir"
    assert outside.read_bytes() == OUTSIDE


async def test_a_symlink_at_the_lock_is_refused_and_nothing_is_created_at_its_target(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere" / "created-by-root"
    target.parent.mkdir()
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / ".lock").symlink_to(target)
    with pytest.raises(ConfigError, match=r"\.lock is a symbolic link"):
        await start(tmp_path)
    assert not target.exists()


async def test_a_directory_at_the_state_file_is_refused_by_name(tmp_path: Path) -> None:
    (tmp_path / "state" / "allocations.json").mkdir(parents=True)
    with pytest.raises(ConfigError, match=r"allocations\.json is a directory, not a regular file"):
        await start(tmp_path)


async def test_a_state_directory_that_is_a_file_is_refused_by_name(tmp_path: Path) -> None:
    (tmp_path / "state").write_text("")
    with pytest.raises(ConfigError, match=r"state is a regular file, not a directory"):
        await start(tmp_path)


async def test_a_state_directory_reached_through_a_symlink_is_used(tmp_path: Path) -> None:
    """A hostPath may reach its directory through a symbolic link (/var/lib → /data/var/lib): the
    directory is the configuration's choice, only the files in it are held to regular files."""
    real = tmp_path / "real-state"
    real.mkdir()
    (tmp_path / "state").symlink_to(real)
    await start(tmp_path)
    assert (real / ".lock").is_file()


def test_a_state_file_replaced_by_a_symlink_while_running_is_not_written_through(tmp_path: Path) -> None:
    state = StateFile(tmp_path / "allocations.json")
    allocator = Allocator(clock=FakeClock(), state=state)
    allocator.set_pool("default", [PoolAddress(address="10.9.0.2", prefix_length=28, gateway="10.9.0.1")])
    allocator.restore()
    allocator.allocate("10.9.0.2", "cni:c1:eth0")
    outside = tmp_path / "outside"
    outside.write_bytes(OUTSIDE)
    state.path.unlink()
    state.path.symlink_to(outside)  # the slot layout is known: the next write goes in place
    from eni_ipam.agent.errors import StateNotWritten

    with pytest.raises(StateNotWritten, match="symbolic link"):
        allocator.release("10.9.0.2")
    assert outside.read_bytes() == OUTSIDE
    assert "symbolic link" in allocator.state_error


def test_a_fifo_is_refused_by_an_open_for_writing_without_waiting_for_a_reader(tmp_path: Path) -> None:
    fifo = tmp_path / "allocations.json"
    os.mkfifo(fifo)
    with pytest.raises(NotRegularFile, match="is a FIFO"):
        write_in_place(fifo, 0, b"x")
    with pytest.raises(NotRegularFile, match="is a FIFO"):
        open_regular(fifo)


def test_an_allocation_is_never_written_where_the_state_file_is_not_regular(tmp_path: Path) -> None:
    """The slot file keeps its place: replacing it (a new, larger file) renames over a symlink,
    never writes through it."""
    state = StateFile(tmp_path / "allocations.json")
    outside = tmp_path / "outside"
    outside.write_bytes(OUTSIDE)
    (tmp_path / "allocations.json").symlink_to(outside)
    with pytest.raises(ConfigError, match="symbolic link"):
        state.load()
    state.save(
        [Allocation(address="10.9.0.2", pool="default", owner="o", prefix_length=28, gateway="10.9.0.1")]
    )
    assert outside.read_bytes() == OUTSIDE
    assert not state.path.is_symlink() and state.load()[0].address == "10.9.0.2"


@pytest.mark.system
def test_a_fifo_at_the_state_file_stops_the_agent_at_start_with_exit_2(tmp_path: Path) -> None:
    (tmp_path / "state").mkdir()
    os.mkfifo(tmp_path / "state" / "allocations.json")
    config = tmp_path / "agent.yaml"
    config.write_text(yaml.safe_dump(memory_config(tmp_path)))
    main = "import sys; from eni_ipam.cli import main; sys.exit(main(sys.argv[1:]))"
    agent = subprocess.Popen(
        [sys.executable, "-c", main, "agent", "--node", "n1", "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    try:
        _, err = agent.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        agent.send_signal(signal.SIGTERM)
        time.sleep(3)
        ignored = agent.poll() is None
        agent.kill()
        agent.communicate()
        pytest.fail(f"the agent blocked at start on the FIFO{' and ignored SIGTERM' if ignored else ''}")
    assert agent.returncode == 2, err
    assert f"{tmp_path}/state/allocations.json is a FIFO, not a regular file" in err
    assert "Traceback" not in err


def test_a_directory_at_the_socket_path_is_a_configuration_error_naming_the_socket(tmp_path: Path) -> None:
    from eni_ipam.agent.listen import listen

    (tmp_path / "agent.sock").mkdir()
    with pytest.raises(ConfigError) as caught:
        listen(tmp_path / "agent.sock", tmp_path / "state")
    assert caught.value.field == "socket" and "is a directory, not a socket" in caught.value.message
    assert (tmp_path / "agent.sock").is_dir()


def test_a_regular_file_at_the_socket_path_is_refused_and_kept(tmp_path: Path) -> None:
    from eni_ipam.agent.listen import listen

    (tmp_path / "agent.sock").write_text("someone's data")
    with pytest.raises(ConfigError) as caught:
        listen(tmp_path / "agent.sock", tmp_path / "state")
    assert caught.value.field == "socket" and "is a regular file, not a socket" in caught.value.message
    assert (tmp_path / "agent.sock").read_text() == "someone's data"
    listen(tmp_path / "other.sock", tmp_path / "state").close()  # the lock was let go


def test_a_previous_runs_socket_is_replaced(tmp_path: Path) -> None:
    import socket

    from eni_ipam.agent.listen import listen

    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(tmp_path / "agent.sock"))
    stale.close()  # the file stays, nobody listens
    listening = listen(tmp_path / "agent.sock", tmp_path / "state")
    try:
        assert listening.path.is_socket()
    finally:
        listening.close()
