"""kubectl and helm pointed at a FakeKube: what the tests of the real tools against it share."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import sysconfig
from pathlib import Path

import pytest

from eni_ipam_testkit.fake_kube import FakeKube

BIN = Path(sysconfig.get_path("scripts"))
KUBECTL, HELM = BIN / "kubectl", BIN / "helm"
CHART = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "eni-ipam"


@dataclasses.dataclass(frozen=True)
class Done:
    code: int
    out: str
    err: str


@dataclasses.dataclass
class Tools:
    """kubectl and helm pointed at one FakeKube, each run with a clean environment."""

    kube: FakeKube
    home: Path

    def kubeconfig(self, account: tuple[str, str] | None) -> Path:
        path = self.home / (
            "admin.kubeconfig" if account is None else f"{account[0]}-{account[1]}.kubeconfig"
        )
        self.kube.write_kubeconfig(path, service_account=account)
        return path

    async def run(
        self, tool: Path, *args: str, stdin: str | None = None, account: tuple[str, str] | None = None
    ) -> Done:
        if not os.access(tool, os.X_OK):
            pytest.skip(f"{tool} is missing (make kube-tools installs it)")
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.home),
            "KUBECONFIG": str(self.kubeconfig(account)),
            "HELM_CACHE_HOME": str(self.home / "helm-cache"),
            "HELM_CONFIG_HOME": str(self.home / "helm-config"),
            "HELM_DATA_HOME": str(self.home / "helm-data"),
        }
        process = await asyncio.create_subprocess_exec(
            str(tool),
            *args,
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
        )
        out, err = await process.communicate(stdin.encode() if stdin is not None else None)
        assert process.returncode is not None
        return Done(process.returncode, out.decode(), err.decode())

    async def kubectl(
        self, *args: str, stdin: str | None = None, account: tuple[str, str] | None = None
    ) -> Done:
        return await self.run(KUBECTL, *args, stdin=stdin, account=account)

    async def ok(self, *args: str, stdin: str | None = None, account: tuple[str, str] | None = None) -> str:
        """kubectl's output; fails the test, with kubectl's error, when it does not succeed."""
        done = await self.kubectl(*args, stdin=stdin, account=account)
        assert done.code == 0, done.err
        return done.out

    async def helm(self, *args: str) -> Done:
        return await self.run(HELM, *args)
