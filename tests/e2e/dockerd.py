"""A private dockerd for the end-to-end tests: its own data root, exec root, socket and configuration
under one directory, and no networking of its own (no bridge, no iptables, no forwarding), so that it
changes nothing on the host that a test has to put back."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path


def start_dockerd(dockerd: str, home: Path, sock: Path) -> subprocess.Popen[bytes]:
    """Start ``dockerd`` with everything under ``home`` (its log: ``home/dockerd.log``), listening on
    ``sock``; the caller waits for it to answer and stops it."""
    (home / "daemon.json").write_text("{}")
    with (home / "dockerd.log").open("ab") as log:
        return subprocess.Popen(
            [
                dockerd,
                "--data-root", str(home / "data"),
                "--exec-root", str(home / "exec"),
                "--host", f"unix://{sock}",
                "--pidfile", str(home / "docker.pid"),
                "--config-file", str(home / "daemon.json"),
                "--iptables=false",
                "--ip6tables=false",
                "--ip-forward=false",
                "--ip-masq=false",
                "--bridge=none",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip


HOST_LEFTOVERS = tuple(
    map(
        Path,
        [
            "/etc/docker/key.json",
            "/run/docker/plugins",
            "/run/docker",
            "/run/containerd/s",
            "/run/containerd",
        ],
    )
)
"""What dockerd makes on the host whatever its roots: its identity key, the plugin socket directory,
containerd's shim socket directory."""


@contextlib.contextmanager
def host_paths_restored(*paths: Path) -> Iterator[None]:
    """Afterwards, remove those of ``paths`` (deepest first) that did not exist before: files, and
    directories once empty. A runtime creates them on the host whatever roots it is given."""
    absent = [p for p in paths if not p.exists()]
    try:
        yield
    finally:
        for path in absent:
            with contextlib.suppress(OSError):
                if path.is_dir() and not path.is_symlink():
                    path.rmdir()
                else:
                    path.unlink()


def unmount_under(directory: Path) -> None:
    """Unmount whatever is still mounted below ``directory`` (deepest first)."""
    prefix = str(directory) + "/"
    with open("/proc/self/mounts") as mounts:
        points = [line.split()[1] for line in mounts if line.split()[1].startswith(prefix)]
    for point in sorted(points, key=len, reverse=True):
        subprocess.run(["umount", "-l", point], check=False, capture_output=True, timeout=10)


def terminate(daemon: subprocess.Popen[bytes]) -> None:
    """SIGTERM, and SIGKILL when it has not exited within 30 s."""
    if daemon.poll() is None:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(30)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait(10)


def stop_dockerd(daemon: subprocess.Popen[bytes], home: Path) -> None:
    """SIGTERM (dockerd stops its containerd), SIGKILL after 30 s; then whatever it left mounted."""
    terminate(daemon)
    pidfile = home / "exec" / "containerd" / "containerd.pid"
    with contextlib.suppress(FileNotFoundError, ValueError, ProcessLookupError):
        os.kill(int(pidfile.read_text().strip()), signal.SIGKILL)  # a containerd dockerd left behind
    unmount_under(home)
