"""Durable files of the node agent: written atomically and fsync'd, checksummed, moved aside when corrupt.

Both the allocator's state file and the libnetwork driver's pool registry go through here, so they
share one crash story: a reader sees the old file or the new one, never a mix; a file that fails its
checksum is renamed to ``<name>.corrupt-<n>`` (kept for inspection) before anything replaces it.

Every file of the state directory is opened through :func:`open_regular`: never through a symbolic
link (``O_NOFOLLOW``), never waiting on a FIFO or a device (``O_NONBLOCK``, then ``fstat`` of the
opened descriptor must say *regular file*), never inherited by a child (``O_CLOEXEC``). The agent
runs as root: a link planted at ``allocations.json`` or ``.lock`` would otherwise have it write or
create a file anywhere, and a FIFO would block its start for good (a thread blocked in ``open`` runs
no signal handler, so not even SIGTERM stops it). Temporary files are created with
``O_CREAT | O_EXCL | O_NOFOLLOW`` and mode 0600 (``tempfile.mkstemp``), and ``rename`` replaces a
link rather than writing through it. The state directory itself may be reached through a link: it is
the configuration's choice (a hostPath under a relocated /var/lib), only the names in it are held to
regular files.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import stat
import tempfile
from pathlib import Path

_OPEN_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_KINDS = (
    (stat.S_ISLNK, "a symbolic link"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISREG, "a regular file"),
)


class NotRegularFile(OSError):
    """A name of the state directory is not a regular file (a symbolic link, a FIFO, a directory...):
    refused, never followed, waited on or written. An OSError, so that a write refused this way is a
    write that failed (the change is undone and ``/readyz`` says why)."""

    def __init__(self, path: str | os.PathLike[str], what: str) -> None:
        super().__init__(f"{path} is {what}, not a regular file: refused (move it away)")
        self.path = str(path)
        self.what = what


def kind(mode: int, path: str | os.PathLike[str] | None = None) -> str:
    """What a file of ``mode`` is, in words (``a FIFO``); a link says where it points given ``path``."""
    what = next((name for test, name in _KINDS if test(mode)), "an unknown kind of file")
    if stat.S_ISLNK(mode) and path is not None:
        with contextlib.suppress(OSError):
            what += f" to {os.readlink(path)}"
    return what


def open_regular(path: str | os.PathLike[str], flags: int = os.O_RDONLY, mode: int = 0o600) -> int:
    """A descriptor (blocking, close-on-exec) of the regular file at ``path``, opened with ``flags``
    (``O_CREAT`` creates it with ``mode``). Raises :class:`NotRegularFile` for anything else at the
    name, without following a link or waiting on a FIFO; FileNotFoundError when nothing is there."""
    try:
        fd = os.open(path, flags | _OPEN_FLAGS, mode)
    except OSError as exc:
        # ELOOP: a link (O_NOFOLLOW); EISDIR: a directory opened for writing; ENXIO: a FIFO opened
        # for writing with no reader, or a socket. Name what is there; anything else is the error.
        if exc.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO, errno.EOPNOTSUPP):
            try:
                found = os.lstat(path).st_mode
            except OSError:
                raise exc from None
            if not stat.S_ISREG(found):
                raise NotRegularFile(path, kind(found, path)) from None
        raise
    try:
        found = os.fstat(fd).st_mode
        if not stat.S_ISREG(found):
            raise NotRegularFile(path, kind(found))
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(path: str | os.PathLike[str], limit: int = -1) -> bytes | None:
    """The content of the regular file at ``path`` (at most ``limit`` bytes when not negative); None
    when nothing is there. NotRegularFile for anything but a regular file (see :func:`open_regular`)."""
    try:
        fd = open_regular(path)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as file:
        return file.read(limit)


def write_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data``: temporary file in the same directory, flush, fsync, rename,
    then fsync the directory so the rename itself survives a crash.

    The temporary file is created ``O_EXCL | O_NOFOLLOW`` with mode 0600 (``mkstemp``); the rename
    replaces whatever is at ``path`` (a symbolic link included) without writing through it, and
    fails on a directory."""
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
    fd = open_regular(path, os.O_WRONLY)
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


def move_aside(path: Path, suffix: str = "corrupt") -> Path:
    """Rename ``path`` to ``<name>.<suffix>-<n>`` (the lowest free ``n`` from 1); returns the new path.

    A rename in one directory takes no space: setting a damaged file aside works on a full disk."""
    n = 1
    while (target := path.with_name(f"{path.name}.{suffix}-{n}")).exists():
        n += 1
    os.replace(path, target)
    return target


def compact(path: Path, slot_size: int) -> int:
    """Shrink a file of two slots of ``slot_size`` bytes set aside by :func:`move_aside` to what its
    slots hold: each slot's bytes up to its last one that is not padding (a space or a newline), each
    followed by one newline. Returns the bytes freed (0 when it is not such a file, or nothing is).

    It needs no free space: the kept bytes are written over the first slot's own blocks (only when
    they fit there), then the file is truncated. A crash in between loses nothing: the first slot's
    bytes are rewritten as they were, and the second slot is untouched until the truncation. Used
    when a new state file does not fit beside the damaged one: the evidence is kept, and the room it
    held is given back."""
    fd = open_regular(path, os.O_RDWR)
    try:
        size = os.fstat(fd).st_size
        if slot_size <= 0 or size != 2 * slot_size:
            return 0
        kept = b"".join(os.pread(fd, slot_size, offset).rstrip(b" \n") + b"\n" for offset in (0, slot_size))
        if len(kept) > slot_size:
            return 0  # the second slot's bytes would be written over before they are kept
        written = 0
        while written < len(kept):
            written += os.pwrite(fd, kept[written:], written)
        os.ftruncate(fd, len(kept))
        os.fsync(fd)
    finally:
        os.close(fd)
    return size - len(kept)


def checksum(entries: object) -> str:
    """``sha256:<hex>`` of the canonical JSON of ``entries`` (key order and spacing do not matter)."""
    canonical = json.dumps(entries, sort_keys=True, separators=(",", ":")).encode()
    return "sha256:" + hashlib.sha256(canonical).hexdigest()
