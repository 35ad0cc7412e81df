"""What the agent holds before it imports what it runs on: its state directory's lock, and its socket,
bound and listening.

Every runtime of the node waits on a restarted agent: the CNI plugin sends its request again for a
while, and Docker's driver calls are retried with an empty body (moby/moby#39331), which fails them.
Most of a start is importing the libraries the agent runs on (aiohttp, prometheus_client, structlog)
and restoring its allocations. So the program (:mod:`eni_ipam.agent.main`) listens as soon as its
configuration is read: from then on the kernel takes the runtimes' connections into the socket's
backlog, and they are answered once the agent has restored and serves. Nothing is read from a
connection before that, so "restore before serving" holds; a client only waits longer for its
answer instead of failing to connect.

Invariants:

* The state directory's lock is taken before the socket's name is touched: a second agent on the
  same state directory stops with its own error and never takes the first one's socket away.
* The socket file has mode 0660 from its creation on (bound under a umask that leaves no other
  permission), as the agent serves it.
* An agent that started listening and cannot go on (an error, a signal) leaves a socket that
  refuses connections, as a killed agent does: the clients queued in the backlog are reset, and
  the plugin sends its request again.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from eni_ipam.adapters.limits import LISTEN_BACKLOG
from eni_ipam.agent.files import NotRegularFile, kind, open_regular
from eni_ipam.errors import ConfigError


@dataclass
class Listening:
    """The lock on the state directory and the bound, listening socket, held for the agent's life."""

    lock: IO[bytes]
    sock: socket.socket
    path: Path

    def close(self) -> None:
        self.sock.close()
        self.lock.close()


def listen(socket_path: str | Path, state_dir: str | Path) -> Listening:
    """Lock ``state_dir`` (made if missing), then listen on ``socket_path`` in place of whatever a
    previous run left there.

    Raises:
        ConfigError: ``state_dir`` is not a directory, another agent holds its lock, ``.lock`` is not
            a regular file, or the socket cannot be made (named ``socket``).
    """
    state = Path(state_dir)
    make_state_dir(state)
    lock = lock_state_dir(state)
    path = Path(socket_path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        remove_stale(path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    except ConfigError:
        lock.close()
        raise
    except OSError as exc:
        lock.close()
        raise ConfigError("socket", f"cannot make {path}: {exc}") from None
    try:
        umask = os.umask(0o117)  # the file is 0660 from its first moment
        try:
            sock.bind(str(path))
        finally:
            os.umask(umask)
        sock.listen(LISTEN_BACKLOG)
    except OSError as exc:
        sock.close()
        lock.close()
        raise ConfigError("socket", f"cannot listen on {path}: {exc}") from None
    return Listening(lock=lock, sock=sock, path=path)


def remove_stale(path: Path) -> None:
    """A previous run's socket file: nobody listens on it any more, and binding needs the name.
    Anything else there (a directory, a regular file, a link) is not the agent's to delete.

    Raises:
        ConfigError: something other than a socket is at ``path`` (named ``socket``).
    """
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise ConfigError(
            "socket",
            f"{path} is {kind(mode, path)}, not a socket: refused (move it away, or choose another path)",
        )
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def make_state_dir(state_dir: Path) -> None:
    """Create ``state_dir`` (mode 0700: only root plants names in it) unless it exists.

    Raises:
        ConfigError: something other than a directory is there (a link to a directory is followed:
            a hostPath may be reached through one).
    """
    try:
        state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        found = state_dir.lstat().st_mode if os.path.lexists(state_dir) else 0
        what = kind(found, state_dir) if found else "not reachable"
        raise ConfigError("state_dir", f"{state_dir} is {what}, not a directory") from None
    except OSError as exc:
        raise ConfigError("state_dir", f"cannot create {state_dir}: {exc}") from None


def lock_state_dir(state_dir: Path) -> IO[bytes]:
    """Hold an exclusive lock on ``state_dir`` for this process's life (released when closed).

    The lock file is opened as the state files are (:func:`~eni_ipam.agent.files.open_regular`): a
    link planted at ``.lock`` must not have root create a file where it points.

    Raises:
        ConfigError: another agent holds it, or ``.lock`` is not a regular file.
    """
    path = state_dir / ".lock"
    try:
        handle = os.fdopen(open_regular(path, os.O_RDWR | os.O_CREAT, 0o600), "r+b")
    except NotRegularFile as exc:
        raise ConfigError("state_dir", str(exc)) from None
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise ConfigError("state_dir", f"another agent is running on {state_dir}") from None
    return handle
