"""The service sets glibc's allocator at start, unless the operator's environment already does."""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

import pytest

from eni_ipam.adapters import malloc

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux")
    or not hasattr(ctypes.CDLL(ctypes.util.find_library("c")), "gnu_get_libc_version"),
    reason="glibc only",
)


@pytest.mark.system
def test_both_settings_are_applied_on_glibc() -> None:
    assert malloc.tune_allocator({}) == {
        "MALLOC_ARENA_MAX": malloc.ARENA_MAX,
        "MALLOC_MMAP_THRESHOLD_": malloc.MMAP_THRESHOLD,
    }


@pytest.mark.system
def test_a_setting_the_environment_makes_is_left_to_it() -> None:
    applied = malloc.tune_allocator({"MALLOC_ARENA_MAX": "8"})
    assert applied == {"MALLOC_MMAP_THRESHOLD_": malloc.MMAP_THRESHOLD}


def test_nothing_is_done_without_glibc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(malloc.sys, "platform", "darwin")
    assert malloc.tune_allocator({}) == {}
