"""End to end: ``eni-ipam status`` and ``kubectl eni-ipam status`` against ``eni-ipam dev-cluster`` with
``eni-ipam run`` (the in-memory cloud) reconciling its Nodes, as an operator would run them.

A Node whose instance the cloud does not know is named, with exit status 1, by the command and by
the real kubectl running the plugin (kubectl passes a plugin's exit status on); once that Node is
deleted, both say OK and exit 0.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import tomllib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml

from tests.operator_shell import KUBECTL, NEEDS_KUBE_TOOLS, nodes_manifest

pytestmark = [pytest.mark.system, pytest.mark.timeout(180), NEEDS_KUBE_TOOLS]

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
PLUGIN = "kubectl-eni_ipam"


def plugin_shim(directory: Path) -> Path:
    """A ``kubectl-eni_ipam`` on PATH running the function pyproject.toml's console script names (the
    shared virtual environment has the script only once the package is installed again)."""
    target = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"][PLUGIN]
    module, function = target.split(":")
    directory.mkdir(exist_ok=True)
    shim = directory / PLUGIN
    shim.write_text(
        f"#!{sys.executable}\nimport sys\nfrom {module} import {function}\nsys.exit({function}())\n"
    )
    shim.chmod(0o755)
    return shim


class Session:
    def __init__(self, home: Path, env: dict[str, str]) -> None:
        self.home, self.env = home, env
        self.kubeconfig = home / "kubeconfig"

    async def run(self, *command: str | Path, env: dict[str, str] | None = None) -> tuple[int, str, str]:
        process = await asyncio.create_subprocess_exec(
            *map(str, command),
            env=env or self.env,
            cwd=ROOT,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(process.communicate(), 60)
        assert process.returncode is not None
        return process.returncode, out.decode(), err.decode()

    async def kubectl(self, *args: str, stdin: str | None = None) -> str:
        process = await asyncio.create_subprocess_exec(
            str(KUBECTL), *args, env=self.env, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await process.communicate(stdin.encode() if stdin is not None else None)
        assert process.returncode == 0, err.decode()
        return out.decode()

    async def status(self, *args: str) -> tuple[int, str, str]:
        return await self.run(
            sys.executable, "-m", "eni_ipam.cli", "status", "--kubeconfig", self.kubeconfig, *args
        )

    async def wait(self, what: str, ready: object, limit: float = 60.0) -> None:
        async with asyncio.timeout(limit):
            while not await ready():  # type: ignore[operator]
                await asyncio.sleep(0.3)

    async def pools(self) -> dict[str, dict]:
        listing = json.loads(await self.kubectl("get", "enipools", "-o", "json"))
        return {item["metadata"]["name"]: item for item in listing["items"]}


def config(kubeconfig: Path) -> dict:
    return {
        "provider": "sim",
        "node_source": "kubernetes",
        "log_level": "info",
        "shutdown_timeout": "5s",
        "server": {"host": "127.0.0.1", "port": 0, "probe_port": 0},
        "sim": {
            "latency": 0,
            "cloud": {
                "vpcs": [{"id": "vpc-1", "cidr": "10.0.0.0/16"}],
                "subnets": [{"id": "subnet-a", "vpc": "vpc-1", "zone": "us-east-1a", "cidr": "10.0.0.0/22"}],
                "security_groups": [{"id": "sg-1", "vpc": "vpc-1"}],
                "instances": [
                    {"id": "i-0001", "type": "m5.large", "subnet": "subnet-a", "security_groups": ["sg-1"]}
                ],
            },
        },
        "kubernetes": {
            "kubeconfig": str(kubeconfig),
            "lease_namespace": "kube-system",
            "identity": "eni-ipam-0",
            "lease_duration": "3s",
            "renew_deadline": "2s",
            "retry_period": "0.5s",
        },
        "node_defaults": {"pre_allocate": 4},
    }


async def stop(process: asyncio.subprocess.Process) -> None:
    if process.returncode is None:
        process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), 20)
        except TimeoutError:
            process.kill()
            await process.wait()


async def started(log: Path) -> str:
    """The controller's endpoint, once its log says which port it got."""
    async with asyncio.timeout(30):
        while True:
            for line in (await asyncio.to_thread(log.read_text)).splitlines():
                if '"service_started"' in line:
                    return str(json.loads(line)["endpoint"])
            await asyncio.sleep(0.2)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[tuple[Session, str]]:
    """``eni-ipam dev-cluster``, the CRD applied with kubectl, ``eni-ipam run`` reconciling; the
    session and the controller's /metrics URL."""
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("ENI_IPAM_")}, "HOME": str(tmp_path)}
    env["PATH"] = f"{tmp_path / 'plugins'}:{BIN}:/usr/bin:/bin"
    session = Session(tmp_path, env)
    env["KUBECONFIG"] = str(session.kubeconfig)
    command = (sys.executable, "-m", "eni_ipam.cli")
    with (tmp_path / "dev-cluster.log").open("w") as log:
        server = await asyncio.create_subprocess_exec(
            *command,
            "dev-cluster",
            "--kubeconfig",
            str(session.kubeconfig),
            env=env,
            cwd=ROOT,
            stdout=log,
            stderr=log,
        )
    controller = None
    try:
        async with asyncio.timeout(20):
            while not session.kubeconfig.exists() or not session.kubeconfig.stat().st_size:
                await asyncio.sleep(0.1)
        await session.kubectl("apply", "--server-side", "-f", str(ROOT / "deploy/kubernetes/crd.yaml"))
        (tmp_path / "config.yaml").write_text(yaml.safe_dump(config(session.kubeconfig)))
        run_log = tmp_path / "run.log"
        with run_log.open("w") as log:
            controller = await asyncio.create_subprocess_exec(
                *command,
                "run",
                "--config",
                str(tmp_path / "config.yaml"),
                env=env,
                cwd=ROOT,
                stdout=log,
                stderr=log,
            )
        yield session, f"http://{await started(run_log)}/metrics"
    finally:
        if controller is not None:
            await stop(controller)
        await stop(server)


