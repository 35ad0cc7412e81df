"""End to end, the image: built with the real Docker from this checkout and run as the chart runs it.

``scripts/build_image.py`` builds it on the pinned base where a registry answers, otherwise on a
Debian bookworm base made with debootstrap (cached in the private dockerd's data root, so only the
first run pays for it). helm installs the chart into the fake API server; the containers then run
with what helm rendered, read back with kubectl: the controller with the ConfigMap's configuration
and the Deployment's arguments and security context (non-root, read-only root, no capabilities),
the agent as the DaemonSet runs it (root without capabilities, read-only root, its host directories),
and the init container's plugin copy into a host directory, after which the host's python3 runs the
copied plugin. SIGTERM must end the controller and the agent with exit 0, and the image must hold
no installer.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from scripts import build_image
from tests.deploy.conftest import CHART
from tests.e2e.dockerd import HOST_LEFTOVERS, host_paths_restored, start_dockerd, stop_dockerd
from tests.e2e.stack import free_ports
from tests.operator_shell import (
    HELM,
    KUBECTL,
    NAMESPACE,
    RELEASE,
    Operator,
    nodes_manifest,
    operator,
    sim_values,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

TAG = "eni-ipam:e2e"
DOCKER_HOME = Path("/var/lib/eni-ipam-e2e/docker")
"""The private dockerd's home: kept between runs so that the base image and build layers are reused."""


