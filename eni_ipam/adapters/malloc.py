"""glibc's allocator, set for a long-lived service that reads large answers in worker threads.

Role: called once when the service starts (:mod:`eni_ipam.app.service`), before its threads exist.

Two settings, each left alone when its environment variable is set (the operator's word wins):

* **arenas** (``MALLOC_ARENA_MAX``): 2 instead of eight per core. Every thread that meets a busy
  arena gets one of its own, and memory freed in an arena stays with it: the EC2 client's worker
  threads, parsing pages of 2.8 MB, each kept a heap of their own.
* **mmap threshold** (``MALLOC_MMAP_THRESHOLD_``): 128 KiB, fixed. glibc raises it to the largest
  block freed so far (up to 32 MiB), after which page-sized buffers come from the heap and the heap
  only shrinks from its top: a few pinned objects keep hundreds of megabytes resident. Fixed, every
  large buffer is mapped on its own and goes back to the system when freed.

Measured with the whole controller at 10,000 nodes (``make bench-scale``): steady RSS 278 → 225 MB,
peak 359 → 230 MB. Elsewhere than glibc (musl, macOS) nothing is done. Decision 0022.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
from collections.abc import Mapping

M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
"""``mallopt`` parameters (glibc's malloc.h)."""

ARENA_MAX = 2
MMAP_THRESHOLD = 128 * 1024

_SETTINGS = (
    ("MALLOC_ARENA_MAX", M_ARENA_MAX, ARENA_MAX),
    ("MALLOC_MMAP_THRESHOLD_", M_MMAP_THRESHOLD, MMAP_THRESHOLD),
)


def _glibc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    # glibc only (its version function names it): musl's mallopt accepts everything and does nothing.
    if not hasattr(libc, "gnu_get_libc_version") or not hasattr(libc, "mallopt"):
        return None
    return libc


def tune_allocator(environ: Mapping[str, str]) -> dict[str, int]:
    """Apply the settings above that ``environ`` does not set; returns those applied (none when
    the C library is not glibc)."""
    libc = _glibc()
    if libc is None:
        return {}
    mallopt = libc.mallopt
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    applied = {}
    for variable, parameter, value in _SETTINGS:
        if variable not in environ and mallopt(parameter, value) == 1:
            applied[variable] = value
    return applied
