"""The architecture holds: the import contracts in pyproject.toml pass, and breaking one fails them.

docs/architecture.md draws the layers; ``lint-imports`` (import-linter) checks them in ``make lint``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINT = Path(sys.executable).with_name("lint-imports")


def lint(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT), "--no-cache"],
        cwd=root,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_import_contracts_hold() -> None:
    result = lint(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        ("eni_ipam/core/manager.py", "import providers.sim.cloud", "Layers point down"),
        ("eni_ipam/core/model.py", "import eni_ipam.kube.api", "Layers point down"),
        ("eni_ipam/kube/source.py", "from eni_ipam.app import runconfig", "Layers point down"),
        ("providers/sim/service.py", "import eni_ipam.app.runconfig", "Layers point down"),
        ("eni_ipam/core/planner.py", "import eni_ipam.core.node", "The core is layered"),
        ("eni_ipam/agent/daemon.py", "import eni_ipam.core.manager", "The node agent needs no reconciler"),
        ("providers/generic/provider.py", "import providers.sim.cloud", "Providers do not know each other"),
        ("providers/sim/provider.py", "import boto3", "Each cloud SDK is imported by its own provider only"),
        ("eni_ipam/simulator/simulate.py", "import eni_ipam_testkit.fake_kube", "never imports the test kit"),
        ("eni_ipam/app/demo.py", "import moto", "never imports the test kit"),
        ("eni_ipam/cli.py", "import bench.report", "never imports the test kit"),
        ("eni_ipam/cli.py", "import eni_ipam_testkit.commands", "Layers point down"),
        ("eni_ipam_testkit/fake_kube/store.py", "import bench.report", "Layers point down"),
        ("bench/report.py", "import scripts.build_image", "Layers point down"),
        ("scripts/render_manifests.py", "import eni_ipam.kube.api", "Scripts run without the service"),
        ("eni_ipam/core/node.py", "import eni_ipam._infra.metrics", "Layers point down"),
        ("eni_ipam/core/planner.py", "import eni_ipam._infra.files", "only through its own protocols"),
        ("eni_ipam/core/view.py", "import prometheus_client", "only through its own protocols"),
        ("eni_ipam/_infra/config.py", "import eni_ipam.core.model", "Layers point down"),
        (
            "providers/sim/provider.py",
            "import prometheus_client",
            "Providers report through the API observer",
        ),
    ],
)
def test_breaking_a_contract_on_purpose_fails_the_check(
    tmp_path: Path, module: str, line: str, contract: str
) -> None:
    for part in ("eni_ipam", "providers", "testkit/eni_ipam_testkit", "bench", "scripts"):
        copy = tmp_path / Path(part).name  # the test kit's package is importable from the root here
        shutil.copytree(ROOT / part, copy, ignore=shutil.ignore_patterns("__pycache__", "data"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    target = tmp_path / module  # paths as seen from the copy's root
    target.write_text(target.read_text() + f"\n{line}  # noqa\n")
    result = lint(tmp_path)
    assert result.returncode != 0
    broken = [text for text in result.stdout.split("\n\n") if "BROKEN" in text]
    assert any(contract in text for text in broken), result.stdout


def test_the_agent_process_loads_no_reconciler_simulator_or_provider() -> None:
    probe = (
        "import sys, eni_ipam.agent.daemon, eni_ipam.agent.config\n"
        "bad = sorted(m for m in sys.modules if m.startswith(("
        "'eni_ipam.app', 'eni_ipam.simulator', 'eni_ipam.core.manager', 'eni_ipam.core.node', "
        "'providers', 'pydantic_settings', 'boto3', 'moto')))\n"
        "print(bad)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == "[]"
