"""End to end: ``eni-ipam status`` and ``kubectl eni-ipam status`` against ``eni-ipam dev-cluster``, the
chart installed by helm and ``eni-ipam run`` (the in-memory cloud) under the chart's RBAC, as an
operator would have them (tests/e2e/stack.py's dev-cluster, tests/operator_shell.py's shell).

A Node whose instance the cloud does not know is named, with exit status 1, by the command and by
the real kubectl running the plugin (kubectl passes a plugin's exit status on); once that Node is
deleted, both say OK and exit 0.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tomllib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml

from tests.deploy.conftest import CHART
from tests.e2e.stack import DevCluster, start, stop, wait_for
from tests.operator_shell import KUBECTL, NEEDS_KUBE_TOOLS, RELEASE, Operator, nodes_manifest, sim_values

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


async def run(*command: str | Path, env: dict[str, str]) -> tuple[int, str, str]:
    """A command's exit status, output and errors (the shell's ``run`` only says whether it failed)."""
    process = await asyncio.create_subprocess_exec(
        *map(str, command), env=env, cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def status(op: Operator, *args: str) -> tuple[int, str, str]:
    command = (sys.executable, "-m", "eni_ipam.cli", "status", "--kubeconfig", str(op.kubeconfig), *args)
    return await run(*command, env={**os.environ, **op.env})


async def endpoint(log: Path) -> str:
    """The controller's address, once its log says which port it got."""
    found: list[str] = []

    async def said() -> bool:
        lines = (await asyncio.to_thread(log.read_text)).splitlines()
        found.extend(json.loads(line)["endpoint"] for line in lines if '"service_started"' in line)
        return bool(found)

    await wait_for("the controller's endpoint in its log", said, 30)
    return found[0]


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[tuple[Operator, str]]:
    """dev-cluster with the chart (the in-memory cloud) and its controller: the operator's shell and
    the controller's /metrics URL."""
    admin = tmp_path / "dev-cluster.kubeconfig"
    server = await start("dev-cluster", tmp_path, sys.executable, "-m", "eni_ipam.cli", "dev-cluster",
                         "--kubeconfig", str(admin))  # fmt: skip
    home = tmp_path / "operator"
    home.mkdir()
    op: Operator | None = None
    try:
        await wait_for("dev-cluster's kubeconfig", lambda: _nonempty(admin), 30)
        op = Operator(DevCluster(admin, {"PATH": f"{BIN}:/usr/bin:/bin", "HOME": str(home)}), home)
        await op.helm("install", RELEASE, str(CHART), "--create-namespace", values=sim_values(4))
        log = home / "controller.log"
        await op.start_controller({"ENI_IPAM_SERVER__HOST": "127.0.0.1"}, log=log)
        yield op, f"http://{await endpoint(log)}/metrics"
    finally:
        if op is not None:
            await op.kill_all()
        await stop(server.process)


async def _nonempty(path: Path) -> bool:
    return await asyncio.to_thread(lambda: path.exists() and path.stat().st_size > 0)


async def test_status_names_a_node_whose_instance_the_cloud_does_not_know_and_exits_1(
    cluster: tuple[Operator, str], tmp_path: Path
) -> None:
    op, metrics = cluster
    await op.kubectl("apply", "-f", "-", stdin=nodes_manifest({"node-1": "i-0001", "ghost": "i-0dead"}))

    async def judged() -> bool:
        ready = {
            name: {c["type"]: c for c in (pool.get("status") or {}).get("conditions", [])}.get("Ready", {})
            for name, pool in (await op.pools()).items()
        }
        node_ready = (ready.get("node-1") or {}).get("status") == "True"
        return node_ready and (ready.get("ghost") or {}).get("reason") == "InstanceNotRunning"

    await op.wait("node-1 ready, ghost judged", judged)

    code, out, err = await status(op, "--metrics-url", metrics)
    assert code == 1, out + err
    assert out.startswith("eni-ipam status: NEEDS ATTENTION (1 problem)"), out
    assert "✗ ghost: no instance: instance i-0dead no longer exists" in out, out
    assert "kubectl delete node ghost" in out
    assert "leader eni-ipam-0" in out and ", leader, ready" in out
    assert "Nodes      ✗ 2 Nodes: 1 ready, 1 no instance" in out

    code, out, _ = await status(op, "--json")
    body = json.loads(out)
    assert code == 1 and body["exit_code"] == 1 and body["verdict"] == "NEEDS ATTENTION"
    problems = [(f["section"], f["subject"]) for f in body["findings"] if f["severity"] == "problem"]
    assert problems == [("nodes", "ghost")]

    # The same through the real kubectl: a shim running pyproject's entry point, then the installed
    # script where the environment has it. kubectl hands the plugin its arguments and exit status.
    plugins = [plugin_shim(tmp_path / "plugins")]
    if (BIN / PLUGIN).exists():
        plugins.append(BIN / PLUGIN)
    for plugin in plugins:
        env = {**os.environ, **op.env, "PATH": f"{plugin.parent}:{BIN}:/usr/bin:/bin"}
        code, out, err = await run(KUBECTL, "eni-ipam", "status", "--kubeconfig", op.kubeconfig, env=env)
        assert code == 1, (plugin, out, err)
        assert "✗ ghost: no instance" in out, (plugin, out)

    # Healthy once the Node is gone: its pool goes (the controller's finalizer), and both say OK.
    await op.kubectl("delete", "node", "ghost")

    async def gone() -> bool:
        return "ghost" not in await op.pools()

    await op.wait("ghost's pool gone", gone)
    code, out, err = await status(op, "--metrics-url", metrics, "--window", "1s")
    assert code == 0, out + err
    assert out.startswith("eni-ipam status: OK") and "in the last 1s" in out, out
    env = {**os.environ, **op.env, "PATH": f"{tmp_path / 'plugins'}:{BIN}:/usr/bin:/bin"}
    code, out, _ = await run(KUBECTL, "eni-ipam", "status", env=env)  # KUBECONFIG, as kubectl reads it
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
