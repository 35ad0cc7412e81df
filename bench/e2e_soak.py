"""Soaks that are an end-to-end test's ``test_soak`` run for minutes (``bench/runtimes_soak.py``,
``bench/datapath_soak.py``): what the host lacks for it, and the run through pytest.

The test reads how long to run and its seed from ``<PREFIX>_SECONDS`` and ``<PREFIX>_SEED``, and writes
its figures as JSON to the file ``<PREFIX>_REPORT`` names (the tests are not a package of the
product's: the names are passed, not imported). A run that gives no figures was skipped (the test
says why: a runtime missing or unable to run here) or failed before any.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


def missing(tools: Sequence[str], needing_root: str) -> str:
    """Why the soak cannot run on this host ("" when it can, as far as can be told before trying):
    not root (``needing_root`` need it), or a tool of ``tools`` not installed."""
    if os.geteuid() != 0:
        return f"not root: {needing_root} need root"
    absent = [tool for tool in tools if shutil.which(tool) is None]
    if absent:
        return f"{', '.join(absent)} not installed (make node-runtimes)"
    return ""


class _Watch:
    """What pytest said of the soak's test: the reason of a skip, whether it failed."""

    def __init__(self) -> None:
        self.skipped = ""
        self.failed = False

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.skipped and isinstance(report.longrepr, tuple):
            self.skipped = str(report.longrepr[2])
        if report.failed:
            self.failed = True


def run(test: Path, prefix: str, seconds: float, seed: int, *, name: str) -> dict[str, Any] | int:
    """The figures of ``test``'s ``test_soak`` run for ``seconds``; when it gives none, the exit status
    to end with, said on standard output (0: skipped, 1: failed)."""
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="eni-soak-") as tmp:
        figures = Path(tmp) / "figures.json"
        os.environ.update(
            {
                f"{prefix}_SECONDS": f"{seconds:g}",
                f"{prefix}_REPORT": str(figures),
                f"{prefix}_SEED": str(seed),
            }
        )
        # The agents the test starts run this checkout's code.
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
        watch = _Watch()
        args = [f"{test}::test_soak", "-m", "e2e", "-rA", "-s", "-p", "no:cacheprovider", "-o", "addopts="]
        pytest.main(args, plugins=[watch])
        if figures.exists():
            found: dict[str, Any] = json.loads(figures.read_text())
            return found
    took = time.perf_counter() - began
    if watch.skipped and not watch.failed:
        print(f"{name}: skipped after {took:.0f}s: {watch.skipped}")
        return 0
    print(f"{name}: failed after {took:.0f}s before any figure (see pytest's report above)")
    return 1
