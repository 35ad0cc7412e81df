"""The ready configurations of examples/config/ and the reference block of docs/configuration.md:
each is what it says, checked by ``eni-ipam run --check`` as people run it, and the in-memory one runs.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from eni_ipam.app.runconfig import load_config
from tests.waiting import until

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples" / "config").glob("*.yaml"))
KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
"""


def environment(tmp_path: Path) -> dict[str, str]:
    """What the examples say to set outside a pod (a kubeconfig), free ports (a machine runs many
    things), and no AWS or Azure setting of the machine running the test."""
    (tmp_path / "kubeconfig").write_text(KUBECONFIG)
    kept = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ENI_IPAM_", "AWS_", "AZURE_", "KUBERNETES_"))
    }
    return {
        **kept,
        "AWS_CONFIG_FILE": str(tmp_path / "no-aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "no-aws-credentials"),
        "ENI_IPAM_KUBERNETES__KUBECONFIG": str(tmp_path / "kubeconfig"),
        "ENI_IPAM_SERVER__PORT": "0",
        "ENI_IPAM_SERVER__PROBE_PORT": "0",
    }


def test_there_is_an_example_for_each_provider_and_node_source() -> None:
    shapes = {(c.provider, c.node_source) for c in map(load_config, EXAMPLES)}
    assert {p for p, _ in shapes} == {"aws", "azure", "generic", "sim"}
    assert {s for _, s in shapes} == {"kubernetes", "memory"}


@pytest.mark.system
@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_each_example_passes_check(example: Path, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "eni_ipam.cli", "run", "--config", str(example), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
        env=environment(tmp_path),
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("configuration OK: provider ")
    assert done.stderr == ""  # not even a note


@pytest.mark.system
@pytest.mark.timeout(60)
async def test_the_in_memory_example_runs_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    with log.open("w") as out:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "eni_ipam.cli",
            "run",
            "--config",
            "examples/config/sim-memory.yaml",
            stdout=out,
            stderr=out,
            env=environment(tmp_path),
            cwd=ROOT,
        )
        try:  # running: its nodes' pools are being filled
            await until(lambda: "addresses_assigned" in log.read_text() or process.returncode is not None, 30)
        finally:
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), 30) == 0, log.read_text()[-3000:]
    text = log.read_text()
    assert "addresses_assigned" in text and "service_stopped" in text and "Traceback" not in text


def test_the_reference_block_of_configuration_md_loads_as_copied(tmp_path: Path) -> None:
    page = (ROOT / "docs" / "configuration.md").read_text()
    block = re.search(r"```yaml\n(provider: .*?)```", page, re.S)
    assert block is not None
    path = tmp_path / "config.yaml"
    path.write_text(block.group(1))
    config = load_config(path)
    assert (config.provider, config.node_source) == ("aws", "kubernetes")
