"""Durable files of the node agent: written atomically and fsync'd, checksummed, moved aside when corrupt.

Both the allocator's state file and the libnetwork driver's pool registry go through here, so they
share one crash story: a reader sees the old file or the new one, never a mix; a file that fails its
checksum is renamed to ``<name>.corrupt-<n>`` (kept for inspection) before anything replaces it.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path


def write_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data``: temporary file in the same directory, flush, fsync, rename,
    then fsync the directory so the rename itself survives a crash."""
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def write_in_place(path: Path, offset: int, data: bytes) -> None:
    """Overwrite ``len(data)`` bytes of ``path`` at ``offset`` and wait for the data to reach the disk.

    The file must already extend past ``offset + len(data)``: its size and blocks do not change, so
    ``fdatasync`` flushes the data alone (no journal commit, no directory entry), and the write needs
    no free space. A crash can leave the range half written; callers keep a second copy.
    """
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        view = memoryview(data)
        while view:
            written = os.pwrite(fd, view, offset)
            view, offset = view[written:], offset + written
        os.fdatasync(fd)
    finally:
        os.close(fd)


def remove_leftovers(directory: Path) -> list[Path]:
    """Remove the temporary files a crash left in ``directory`` (``.<name>.<random>.tmp``, regular
    files only: nothing else this module writes starts with a dot); returns what was removed."""
    removed = []
    for path in sorted(directory.glob(".*.tmp")):
        if path.is_file() and not path.is_symlink():
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed


def move_aside(path: Path) -> Path:
    """Rename ``path`` to ``<name>.corrupt-<n>`` (the lowest free ``n`` from 1); returns the new path."""
    n = 1
    while (target := path.with_name(f"{path.name}.corrupt-{n}")).exists():
        n += 1
    os.replace(path, target)
    return target


def checksum(entries: object) -> str:
    """``sha256:<hex>`` of the canonical JSON of ``entries`` (key order and spacing do not matter)."""
    canonical = json.dumps(entries, sort_keys=True, separators=(",", ":")).encode()
    return "sha256:" + hashlib.sha256(canonical).hexdigest()