class Docker:
    """``docker -H <the private daemon>``, through the build script's runner (a failure raises)."""

    def __init__(self, host: str) -> None:
        self.host = host

    def __call__(
        self, *args: str, timeout: float = 120, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        return build_image.docker(self.host, *args, timeout=timeout, check=check)


@pytest.fixture(scope="module")
def docker() -> Iterator[Docker]:
    """A private dockerd (host network only: no bridge, no iptables), started for the module."""
    if os.geteuid() != 0:
        pytest.skip("dockerd needs root")
    dockerd = shutil.which("dockerd")
    if dockerd is None or shutil.which("docker") is None:
        pytest.skip("dockerd or docker is not installed (apt-get install docker.io; make node-runtimes)")
    if not (HELM.exists() and KUBECTL.exists()):
        pytest.skip(f"{HELM} or {KUBECTL} is missing (make kube-tools)")
    DOCKER_HOME.mkdir(parents=True, exist_ok=True)
    sock = DOCKER_HOME / "docker.sock"
    client = Docker(f"unix://{sock}")
    with contextlib.ExitStack() as cleanup:
        cleanup.enter_context(host_paths_restored(*HOST_LEFTOVERS))
        daemon = start_dockerd(dockerd, DOCKER_HOME, sock)
        cleanup.callback(stop_dockerd, daemon, DOCKER_HOME)
        deadline = time.perf_counter() + 60
        while client("version", check=False, timeout=10).returncode != 0:
            if daemon.poll() is not None or time.perf_counter() > deadline:
                pytest.skip(f"dockerd cannot run here (see {DOCKER_HOME / 'dockerd.log'})")
            time.sleep(0.25)
        yield client


@pytest.fixture(scope="module")
def image(docker: Docker) -> str:
    started = time.perf_counter()
    base = build_image.choose_base(docker.host)
    based = time.perf_counter()
    build_image.build(docker.host, TAG, base)
    size = int(docker("image", "inspect", "-f", "{{.Size}}", TAG).stdout)
    print(
        f"image {TAG} on {base}: {size / 1e6:.0f} MB; base {based - started:.0f} s, "
        f"build {time.perf_counter() - based:.0f} s"
    )
    return TAG


def test_the_image_holds_no_installer_and_runs_as_a_non_root_user(docker: Docker, image: str) -> None:
    for python in ("python3", "/opt/venv/bin/python3"):
        for module in ("pip", "setuptools", "wheel"):
            probe = docker(
                "run",
                "--rm",
                "--network",
                "none",
                "--entrypoint",
                python,
                image,
                "-c",
                f"import {module}",
                check=False,
            )
            assert probe.returncode != 0, f"{python} imports {module}"
    assert docker("image", "inspect", "-f", "{{.Config.User}}", image).stdout.strip() == "65532:65532"
    doubles = docker(
        "run",
        "--rm",
        "--network",
        "none",
        "--entrypoint",
        "/opt/venv/bin/python3",
        image,
        "-c",
        "import importlib.util as u; "
        "print([m for m in ('eni_ipam_testkit', 'moto', 'kubernetes_validate') if u.find_spec(m)])",
    ).stdout.strip()
    assert doubles == "[]", f"the image holds test doubles or their dependencies: {doubles}"
    version = docker("run", "--rm", "--network", "none", image, "--version").stdout
    assert version.startswith("eni-ipam ")


def test_a_virtual_environment_made_in_the_image_gets_no_pip(docker: Docker, image: str) -> None:
    """The base's ensurepip carries a pip wheel: ``python -m venv`` would install it, and an
    installer would be back in the container."""
    probe = (
        "import os, subprocess, sys; "
        "subprocess.run([sys.executable, '-m', 'venv', '/tmp/v'], capture_output=True); "
        "ensurepip = subprocess.run([sys.executable, '-m', 'ensurepip', '--version'], capture_output=True); "
        "print(sorted(os.listdir('/tmp/v/bin')) if os.path.isdir('/tmp/v/bin') else [], ensurepip.returncode)"
    )
    for python in ("python3", "/opt/venv/bin/python3"):
        answer = docker(
            "run", "--rm", "--network", "none", "--entrypoint", python, image, "-c", probe
        ).stdout.strip()
        made, _, returncode = answer.rpartition(" ")
        assert "pip" not in made, f"{python} -m venv made {made}"
        assert returncode != "0", f"{python} -m ensurepip works"


def _flags(security: dict[str, Any], pod_security: dict[str, Any]) -> list[str]:
    """docker run flags for a rendered container securityContext (and its pod's)."""
    merged = {**pod_security, **security}
    flags = []
    if merged.get("readOnlyRootFilesystem"):
        flags.append("--read-only")
    drop = (merged.get("capabilities") or {}).get("drop") or []
    flags += [f"--cap-drop={c}" for c in drop]
    if merged.get("allowPrivilegeEscalation") is False:
        flags += ["--security-opt", "no-new-privileges"]
    user = merged.get("runAsUser")
    if user is not None:
        flags += ["--user", f"{user}:{merged.get('runAsGroup', user)}"]
    return flags


def _until_ready(url: str, limit: float = 90.0) -> None:
    deadline = time.perf_counter() + limit
    last = ""
    while time.perf_counter() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError as exc:
            last = str(exc)
        time.sleep(0.5)
    raise AssertionError(f"{url} not ready within {limit:g}s: {last}")


def _volumes(
    pod: dict[str, Any], container: dict[str, Any], host: Path, config: Path | None = None
) -> list[str]:
    """docker run flags for a rendered container's volumes: an emptyDir is a tmpfs, a hostPath a
    directory of this test under ``host``, a ConfigMap the directory ``config`` (read-only)."""
    volumes = {v["name"]: v for v in pod.get("volumes") or []}
    flags: list[str] = []
    for mount in container.get("volumeMounts") or []:
        volume = volumes[mount["name"]]
        if "emptyDir" in volume:
            flags += ["--tmpfs", mount["mountPath"]]
        elif "hostPath" in volume:
            flags += ["-v", f"{_shared(host / mount['name'])}:{mount['mountPath']}"]
        elif "configMap" in volume:
            assert config is not None, mount
            flags += ["-v", f"{config}:{mount['mountPath']}:ro"]
        else:
            raise AssertionError(f"a volume the test does not know how to give: {volume}")
    return flags


FIELDS = {
    "spec.nodeName": "n1",
    "status.hostIP": "127.0.0.1",
    "metadata.namespace": NAMESPACE,
    "metadata.name": f"{RELEASE}-0",
}
"""What the kubelet would give the containers' ``fieldRef`` variables here (the node n1 is this host)."""


def _env(container: dict[str, Any], extra: dict[str, str]) -> dict[str, str]:
    """The container's rendered environment (values and ``fieldRef``s), then ``extra``."""
    env: dict[str, str] = {}
    for variable in container.get("env") or []:
        if "value" in variable:
            env[variable["name"]] = variable["value"]
        else:
            env[variable["name"]] = FIELDS[variable["valueFrom"]["fieldRef"]["fieldPath"]]
    return {**env, **extra}


def _run(container: dict[str, Any], env: dict[str, str], image: str) -> list[str]:
    """docker run's ``-e`` flags, ``--entrypoint``, image and arguments for a rendered container: as in
    Kubernetes, ``command`` replaces the image's entry point, ``args`` its command, and ``$(NAME)`` in
    either is the container's variable NAME."""

    def expand(arg: str) -> str:
        return re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), arg)

    command = [expand(a) for a in container.get("command") or []]
    flags = [x for k, v in env.items() for x in ("-e", f"{k}={v}")]
    entry = ["--entrypoint", command[0]] if command else []
    return [*flags, *entry, image, *command[1:], *(expand(a) for a in container.get("args") or [])]


