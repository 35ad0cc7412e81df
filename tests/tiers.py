"""The test tiers: what ``make test`` runs, and what waits for ``make check`` and ``make e2e``.

* **in-process** (no marker; ``make test``): the product's code in this process, on virtual time
  where time matters. No subprocess, no real tool, no real-time soak. Run in parallel
  (pytest-xdist), it must stay under three minutes on a 2-core machine.
* **system** (``@pytest.mark.system``; ``make check``): starts processes or real tools (the CLI as a
  subprocess, promtool, helm, kubectl, the CNI plugin exec'd, the reference CNI plugins, agents
  killed and restarted), or runs a benchmark's or a soak's short form in real time.
  Every test under ``tests/bench/`` is of this tier by its folder.
* **testkit** (every test under ``tests/testkit/``; ``make check``): the test doubles' own tests.
* **e2e** (``@pytest.mark.e2e``, ``tests/e2e/``; ``make e2e``): real Prometheus, podman, Docker,
  containerd and the built image.

``make e2e`` runs ``make check`` first, and CI runs ``make test`` then ``make e2e``: every tier runs
in CI. The in-process tier is enforced, not only declared: a test without a tier's marker that
starts a process fails at once, naming the marker to add.
"""

from __future__ import annotations

import os
import platform
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

TIERS = {
    "system": "starts processes or real tools, or runs a benchmark's or soak's short form: `make check`",
    "testkit": "a test of the test doubles themselves (tests/testkit/): `make check`",
    "e2e": "end-to-end with real Prometheus, podman, Docker, containerd, the image: `make e2e`",
}
OUT_OF_PROCESS = frozenset(TIERS)
HERE = Path(__file__).resolve().parent
BY_FOLDER = {HERE / "testkit": pytest.mark.testkit, HERE / "bench": pytest.mark.system}
"""Folders whose every test is of one tier: the doubles' own tests, the benchmarks' and soaks' short
forms."""


def pytest_configure(config: pytest.Config) -> None:
    for marker, meaning in TIERS.items():
        config.addinivalue_line("markers", f"{marker}: {meaning}")
    # The standard library reads the machine's processor with `uname -p` once and caches it; a test
    # whose code asks first (the Azure SDK's user agent does) would meet the refusal below, or not,
    # depending on which tests ran before it in its worker.
    platform.platform()
    platform.processor()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test of a folder of :data:`BY_FOLDER` is of that folder's tier."""
    for item in items:
        parents = Path(str(item.path)).resolve().parents
        for folder, marker in BY_FOLDER.items():
            if folder in parents:
                item.add_marker(marker)


class ProcessInInProcessTier(RuntimeError):
    pass


def _refused(what: str, test: str) -> Any:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise ProcessInInProcessTier(
            f"{test} started a process ({what}) but is of the in-process tier: mark it "
            "@pytest.mark.system (or move it to tests/e2e with @pytest.mark.e2e) — tests/tiers.py"
        )

    return refuse


@pytest.fixture(autouse=True)
def refuse_processes(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """In the in-process tier, starting a process is an error naming the marker to add."""
    if OUT_OF_PROCESS & {m.name for m in request.node.iter_markers()}:
        yield
        return
    test = request.node.nodeid
    # Every subprocess of the standard library (subprocess, asyncio's, multiprocessing's fork and
    # spawn) goes through one of these.
    monkeypatch.setattr(subprocess.Popen, "_execute_child", _refused("subprocess", test))
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp"):
        if hasattr(os, name):
            monkeypatch.setattr(os, name, _refused(f"os.{name}", test))
    yield