async def test_status_names_a_node_whose_instance_the_cloud_does_not_know_and_exits_1(
    cluster: tuple[Session, str], tmp_path: Path
) -> None:
    session, metrics = cluster
    await session.kubectl("apply", "-f", "-", stdin=nodes_manifest({"node-1": "i-0001", "ghost": "i-0dead"}))

    async def judged() -> bool:
        pools = await session.pools()
        ready = {
            name: {c["type"]: c for c in (pool.get("status") or {}).get("conditions", [])}.get("Ready", {})
            for name, pool in pools.items()
        }
        return (ready.get("node-1") or {}).get("status") == "True" and (ready.get("ghost") or {}).get(
            "reason"
        ) == "InstanceNotRunning"

    await session.wait("node-1 ready, ghost judged", judged)

    code, out, err = await session.status("--metrics-url", metrics)
    assert code == 1, out + err
    assert out.startswith("eni-ipam status: NEEDS ATTENTION (1 problem)"), out
    assert "✗ ghost: no instance: instance i-0dead no longer exists" in out, out
    assert "kubectl delete node ghost" in out
    assert "leader eni-ipam-0" in out and "metrics: eni-ipam" in out and ", leader, ready" in out
    assert "Nodes      ✗ 2 Nodes: 1 ready, 1 no instance" in out

    code, out, _ = await session.status("--json")
    body = json.loads(out)
    assert code == 1 and body["exit_code"] == 1 and body["verdict"] == "NEEDS ATTENTION"
    assert [(f["section"], f["subject"]) for f in body["findings"] if f["severity"] == "problem"] == [
        ("nodes", "ghost")
    ]

    # The same through the real kubectl: a shim running pyproject's entry point, then the installed
    # script where the environment has it. kubectl hands the plugin its arguments and exit status.
    plugins = [plugin_shim(tmp_path / "plugins")]
    if (BIN / PLUGIN).exists():
        plugins.append(BIN / PLUGIN)
    for plugin in plugins:
        env = {**session.env, "PATH": f"{plugin.parent}:{BIN}:/usr/bin:/bin"}
        code, out, err = await session.run(
            KUBECTL, "eni-ipam", "status", "--kubeconfig", session.kubeconfig, env=env
        )
        assert code == 1, (plugin, out, err)
        assert "✗ ghost: no instance" in out, (plugin, out)

    # Healthy once the Node is gone: its pool goes (the controller's finalizer), and both say OK.
    await session.kubectl("delete", "node", "ghost")

    async def gone() -> bool:
        return "ghost" not in await session.pools()

    await session.wait("ghost's pool gone", gone)
    code, out, err = await session.status("--metrics-url", metrics, "--window", "1s")
    assert code == 0, out + err
    assert out.startswith("eni-ipam status: OK"), out
    assert "in the last 1s" in out
    env = {**session.env, "PATH": f"{tmp_path / 'plugins'}:{BIN}:/usr/bin:/bin"}
    code, out, _ = await session.run(KUBECTL, "eni-ipam", "status", env=env)  # KUBECONFIG, as kubectl's
    assert code == 0 and out.startswith("eni-ipam status: OK"), out


async def test_no_api_server_is_exit_2_with_a_message(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    shim = plugin_shim(tmp_path / "plugins")
    env = {**os.environ, "PATH": f"{shim.parent}:{BIN}:/usr/bin:/bin", "HOME": str(tmp_path)}
    for command in (
        (sys.executable, "-m", "eni_ipam.cli", "status", "--kubeconfig", str(kubeconfig)),
        (str(KUBECTL), "eni-ipam", "status", "--kubeconfig", str(kubeconfig)),
    ):
        process = await asyncio.create_subprocess_exec(
            *command, env=env, cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        out, err = await asyncio.wait_for(process.communicate(), 60)
        assert process.returncode == 2, (command, out, err)
        assert err.decode().startswith(
            "eni-ipam status: cannot reach the Kubernetes API server https://127.0.0.1:1"
        )
        assert b"Traceback" not in err and out == b""


async def test_the_command_line_loads_the_status_command_only_when_it_runs() -> None:
    probe = (
        "import sys, contextlib, io\n"
        "from eni_ipam.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "    main(['status', '--help'])\n"
        "loaded = ('lightkube', 'aiohttp', 'eni_ipam.app.status.')\n"
        "print(sorted(m for m in sys.modules if m.startswith(loaded)))\n"
    )
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", probe, cwd=ROOT, stdout=asyncio.subprocess.PIPE
    )
    out, _ = await process.communicate()
    assert out.decode().strip() == "[]"
