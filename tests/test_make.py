"""The Makefile's promises to a newcomer: `make run` installs only what the demo needs and says so,
`make test` the toolchain, and neither prints screens of installer warnings.

``make -n`` prints the commands a target would run without running them, in a scratch directory holding
the Makefile and the two project files, so nothing is installed."""

from __future__ import annotations

import os
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")


def planned(tmp_path: Path, target: str, *, installed: bool = False) -> str:
    """What ``make -n TARGET`` would run on a fresh checkout (or, ``installed``, after `make test`)."""
    (tmp_path / "testkit").mkdir(exist_ok=True)
    shutil.copy(ROOT / "Makefile", tmp_path)
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    shutil.copy(ROOT / "testkit" / "pyproject.toml", tmp_path / "testkit")
    if installed:
        (tmp_path / ".venv" / "bin").mkdir(parents=True)
        (tmp_path / ".venv" / "bin" / "python").touch()
        (tmp_path / ".venv" / ".installed").touch()
    done = subprocess.run(
        ["make", "--no-print-directory", "-n", target],
        cwd=tmp_path,
        env=outside_make(),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout


def outside_make() -> dict[str, str]:
    """This environment without what a make running these tests passes to the makes it starts (CI runs
    them under `make test`): the make started here is a first one, as a user's is."""
    inherited = ("MAKEFLAGS", "MAKELEVEL", "MFLAGS", "MAKEOVERRIDES")
    return {name: value for name, value in os.environ.items() if name not in inherited}


@pytest.mark.system
def test_make_run_installs_the_product_and_its_view_only(tmp_path: Path) -> None:
    commands = planned(tmp_path, "run")
    installs = [
        line for line in commands.splitlines() if "pip install" in line and "--upgrade pip" not in line
    ]
    assert installs and all("'.[view]'" in line for line in installs), installs
    assert "[test]" not in commands and "testkit" not in commands
    assert "installing into .venv: eni-ipam and its live view" in commands
    assert commands.rstrip().endswith(".venv/bin/eni-ipam demo")


@pytest.mark.system
def test_make_test_installs_the_toolchain_and_the_test_kit(tmp_path: Path) -> None:
    commands = planned(tmp_path, "test")
    assert "-e '.[test]' -e ./testkit" in commands


@pytest.mark.system
@pytest.mark.parametrize(("tested", "expected"), [(False, ["install -qq -e .[view]"]), (True, [])])
def test_make_run_installs_only_when_make_test_did_not(
    tmp_path: Path, tested: bool, expected: list[str]
) -> None:
    """The run stamp's recipe, run for real with a pip that records its arguments: after `make test`
    (its stamp newer than pyproject.toml) it installs nothing more."""
    planned(tmp_path, "run", installed=tested)
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    (bin_dir / "python").touch()
    calls = tmp_path / "pip-calls"
    pip = bin_dir / "pip"
    pip.write_text(f'#!/bin/sh\necho "$*" >> {calls}\n')
    pip.chmod(0o755)
    if tested:
        os.utime(tmp_path / "pyproject.toml", (1, 1))  # older than the test stamp
    subprocess.run(
        ["make", ".venv/.installed-run"],
        cwd=tmp_path,
        env=outside_make(),
        capture_output=True,
        timeout=60,
        check=True,
    )
    assert (calls.read_text().splitlines() if calls.exists() else []) == expected
    assert (tmp_path / ".venv" / ".installed-run").exists()


def test_every_install_is_quiet_about_what_is_not_the_projects() -> None:
    """pip's warnings about the machine's own index configuration, screens of them on some machines,
    are not the project's: installs run with -qq, which still prints an install's error."""
    makefile = (ROOT / "Makefile").read_text()
    installs = [line for line in makefile.splitlines() if "pip install" in line and "'uv==" not in line]
    assert installs and all("pip install -qq" in line for line in installs), installs


@pytest.mark.parametrize("project", ["pyproject.toml", "testkit/pyproject.toml"])
def test_the_licence_is_an_spdx_expression(project: str) -> None:
    """A licence written as a table makes setuptools print a deprecation banner at every install."""
    data = tomllib.loads((ROOT / project).read_text())
    assert data["project"]["license"] == "Apache-2.0"
    assert any(req.startswith("setuptools>=77") for req in data["build-system"]["requires"])