def _stopped_by_sigterm(docker: Docker, name: str) -> int:
    docker("kill", "--signal", "TERM", name)
    return int(docker("wait", name, timeout=60).stdout.strip())


def _shared(path: Path) -> Path:
    """``path`` readable by the image's non-root user (pytest's directories are root's, 0700)."""
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o755)
    return path


async def test_the_image_runs_the_controller_the_agent_and_the_plugin_install_as_the_chart_does(
    docker: Docker, image: str, tmp_path: Path
) -> None:
    work = _shared(Path(f"/tmp/eni-ipam-image-e2e-{os.getpid()}"))
    names: list[str] = []
    try:
        async with operator(tmp_path) as op:
            repository, tag = image.split(":")
            values = sim_values(4) | {"image": {"repository": repository, "tag": tag}}
            await op.helm("install", RELEASE, str(CHART), "--create-namespace", values=values)
            agent_pod = (await _get(op, "daemonset", f"{RELEASE}-agent"))["spec"]["template"]["spec"]
            controller = await _run_controller(op, docker, image, work, names)
            await op.kubectl("apply", "-f", "-", stdin=nodes_manifest({"n1": "i-0001"}))
            await _run_agent(op, agent_pod, docker, image, work, names)
            code = await asyncio.to_thread(_stopped_by_sigterm, docker, controller)
            assert code == 0, docker("logs", controller).stderr[-2000:]
            await asyncio.to_thread(_install_plugin, agent_pod, docker, image, work)
    finally:
        for name in names:
            docker("rm", "-f", name, check=False)
        shutil.rmtree(work, ignore_errors=True)


async def _get(op: Operator, kind: str, name: str) -> dict[str, Any]:
    return json.loads(await op.kubectl("get", kind, name, "--namespace", NAMESPACE, "-o", "json"))


async def _run_controller(op: Operator, docker: Docker, image: str, work: Path, names: list[str]) -> str:
    """Start the controller's container, ready; its name (it keeps running for the agent)."""
    deployment = await _get(op, "deployment", RELEASE)
    pod = deployment["spec"]["template"]["spec"]
    (container,) = [c for c in pod["containers"] if c["name"] == "eni-ipam"] or pod["containers"][:1]
    config = (await _get(op, "configmap", RELEASE))["data"]["config.yaml"]
    etc = _shared(work / "controller-etc")
    (etc / "config.yaml").write_text(config)
    op.kube.write_kubeconfig(etc / "kubeconfig", service_account=(NAMESPACE, RELEASE))
    for path in etc.iterdir():
        path.chmod(0o644)
    mount = next(
        m["mountPath"] for m in container["volumeMounts"] if m["mountPath"].startswith("/etc/eni-ipam")
    )
    volumes = _volumes(pod, container, work / "controller-host", config=etc)
    port, probes = free_ports(2)
    name = f"eni-ipam-e2e-controller-{os.getpid()}"
    names.append(name)
    security = _flags(container.get("securityContext") or {}, pod.get("securityContext") or {})
    assert "--read-only" in security and "--cap-drop=ALL" in security and "--user" in security
    # In a pod the ServiceAccount's token and the API server's address come from the kubelet; here a
    # kubeconfig holding both. The metrics port is a free one of this host.
    env = _env(
        container,
        {
            "ENI_IPAM_KUBERNETES__KUBECONFIG": f"{mount}/kubeconfig",
            "ENI_IPAM_SERVER__PORT": str(port),
            "ENI_IPAM_SERVER__PROBE_PORT": str(probes),
        },
    )
    run = ["run", "-d", "--name", name, "--network", "host", *security, *volumes]
    await asyncio.to_thread(docker, *run, *_run(container, env, image))
    try:
        # Where kubelet's readiness probe asks: the probe listener.
        await asyncio.to_thread(_until_ready, f"http://127.0.0.1:{probes}/readyz")
    except AssertionError:
        raise AssertionError(docker("logs", name, check=False).stderr[-3000:]) from None
    return name


