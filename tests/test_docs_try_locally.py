"""docs/deploy.md, section 11 ("Trying it locally"), run word for word: a newcomer can follow it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent

pytestmark = [
    pytest.mark.system,
    pytest.mark.timeout(240),
    pytest.mark.skipif(
        not ((BIN / "helm").exists() and (BIN / "kubectl").exists()),
        reason=f"{BIN}/helm or {BIN}/kubectl is missing (make kube-tools installs them)",
    ),
]


def section_script() -> str:
    """Section 11's shell blocks, in order, as one script (the later ones continue the first)."""
    text = (ROOT / "docs" / "deploy.md").read_text()
    section = text.split("## 11. Trying it locally", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)\n```", section, re.S)
    assert blocks, "section 11 has no shell block"
    return "\n".join(blocks)


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
    assert len(tables) == 3, result.stdout
    patched = {line.split()[0]: line.split() for line in tables[1].splitlines()[1:] if line.strip()}
    assert patched["node-1"][:7] == ["node-1", "i-0001", "m5.large", "8", "0", "0", "True"]
    assert patched["node-2"][:7] == ["node-2", "i-0002", "m5.large", "4", "0", "0", "True"]
    # After the upgrade and the restart: the new default reached the pool that kept the old one.
    upgraded = {line.split()[0]: line.split() for line in tables[2].splitlines()[1:] if line.strip()}
    assert upgraded["node-1"][3] == "8" and upgraded["node-2"][3] == "6"
    # Both controllers listened on loopback and logged the port they got, not the 0 they were given.
    (run_log,) = tmp_path.glob("tmp.*/run.log")  # the script's `mktemp -d`, under TMPDIR
    started = [json.loads(line) for line in run_log.read_text().splitlines() if '"service_started"' in line]
    assert len(started) == 2, run_log.read_text()[-2000:]
    for event in started:
        host, port = event["endpoint"].rsplit(":", 1)
        assert host == "127.0.0.1" and int(port) > 0


def test_the_dev_cluster_wait_in_section_11_gives_up_with_the_log_when_the_server_never_starts(
    tmp_path: Path,
) -> None:
    script = section_script()
    start = script.index("eni-ipam dev-cluster")
    wait = script[start : script.index("export KUBECONFIG")]
    # An eni-ipam that fails at once, as one would on a port already in use.
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "eni-ipam").write_text("#!/bin/sh\necho 'cannot listen on 127.0.0.1:6443' >&2\nexit 2\n")
    (fake / "eni-ipam").chmod(0o755)
    result = subprocess.run(
        ["bash", "-c", f"set -euo pipefail\n{wait}\necho started"],
        cwd=tmp_path,
        env={"PATH": f"{fake}:/usr/bin:/bin", "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0 and "started" not in result.stdout
    assert "cannot listen on 127.0.0.1:6443" in result.stderr
