"""What ships: the product wheel, built as the image builds it, holds product code only.

The test kit (``testkit/``: the fake Kubernetes API server, the fake Azure, moto's EC2 with EC2's
limits, the moto demo) is a distribution of its own; the image installs the product wheel from
the files its Dockerfile copies. This builds that wheel from exactly those files and lists it.
"""

from __future__ import annotations

import email
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from eni_ipam import __version__

ROOT = Path(__file__).resolve().parent.parent
TEST_DOUBLE_MARKS = re.compile(
    r"^\s*(?:import|from)\s+(moto|unittest\.mock|unittest|eni_ipam_testkit|pytest|hypothesis)\b", re.M
)
"""An import only test code makes: moto, the standard library's mocks, the test kit, test runners."""


def _builder_copies() -> list[str]:
    """The sources the Dockerfile's builder stage copies into the build (requirements aside)."""
    text = (ROOT / "Dockerfile").read_text()
    builder = text.split(" AS builder", 1)[1].split("\nFROM ", 1)[0]
    sources = []
    for line in builder.splitlines():
        words = line.split()
        if words[:1] == ["COPY"] and not any(w.startswith("--from") for w in words):
            sources += [w for w in words[1:-1] if not w.startswith("requirements")]
    return sources


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    source = tmp_path_factory.mktemp("source")
    for item in _builder_copies():
        target = source / item
        target.parent.mkdir(parents=True, exist_ok=True)
        if (ROOT / item).is_dir():
            shutil.copytree(ROOT / item, target, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(ROOT / item, target)
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--wheel-dir",
            str(out),
            str(source),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (built,) = out.glob("eni_ipam-*.whl")
    return zipfile.ZipFile(built)


def test_the_image_builds_from_the_product_sources_only() -> None:
    copied = _builder_copies()
    assert {"eni_ipam", "providers", "pyproject.toml"} <= set(copied), copied
    assert not any("testkit" in item or item.startswith("tests") for item in copied), copied


def test_the_wheel_holds_the_product_packages_and_nothing_else(wheel: zipfile.ZipFile) -> None:
    tops = {name.split("/", 1)[0] for name in wheel.namelist()}
    assert tops == {"eni_ipam", "providers", f"eni_ipam-{__version__}.dist-info"}, sorted(tops)
    for required in (
        "eni_ipam/cli.py",
        "eni_ipam/core/planner.py",
        "providers/aws/provider.py",
        "providers/ec2/instance_types.json",
        "eni_ipam/kube/enipools.eni-ipam.io.yaml",  # the CRD the controller checks the cluster's against
        "eni_ipam/testing/provider_contract.py",
    ):
        assert required in wheel.namelist(), required


def test_the_wheel_holds_no_test_double(wheel: zipfile.ZipFile) -> None:
    doubles = [n for n in wheel.namelist() if re.search(r"fake_|moto|testkit|demo_aws|conftest|/tests?/", n)]
    assert not doubles, doubles
    importing = {
        name: sorted(set(TEST_DOUBLE_MARKS.findall(wheel.read(name).decode())))
        for name in wheel.namelist()
        if name.endswith(".py")
    }
    assert not {name: found for name, found in importing.items() if found}


def test_the_wheel_requires_what_pyproject_declares_and_no_test_tool(wheel: zipfile.ZipFile) -> None:
    metadata = email.message_from_bytes(wheel.read(f"eni_ipam-{__version__}.dist-info/METADATA"))
    runtime = sorted(r for r in metadata.get_all("Requires-Dist") or [] if "extra ==" not in r)
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert runtime == sorted(declared)
    assert not [r for r in runtime if re.match(r"(moto|pytest|hypothesis|eni-ipam-testkit)\b", r)]
    entry_points = wheel.read(f"eni_ipam-{__version__}.dist-info/entry_points.txt").decode()
    assert "dev-cluster" not in entry_points and "eni_ipam.demos" not in entry_points
