"""Build the eni-ipam image with the real Docker, on the pinned base or, where no registry is reachable,
on a Debian base made here with debootstrap.

    python scripts/build_image.py --tag eni-ipam:e2e [--docker-host unix:///run/docker.sock]

The pinned base (the Dockerfile's ``BASE_IMAGE``) is used when ``docker pull`` gets it. Otherwise a
Debian bookworm base (``--variant=minbase`` plus python3, python3-venv and ca-certificates, fetched
from the Debian archive over HTTPS, trusting the host's CA certificates, which the base then keeps
for the build's own downloads) is imported as
``eni-ipam-base:bookworm`` and passed as ``BASE_IMAGE``; an image of that name that already exists
is reused, since debootstrap takes minutes. Prints the base used; exits 1 with the reason on failure.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEBIAN_BASE = "eni-ipam-base:bookworm"
DEBIAN_MIRROR = "https://deb.debian.org/debian"
DEBIAN_PACKAGES = "python3,python3-venv,ca-certificates"
HOST_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"


def pinned_base() -> str:
    """The Dockerfile's default ``BASE_IMAGE`` (name@sha256:digest)."""
    match = re.search(r"^ARG BASE_IMAGE=(\S+)$", (ROOT / "Dockerfile").read_text(), re.M)
    if match is None:
        raise SystemExit("Dockerfile: no ARG BASE_IMAGE=...")
    return match.group(1)


def docker_command(host: str) -> list[str]:
    """``docker``, talking to ``host`` (empty: the client's default daemon)."""
    return ["docker", *(["-H", host] if host else [])]


def docker(
    host: str, *args: str, timeout: float = 900, check: bool = True
) -> subprocess.CompletedProcess[str]:
    command = [*docker_command(host), *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise RuntimeError(
            f"{' '.join(command[:6])}... failed ({done.returncode}): {done.stderr.strip()[-2000:]}"
        )
    return done


def debian_base(host: str) -> str:
    """``eni-ipam-base:bookworm``, made with debootstrap unless it exists."""
    if docker(host, "image", "inspect", DEBIAN_BASE, check=False).returncode == 0:
        return DEBIAN_BASE
    if shutil.which("debootstrap") is None:
        raise RuntimeError("debootstrap is missing (apt-get install debootstrap; make image-tools)")
    with tempfile.TemporaryDirectory(prefix="eni-ipam-base-") as tmp:
        root = Path(tmp) / "root"
        command = ["debootstrap", "--variant=minbase", f"--include={DEBIAN_PACKAGES}", "bookworm", str(root)]
        done = subprocess.run([*command, DEBIAN_MIRROR], capture_output=True, text=True, timeout=1200)
        if done.returncode != 0:
            raise RuntimeError(f"debootstrap failed: {done.stdout[-1500:]}{done.stderr[-1500:]}")
        # What a container never needs: the package caches and lists (the image stays smaller).
        for leftover in ("var/cache/apt/archives", "var/lib/apt/lists"):
            shutil.rmtree(root / leftover, ignore_errors=True)
        # The host's CA certificates, which debootstrap trusted: the build fetches the locked
        # dependencies through the same network (a TLS-inspecting proxy's CA included), and pip reads
        # this bundle (PIP_CERT below) rather than its own.
        if Path(HOST_CA_BUNDLE).is_file():
            shutil.copyfile(HOST_CA_BUNDLE, root / HOST_CA_BUNDLE.lstrip("/"))
        tar = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
        imported = subprocess.run(
            [
                *docker_command(host),
                "import",
                "--change",
                'CMD ["/bin/bash"]',
                "--change",
                f"ENV PIP_CERT={HOST_CA_BUNDLE}",
                "-",
                DEBIAN_BASE,
            ],
            stdin=tar.stdout,
            capture_output=True,
            text=True,
            timeout=600,
        )
        tar.wait()
        if imported.returncode != 0:
            raise RuntimeError(f"docker import failed: {imported.stderr.strip()}")
    return DEBIAN_BASE


def choose_base(host: str) -> str:
    """The pinned base when a registry gives it, else the Debian one."""
    pinned = pinned_base()
    if docker(host, "image", "inspect", pinned, check=False).returncode == 0:
        return pinned
    if docker(host, "pull", pinned, timeout=120, check=False).returncode == 0:
        return pinned
    return debian_base(host)


def build(host: str, tag: str, base: str) -> None:
    # The host network: the build fetches the locked dependencies from PyPI, and a private dockerd may
    # run without a bridge.
    args = ["build", "--network", "host", "--build-arg", f"BASE_IMAGE={base}", "-t", tag, str(ROOT)]
    docker(host, *args, timeout=1800)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="build_image.py", description=__doc__.splitlines()[0])
    parser.add_argument("--tag", default="eni-ipam:dev")
    parser.add_argument("--docker-host", default=os.environ.get("DOCKER_HOST", ""))
    args = parser.parse_args(argv)
    try:
        base = choose_base(args.docker_host)
        build(args.docker_host, args.tag, base)
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        print(f"build_image: {exc}", file=sys.stderr)
        return 1
    print(f"built {args.tag} on {base}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
