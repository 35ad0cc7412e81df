"""docs/deploy.md, section 11 ("Trying it locally"), run word for word: a newcomer can follow it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent

pytestmark = [
    pytest.mark.timeout(240),
    pytest.mark.skipif(
        not ((BIN / "helm").exists() and (BIN / "kubectl").exists()),
        reason=f"{BIN}/helm or {BIN}/kubectl is missing (make kube-tools installs them)",
    ),
]


def section_script() -> str:
    text = (ROOT / "docs" / "deploy.md").read_text()
    section = text.split("## 11. Trying it locally", 1)[1]
    match = re.search(r"```sh\n(.*?)\n```", section, re.S)
    assert match, "section 11 has no shell block"
    return match.group(1)


def test_the_try_it_locally_section_runs_as_written(tmp_path: Path) -> None:
    script = section_script()
    first, rest = script.split("\n", 1)
    # `make kube-tools` is the suite's own prerequisite (make test ran it); run the rest as written.
    assert first.startswith("make kube-tools")
    wrapped = f"set -euo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null || true; wait' EXIT\n{rest}\n"
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "TMPDIR": str(tmp_path),
        **{k: v for k, v in os.environ.items() if k in ("LANG", "LC_ALL")},
    }
    result = subprocess.run(
        ["bash", "-c", wrapped], cwd=ROOT, env=env, capture_output=True, text=True, timeout=200
    )
    assert result.returncode == 0, result.stdout + result.stderr
    tables = [block for block in result.stdout.split("NAME ")[1:]]
    assert len(tables) == 2, result.stdout
    last = {line.split()[0]: line.split() for line in tables[-1].splitlines()[1:] if line.strip()}
    assert last["node-1"][:7] == ["node-1", "i-0001", "m5.large", "8", "0", "0", "True"]
    assert last["node-2"][:7] == ["node-2", "i-0002", "m5.large", "4", "0", "0", "True"]