async def _run_agent(
    op: Operator, pod: dict[str, Any], docker: Docker, image: str, work: Path, names: list[str]
) -> None:
    async def filled() -> bool:
        pools = await op.pools()
        return bool(((pools.get("n1") or {}).get("status") or {}).get("pool"))

    await op.wait("n1's pool filled by the controller in the image", filled, limit=120)
    (container,) = [c for c in pod["containers"] if c["name"] == "agent"]
    config = yaml.safe_load((await _get(op, "configmap", f"{RELEASE}-agent"))["data"]["config.yaml"])
    etc_mount = next(m["mountPath"] for m in container["volumeMounts"] if m["mountPath"].startswith("/etc/"))
    etc = _shared(work / "agent-etc")
    port, probes = free_ports(2)
    config["server"] = {**(config.get("server") or {}), "port": port, "probe_port": probes}
    config["kubernetes"] = {**(config.get("kubernetes") or {}), "kubeconfig": f"{etc_mount}/kubeconfig"}
    (etc / "config.yaml").write_text(yaml.safe_dump(config))
    await op.write_agent_kubeconfig(etc / "kubeconfig", "n1")
    mounts = _volumes(pod, container, work / "agent-host", config=etc)
    security = _flags(container.get("securityContext") or {}, pod.get("securityContext") or {})
    assert "--read-only" in security and "--cap-drop=ALL" in security
    assert (container.get("securityContext") or {}).get("runAsUser") == 0
    name = f"eni-ipam-e2e-agent-{os.getpid()}"
    names.append(name)
    run = ["run", "-d", "--name", name, "--network", "host", *security, *mounts]
    await asyncio.to_thread(docker, *run, *_run(container, _env(container, {}), image))
    try:
        await asyncio.to_thread(_until_ready, f"http://127.0.0.1:{probes}/readyz")  # kubelet's probe
    except AssertionError:
        raise AssertionError(docker("logs", name, check=False).stderr[-3000:]) from None
    assert await asyncio.to_thread(_stopped_by_sigterm, docker, name) == 0, docker("logs", name).stderr[
        -2000:
    ]


def _install_plugin(pod: dict[str, Any], docker: Docker, image: str, work: Path) -> None:
    (init,) = [c for c in pod["initContainers"] if c["name"] == "install-cni"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = _volumes(pod, init, work / "init-host")
    (cni_mount,) = [m for m in init["volumeMounts"] if "hostPath" in volumes[m["name"]]]
    cni_bin = work / "init-host" / cni_mount["name"]
    security = _flags(init.get("securityContext") or {}, pod.get("securityContext") or {})
    run = ["run", "--rm", "--network", "none", *security, *mounts]
    docker(*run, *_run(init, _env(init, {}), image))
    plugin = cni_bin / "eni-ipam-cni"
    assert plugin.is_file() and os.access(plugin, os.X_OK)
    assert [p.name for p in cni_bin.iterdir()] == ["eni-ipam-cni"]  # no temporary file left
    python = shutil.which("python3")
    assert python is not None
    done = subprocess.run(
        [python, "-I", "-S", str(plugin)],
        env={"CNI_COMMAND": "VERSION", "PATH": "/usr/bin:/bin"},
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    versions = json.loads(done.stdout)
    assert "1.1.0" in versions["supportedVersions"] and "0.4.0" in versions["supportedVersions"]
