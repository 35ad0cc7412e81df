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


DISTRIBUTIONS = "The distributions stack"
FOLDERS = "The product's folders are its layers"
PROVIDERS_SEE = "Providers see only the domain"


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        # No module of the product imports a provider: they are found by entry points.
        ("eni_ipam/core/manager.py", "import providers.sim.cloud", DISTRIBUTIONS),
        ("eni_ipam/simulator/simulate.py", "import providers.sim.cloud", DISTRIBUTIONS),
        ("eni_ipam/cli.py", "import providers.aws.iam_policy", DISTRIBUTIONS),
        ("eni_ipam/app/demo.py", "from providers.sim import emulator", DISTRIBUTIONS),
        ("eni_ipam/core/model.py", "import eni_ipam.kube.api", FOLDERS),
        ("eni_ipam/kube/source.py", "from eni_ipam.app import runconfig", FOLDERS),
        ("eni_ipam/agent/daemon.py", "import eni_ipam.simulator.simloop", FOLDERS),
        ("eni_ipam/core/node.py", "import eni_ipam.adapters.metrics", FOLDERS),
        ("eni_ipam/config/schema.py", "import eni_ipam.core.model", FOLDERS),
        ("eni_ipam/adapters/server.py", "import eni_ipam.kube.api", FOLDERS),
        ("providers/sim/service.py", "import eni_ipam.app.runconfig", PROVIDERS_SEE),
        ("providers/aws/provider.py", "import eni_ipam.adapters.metrics", PROVIDERS_SEE),
        ("providers/sim/provider.py", "import prometheus_client", PROVIDERS_SEE),
        ("eni_ipam/core/planner.py", "import eni_ipam.core.node", "The domain is layered"),
        ("eni_ipam/agent/daemon.py", "import eni_ipam.core.manager", "The node side needs no reconciler"),
        ("eni_ipam/agent/allocator.py", "import eni_ipam.core.spec", "The node side is a program of its own"),
        ("providers/generic/provider.py", "import providers.sim.cloud", "Providers do not know each other"),
        ("providers/sim/provider.py", "import boto3", "Each cloud SDK is imported by its own provider only"),
        (
            "providers/ec2/provider.py",
            "import botocore",
            "Each cloud SDK is imported by its own provider only",
        ),
        ("eni_ipam/simulator/simulate.py", "import eni_ipam_testkit.fake_kube", "never imports the test kit"),
        ("eni_ipam/app/demo.py", "import moto", "never imports the test kit"),
        ("eni_ipam/cli.py", "import bench.report", "never imports the test kit"),
        ("eni_ipam/cli.py", "import eni_ipam_testkit.commands", DISTRIBUTIONS),
        ("eni_ipam_testkit/fake_kube/store.py", "import bench.report", DISTRIBUTIONS),
        ("bench/report.py", "import scripts.build_image", DISTRIBUTIONS),
        ("scripts/render_manifests.py", "import eni_ipam.kube.api", "Scripts run without the service"),
        ("eni_ipam/core/planner.py", "import eni_ipam.config.files", "The domain reads no file"),
        ("eni_ipam/core/view.py", "import prometheus_client", "The domain reads no file"),
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
        "import sys, eni_ipam.agent.main, eni_ipam.agent.daemon, eni_ipam.agent.config\n"
        "bad = sorted(m for m in sys.modules if m.startswith(("
        "'eni_ipam.app', 'eni_ipam.simulator', 'eni_ipam.core.manager', 'eni_ipam.core.node', "
        "'providers', 'pydantic_settings', 'boto3', 'moto')))\n"
        "print(bad)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == "[]"
