"""End to end with containerd, the runtime of nearly every Kubernetes node: a private containerd runs
``eni-ipam-cni`` as the IPAM of its pod network, driven over its CRI socket the way the kubelet drives
it (:mod:`tests.e2e.cri`), against a standalone ``eni-ipam agent`` set up exactly as docs/node.md
says in "A containerd host (Kubernetes nodes)".

The set-up is read from that section at test time: the agent's ``/etc/eni-ipam-agent/config.yaml``,
containerd's ``/etc/containerd/config.toml`` (its CRI plugin's settings) and
``/etc/cni/net.d/10-eni.conflist``; the agent is started with the systemd unit's ``ExecStart`` and
``ExecStartPost``, and the plugin built by ``scripts/build_cni_plugin.py``, as in
``tests/e2e/test_node_runtimes.py``, whose agent and helpers this module shares.

What the test changes, and only that: every path goes into a temporary directory (containerd's root,
state and socket, its ``cni.bin_dir`` holding the plugin beside links to Debian's reference plugins,
its ``cni.conf_dir``, the agent's socket and state), the sandbox image (no registry is reachable: a
static busybox running ``sleep``, imported with ``ctr -n k8s.io images import``), the pool's range (12
addresses), the sweep's timings (every 2 s, 3 s grace) and the metrics port. Settings that let
containerd run in a sandbox are added to its configuration (:func:`sandbox_settings`). What
containerd puts on the host whatever its roots stays where it puts it, as on a real node: the pods'
network namespaces in ``/var/run/netns``, libcni's results in ``/var/lib/cni/results`` (which the
agent reads), the shims' sockets in ``/run/containerd``; the test removes what it made there.

The scenarios: sandboxes started at once get distinct pool addresses, the ones ``PodSandboxStatus``
reports and their network namespaces hold, the pod's UID recorded with them; sandboxes stopped or
removed while the agent is down keep their addresses until the call, retried as the kubelet retries
it, succeeds, then free them; an agent killed mid-burst hands out no address twice and leaks none
after a sweep; a corrupt state file is rebuilt from containerd's libcni cache, so no held address is
handed out again. A requested address has no CRI
counterpart (skipped, saying so).

Needs root, network namespaces, and Debian's containerd, busybox-static and
containernetworking-plugins (``make node-runtimes``, which ``make e2e`` runs). Each setup step that
cannot run here skips the tests, saying why; a failure of the agent or the plugin fails them.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import hashlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import tarfile
import threading
import time
import tomllib
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml

from tests.e2e.cri import RuntimeService
from tests.e2e.dockerd import host_paths_restored, terminate, unmount_under
from tests.e2e.test_node_runtimes import (
    AGENT_CONFIG,
    CNI_CACHE,
    CNI_DIR,
    DOC_SOCKET,
    SWEEP_GRACE,
    SWEEP_INTERVAL,
    SWEPT_WITHIN,
    Node,
    Runtime,
    check_held,
    doc_file,
    parallel,
    parallel_map,
    relocated_node,
    require_netns_host,
    run,
    running_node,
    tail,
    until,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

SECTION = "A containerd host (Kubernetes nodes)"
CONTAINERD_CONFIG = "/etc/containerd/config.toml"
CONFLIST = "/etc/cni/net.d/10-eni.conflist"
CRI = 'plugins."io.containerd.grpc.v1.cri"'
NAMESPACE = "k8s.io"
"""containerd's namespace for the CRI plugin's images and containers."""
PAUSE_IMAGE = "docker.io/library/eni-e2e-pause:latest"
RANGE = "10.99.0.10-10.99.0.21"
"""12 addresses: 10 sandboxes at once fit, and what leaked would soon exhaust it."""
PARALLEL = 10
HELD = 4
NETNS_DIR = Path("/var/run/netns")


# --- containerd's configuration -------------------------------------------------------------------


def toml_document(tables: Mapping[str, Any]) -> str:
    """A TOML document of nested tables (strings, booleans, numbers, lists of strings)."""
    lines: list[str] = []

    def key(name: str) -> str:
        return name if re.fullmatch(r"[A-Za-z0-9_-]+", name) else json.dumps(name)

    def emit(table: Mapping[str, Any], path: tuple[str, ...]) -> None:
        scalars = {k: v for k, v in table.items() if not isinstance(v, dict)}
        if path and scalars:
            lines.append(f"[{'.'.join(key(p) for p in path)}]")
        lines.extend(f"{key(k)} = {json.dumps(v)}" for k, v in scalars.items())
        if scalars:
            lines.append("")
        for name, value in table.items():
            if isinstance(value, dict):
                emit(value, (*path, name))

    emit(tables, ())
    return "\n".join(lines)


def merge(base: dict[str, Any], extra: Mapping[str, Any], where: str = "") -> None:
    """``extra``'s settings into ``base``; a setting of the page's that ``extra`` would change fails."""
    for name, value in extra.items():
        if isinstance(value, dict):
            merge(base.setdefault(name, {}), value, f"{where}.{name}")
        else:
            assert name not in base, f"the test would override the page's {where}.{name} = {base[name]!r}"
            base[name] = value


def sandbox_settings(home: Path, snapshotter: str) -> dict[str, Any]:
    """What the test adds to the page's config.toml: its own directories and socket, and settings
    that let containerd run here (in a sandbox, without CAP_SYS_RESOURCE) apart from the host's."""
    return {
        "root": str(home / "root"),
        "state": str(home / "state"),
        "grpc": {"address": str(home / "containerd.sock")},
        "plugins": {
            # The plugin's default is /opt/containerd, on the host.
            "io.containerd.internal.v1.opt": {"path": str(home / "opt")},
            "io.containerd.grpc.v1.cri": {
                # A pod's OOM score is lowered below containerd's own only with CAP_SYS_RESOURCE.
                "restrict_oom_score_adj": True,
                "containerd": {"snapshotter": snapshotter},
            },
        },
    }


def overlay_works(directory: Path) -> bool:
    """Whether an overlay filesystem can be mounted here (containerd's overlayfs snapshotter)."""
    dirs = {name: directory / name for name in ("lower", "upper", "work", "merged")}
    for path in dirs.values():
        path.mkdir(parents=True)
    options = f"lowerdir={dirs['lower']},upperdir={dirs['upper']},workdir={dirs['work']}"
    mounted = run(["mount", "-t", "overlay", "overlay", "-o", options, dirs["merged"]], check=False)
    if mounted.returncode == 0:
        run(["umount", dirs["merged"]], check=False)
    shutil.rmtree(directory, ignore_errors=True)
    return mounted.returncode == 0


def pause_image(rootfs_tar: Path, output: Path) -> Path:
    """A Docker image archive (``docker save``'s format) of ``rootfs_tar`` as its one layer, running
    ``sleep``: the sandbox image, as registry.k8s.io/pause is on a node."""
    layer = rootfs_tar.read_bytes()
    diff_id = hashlib.sha256(layer).hexdigest()
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Env": ["PATH=/bin"], "Entrypoint": ["/bin/sleep"], "Cmd": ["2147483647"]},
            "rootfs": {"type": "layers", "diff_ids": [f"sha256:{diff_id}"]},
        }
    ).encode()
    config_name = f"{hashlib.sha256(config).hexdigest()}.json"
    manifest = [
        {"Config": config_name, "RepoTags": [PAUSE_IMAGE.removeprefix("docker.io/library/")],
         "Layers": [f"{diff_id}/layer.tar"]}
    ]  # fmt: skip
    with tarfile.open(output, "w") as archive:
        for name, data in (
            (config_name, config),
            (f"{diff_id}/layer.tar", layer),
            ("manifest.json", json.dumps(manifest).encode()),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return output


# --- containerd -------------------------------------------------------------------------------------


class Containerd(Runtime):
    """A private containerd, driven over CRI as the kubelet drives it; the pods are sandboxes."""

    name = "containerd"

    def __init__(self, home: Path, cri: RuntimeService, network: str) -> None:
        self.home, self.cri, self.network = home, cri, network
        self.cli, self.run_args = [], []
        self.seen = set()
        self.uids: dict[str, str] = {}
        """Sandbox → the pod UID it was asked for."""
        self._lock = threading.Lock()

    def try_run(self, *, attempt: int = 0, name: str | None = None) -> str:
        """RunPodSandbox for a new pod (a fresh UID), as the kubelet asks; its sandbox id."""
        pod, uid = name or f"pod-{uuid.uuid4().hex[:8]}", str(uuid.uuid4())
        sandbox_id = self.cri.run_pod_sandbox(
            name=pod, uid=uid, namespace="e2e", attempt=attempt, timeout=120
        )
        with self._lock:
            self.seen.add(sandbox_id)
            self.uids[sandbox_id] = uid
        return sandbox_id

    def start(self, ip: str | None = None) -> str:
        assert ip is None, "the CRI has no per-pod address"
        try:
            return self.try_run()
        except grpc.RpcError as exc:
            raise AssertionError(f"RunPodSandbox failed: {exc.details()}") from None

    def inside(self, cid: str) -> tuple[str, str]:
        """The address on eth0 in the sandbox's network namespace, and its default route."""
        netns = self.cri.pod_sandbox_status(cid).netns
        assert netns, f"containerd reports no network namespace for {cid[:12]}"
        enter = ["nsenter", f"--net={netns}", "ip", "-4"]
        shown = run([*enter, "-o", "addr", "show", "dev", "eth0"], timeout=30).stdout
        match = re.search(r"\binet (\d+\.\d+\.\d+\.\d+)/(\d+)", shown)
        assert match, f"no IPv4 address on eth0 in {netns}: {shown!r}"
        route = run([*enter, "route", "show", "default"], timeout=30).stdout.strip()
        return match[1], route

    def remove(self, cid: str, *, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        """StopPodSandbox then RemovePodSandbox, as the kubelet removes a pod; the outcome as a process's."""
        try:
            self.cri.stop_pod_sandbox(cid, timeout=timeout)
            self.cri.remove_pod_sandbox(cid, timeout=timeout)
        except grpc.RpcError as exc:
            return subprocess.CompletedProcess([cid], 1, "", str(exc.details()))
        return subprocess.CompletedProcess([cid], 0, "", "")

    def containers(self, *, all_states: bool = False) -> set[str]:
        return {sid for sid, ready in self.cri.list_pod_sandbox().items() if ready or all_states}

    def view(self) -> set[str]:
        """Every sandbox containerd still has: one whose stop failed keeps its namespace and address."""
        return self.containers(all_states=True)

    def holds(self, view: Any, address: str, owner: str) -> bool:
        return any(owner == f"cni:{sid}:eth0" for sid in view)

    def owner(self, cid: str) -> str | None:
        return f"cni:{cid}:eth0"


def check_sandboxes(node: Node, rt: Containerd, ids: list[str]) -> dict[str, str]:
    """As :func:`check_held` (the address in the namespace is the pool's, the agent lists it for the
    sandbox), and PodSandboxStatus reports that same address; sandbox → address."""
    held = check_held(node, rt, ids)
    for sandbox_id, address in held.items():
        reported = rt.cri.pod_sandbox_status(sandbox_id)
        assert reported.ip == address, (
            f"{sandbox_id[:12]}: PodSandboxStatus says {reported.ip}, eth0 {address}"
        )
        assert reported.additional_ips == (), f"{sandbox_id[:12]}: {reported.additional_ips} on an IPv4 pool"
    return held


def make_node(root: Path) -> Node:
    """The agent of the page's containerd section (relocated into ``root``), the plugin; not started."""
    documented = yaml.safe_load(doc_file(SECTION, AGENT_CONFIG))
    assert documented["socket"] == DOC_SOCKET, "the page's socket is the unit's"
    assert documented["node_source"] == "memory", documented
    assert documented.get("cni_cache_dir", str(CNI_CACHE)) == str(CNI_CACHE), "libcni's cache is containerd's"
    return relocated_node(root, documented, driver="", docker_api=root / "no-docker.sock", pool_range=RANGE)


@pytest.fixture(scope="module")
def node() -> Iterator[Node]:
    """The agent of the page's containerd section, running; skips where this host cannot host pods."""
    require_netns_host("containerd's pod sandboxes and network namespaces need root")
    with running_node("eni-cd-", make_node) as this:
        yield this


def start_containerd(binary: str, config: Path, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [binary, "--config", str(config)],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )


def processes_of(address: str) -> list[int]:
    """The shims this containerd started (``-address <its socket>`` on their command line)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            if b"-address" in argv and address.encode() in argv and b"containerd-shim" in argv[0]:
                found.append(int(entry.name))
    return found


def stop_containerd(daemon: subprocess.Popen[bytes], home: Path, address: str) -> None:
    """SIGTERM, SIGKILL after 30 s; then the shims it left (their sandboxes are removed before), and
    whatever it left mounted."""
    terminate(daemon)
    for pid in processes_of(address):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    unmount_under(home)


@pytest.fixture(scope="module")
def containerd(node: Node) -> Iterator[Containerd]:
    """A private containerd with the page's CRI settings and network; skips where it cannot run pods."""
    binary, ctr = shutil.which("containerd"), shutil.which("ctr")
    if binary is None or ctr is None:
        pytest.skip("containerd is not installed (apt-get install containerd; make node-runtimes)")
    for plugin in ("bridge", "loopback"):
        if not (CNI_DIR / plugin).is_file():
            pytest.skip(f"{CNI_DIR / plugin} is missing (apt-get install containernetworking-plugins)")
    conflist = json.loads(doc_file(SECTION, CONFLIST))
    bridge = conflist["plugins"][0]
    assert bridge["ipam"]["type"] == "eni-ipam-cni" and bridge["ipam"]["socket"] == DOC_SOCKET
    assert conflist["cniVersion"] == "1.0.0", "Debian's bridge speaks at most 1.0.0"
    if Path("/sys/class/net", bridge["bridge"]).exists():
        pytest.skip(f"this host already has an interface {bridge['bridge']}; not touching it")

    home = node.root / "containerd"
    tables = tomllib.loads(doc_file(SECTION, CONTAINERD_CONFIG))
    cri = tables["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["cni"]["bin_dir"] == "/opt/cni/bin" and cri["cni"]["conf_dir"] == "/etc/cni/net.d", cri
    assert cri["cni"]["max_conf_num"] == 1, cri
    # Relocated: the plugin directory (the plugin beside Debian's reference plugins: containerd 1.6
    # takes one directory), the network directory, and the sandbox image (imported, not pulled).
    bin_dir, conf_dir = home / "cni-bin", home / "net.d"
    bin_dir.mkdir(parents=True)
    conf_dir.mkdir()
    for plugin in CNI_DIR.iterdir():
        (bin_dir / plugin.name).symlink_to(plugin)
    (bin_dir / "eni-ipam-cni").symlink_to(node.plugin_dir / "eni-ipam-cni")
    cri["cni"].update(bin_dir=str(bin_dir), conf_dir=str(conf_dir))
    cri["sandbox_image"] = PAUSE_IMAGE
    bridge["ipam"]["socket"] = str(node.socket)
    (conf_dir / Path(CONFLIST).name).write_text(json.dumps(conflist, indent=2))
    snapshotter = "overlayfs" if overlay_works(home / "overlay-probe") else "native"
    merge(tables, sandbox_settings(home, snapshotter))
    config = home / "config.toml"
    config.write_text(toml_document(tables))
    address = str(home / "containerd.sock")
    log = home / "containerd.log"

    with contextlib.ExitStack() as cleanup:
        cleanup.enter_context(
            host_paths_restored(
                Path("/run/containerd/s"),
                Path("/run/containerd/runc/k8s.io"),
                Path("/run/containerd/runc"),
                Path("/run/containerd"),
            )
        )
        cleanup.callback(run, ["ip", "link", "del", bridge["bridge"]], check=False, timeout=10)
        daemon = start_containerd(binary, config, log)
        cleanup.callback(stop_containerd, daemon, home, address)
        service = RuntimeService(address)
        cleanup.callback(service.close)
        deadline = time.perf_counter() + 60
        while True:
            try:
                version = service.version(timeout=2)
                break
            except grpc.RpcError as exc:
                if daemon.poll() is not None:
                    pytest.skip(f"containerd cannot run here (exited {daemon.returncode}):\n{tail(log, 8)}")
                if time.perf_counter() > deadline:
                    pytest.skip(
                        f"containerd's CRI did not answer within 60 s ({exc.details()}):\n{tail(log, 8)}"
                    )
                time.sleep(0.25)
        print(
            f"containerd {version['runtime_version']} (CRI {version['runtime_api_version']}), {snapshotter}"
        )

        image = pause_image(node.image_tar, home / "pause.tar")
        ctr_cli = [ctr, "--address", address, "--namespace", NAMESPACE]
        imported = run([*ctr_cli, "images", "import", "--snapshotter", snapshotter, image], check=False)
        if imported.returncode != 0:
            pytest.skip(f"ctr images import failed: {imported.stderr.strip()[-800:]}")

        runtime = Containerd(home, service, conflist["name"])
        cleanup.callback(forget_cni_cache, runtime)
        cleanup.callback(runtime.remove_all)
        cleanup.callback(agent_back, node)  # the sandboxes' DELs go through it
        probe_sandbox(runtime, log)
        node.runtimes["containerd"] = runtime
        cleanup.callback(node.runtimes.pop, "containerd", None)
        yield runtime


def probe_sandbox(runtime: Containerd, log: Path) -> None:
    """One sandbox started and removed: skips if containerd cannot run one here for a reason of the
    host's (its OCI runtime, namespaces); a failure of the pod network fails."""
    try:
        sandbox_id = runtime.try_run()
    except grpc.RpcError as exc:
        details = str(exc.details())
        if "network" in details or "cni" in details.lower():
            raise AssertionError(f"the pod network failed: {details}\n{tail(log, 8)}") from None
        pytest.skip(f"containerd cannot run a pod sandbox here: {details}")
    removed = runtime.remove(sandbox_id)
    assert removed.returncode == 0, removed.stderr


def agent_back(node: Node) -> None:
    """The agent running again (after a test that stopped it failed), so sandboxes stop cleanly."""
    try:
        node.ensure_running()
    except AssertionError as exc:
        print(f"the agent does not start again: {exc}")


def forget_cni_cache(runtime: Containerd) -> None:
    """libcni's entries (in the host's directory) that DELs failing on purpose may have left behind."""
    for sandbox_id in runtime.seen:
        for entry in CNI_CACHE.glob(f"{runtime.network}-{sandbox_id}-*"):
            entry.unlink(missing_ok=True)


@pytest.fixture
def fresh(node: Node, containerd: Containerd) -> Iterator[Containerd]:
    """containerd with an empty pool at the start and no sandbox left at the end."""
    node.ensure_running()
    node.wait_clean()
    try:
        yield containerd
    finally:
        agent_back(node)
        containerd.remove_all()


def recorded(node: Node) -> dict[str, dict[str, Any]]:
    """Owner → what the agent recorded with the allocation (network, namespace, pod), from its state
    file: the newest of its documents (eni_ipam/agent/state.py)."""
    text = (Path(node.config["state_dir"]) / "allocations.json").read_text()
    decoder, documents, at = json.JSONDecoder(), [], 0
    while (at := text.find("{", at)) != -1:
        try:
            document, end = decoder.raw_decode(text, at)
        except ValueError:
            at += 1
            continue
        documents.append(document)
        at = end
    newest = max(documents, key=lambda d: d.get("generation", 0))
    return {entry["owner"]: entry for entry in newest["allocations"]}


# --- the scenarios ----------------------------------------------------------------------------------


def test_sandboxes_started_in_parallel_get_distinct_pool_addresses(node: Node, fresh: Containerd) -> None:
    started = time.perf_counter()
    ids = parallel(fresh.start, PARALLEL)
    took = time.perf_counter() - started
    held = check_sandboxes(node, fresh, ids)
    assert len(set(held.values())) == PARALLEL, f"addresses handed out twice: {held}"
    ours = {a for a, owner in node.allocations().items() if owner.startswith("cni:")}
    assert ours == set(held.values()), f"the agent lists {sorted(ours)}, the sandboxes hold {held}"
    attachments = recorded(node)
    for sandbox_id in ids:  # containerd passes the pod's UID and namespace, which the sweep judges by
        entry = attachments[f"cni:{sandbox_id}:eth0"]
        assert entry.get("pod_uid") == fresh.uids[sandbox_id], entry
        assert entry.get("netns") == fresh.cri.pod_sandbox_status(sandbox_id).netns, entry
        assert entry.get("network") == fresh.network, entry
    print(f"recorded by the agent for {ids[0][:12]}: {json.dumps(attachments[f'cni:{ids[0]}:eth0'])}")
    print(f"containerd: {PARALLEL} sandboxes started at once in {took:.1f}s: {sorted(held.values())}")

    removed = parallel_map(fresh.remove, ids)
    assert all(r.returncode == 0 for r in removed), [r.stderr for r in removed]
    assert not node.allocations(), f"StopPodSandbox left {node.allocations()}"


def test_a_requested_address_has_no_cri_counterpart() -> None:
    """podman's ``--ip`` and Docker's ``--ip`` ask the plugin for an address; the kubelet cannot: the
    CRI's PodSandboxConfig has no address, and containerd 1.6 passes neither ``IP=`` in ``CNI_ARGS``
    nor the ``ips`` capability. Nothing to honour, so nothing to test (docs/node.md says so)."""
    pytest.skip("the CRI has no per-pod address request: containerd passes none to the plugin")


def test_sandboxes_stopped_while_the_agent_was_down_free_their_addresses_once_it_is_back(
    node: Node, fresh: Containerd
) -> None:
    """StopPodSandbox, and RemovePodSandbox which stops first, fail while the agent is down (their DEL
    does), and the sandbox keeps its namespace: the sweep leaves its address alone, and the kubelet's
    next call releases it."""
    keep = fresh.start()
    stopping = parallel(fresh.start, HELD)
    held = check_sandboxes(node, fresh, [keep, *stopping])
    calls = {
        sid: (fresh.cri.stop_pod_sandbox if n % 2 else fresh.cri.remove_pod_sandbox)
        for n, sid in enumerate(stopping)
    }

    def call(sandbox_id: str) -> str:
        """What the call said: empty when it succeeded."""
        try:
            calls[sandbox_id](sandbox_id, timeout=60)
        except grpc.RpcError as exc:
            return str(exc.details())
        return ""

    node.kill()
    started = time.perf_counter()
    failed = parallel_map(call, stopping)
    took = time.perf_counter() - started
    assert all(failed), f"a sandbox stopped while its DEL could not succeed: {failed}"
    print(
        f"containerd: StopPodSandbox, RemovePodSandbox of {HELD} sandboxes failed in {took:.1f}s: "
        f"{failed[0][-300:]}"
    )
    netns = {sid: fresh.cri.pod_sandbox_status(sid).netns for sid in stopping}
    assert all(Path(path).exists() for path in netns.values()), (
        f"a namespace went with a failed stop: {netns}"
    )

    mark = node.log_size()
    node.start()  # systemd's Restart=always
    restored = node.allocations()
    assert all(restored.get(held[sid]) == f"cni:{sid}:eth0" for sid in stopping), restored
    # The kubelet retries with a back-off; meanwhile the sweeps see the namespaces alive.
    time.sleep(2 * SWEEP_INTERVAL + SWEEP_GRACE)
    assert not node.swept(mark), (
        f"the sweep released an address whose sandbox is not stopped: {node.swept(mark)}"
    )
    assert node.allocations() == restored

    retried = parallel_map(call, stopping)
    assert not any(retried), retried
    assert node.allocations() == {held[keep]: f"cni:{keep}:eth0"}, "the retried calls released nothing"
    assert not any(Path(path).exists() for path in netns.values())
    assert check_sandboxes(node, fresh, [keep]) == {keep: held[keep]}, "the live sandbox lost its address"

    free = len(node.pool()) - 1
    again = parallel(fresh.start, free)
    assert len(set(check_sandboxes(node, fresh, again).values())) == free
    print(f"containerd: {HELD} addresses released by the retried calls; pool refilled")


def test_an_agent_killed_mid_burst_hands_out_no_address_twice_and_leaks_none(
    node: Node, fresh: Containerd
) -> None:
    """SIGKILL while sandboxes are being started, systemd's restart a second later, each pod's sandbox
    retried as the kubelet does until it runs: every address is held once, and after one sweep the
    agent holds none that no sandbox of containerd's holds."""
    done: list[str] = []
    failures: list[str] = []

    def pod() -> str:
        deadline = time.perf_counter() + 90
        attempt, name = 0, f"pod-{uuid.uuid4().hex[:8]}"
        while True:
            try:
                sandbox_id = fresh.try_run(attempt=attempt, name=name)
                done.append(sandbox_id)
                return sandbox_id
            except grpc.RpcError as exc:
                failures.append(str(exc.details()))
                assert time.perf_counter() < deadline, f"RunPodSandbox still failing: {exc.details()}"
                attempt += 1
                time.sleep(0.5)

    with concurrent.futures.ThreadPoolExecutor(max_workers=PARALLEL) as pool:
        futures = [pool.submit(pod) for _ in range(PARALLEL)]
        until("a first address of the burst", lambda: node.allocations(), 30, poll=0.01)
        node.kill()
        in_flight = PARALLEL - len(done)
        mark = node.log_size()
        time.sleep(1.0)  # RestartSec=1
        node.start()
        ids = [f.result() for f in futures]
    print(f"containerd: agent killed with {in_flight} of {PARALLEL} sandboxes not yet started; "
          f"{len(failures)} RunPodSandbox failed: {sorted(set(f[-160:] for f in failures))}")  # fmt: skip
    assert in_flight > 0, "the burst was over before the kill"

    held = check_sandboxes(node, fresh, ids)
    assert len(set(held.values())) == PARALLEL, f"an address handed out twice: {held}"
    until(
        "every allocation held by a live sandbox; leaks:",
        lambda: not node.leaks(),
        SWEPT_WITHIN,
        seen=node.leaks,
    )
    print(f"containerd: swept after the restart: {sorted(node.swept(mark))}")
    assert check_sandboxes(node, fresh, ids) == held, "a sweep took a live sandbox's address"


def test_a_corrupt_state_file_hands_out_no_held_address_again(node: Node, fresh: Containerd) -> None:
    """The state file is garbage at the restart: the agent rebuilds the allocations from libcni's cache,
    where containerd's ADDs left their results, so the sandboxes' addresses stay theirs."""
    ids = parallel(fresh.start, HELD)
    held = check_sandboxes(node, fresh, ids)
    for sandbox_id in ids:
        assert (CNI_CACHE / f"{fresh.network}-{sandbox_id}-eth0").is_file(), (
            "containerd's libcni cached no result"
        )

    node.kill()
    state = Path(node.config["state_dir"]) / "allocations.json"
    state.write_bytes(b"{not json" + os.urandom(64))
    mark = node.log_size()
    node.start()
    events = [e.get("event") for e in node.events(mark)]
    assert "state_corrupt" in events, events
    rebuilt = node.allocations()
    print(f"containerd: after the corrupt state file the agent lists {rebuilt}")
    assert rebuilt == {held[sid]: f"cni:{sid}:eth0" for sid in ids}, (
        "not rebuilt from containerd's libcni cache"
    )

    more = parallel(fresh.start, len(node.pool()) - HELD)
    everyone = check_sandboxes(node, fresh, [*ids, *more])
    assert {sid: everyone[sid] for sid in ids} == held, "a sandbox's address changed"
    assert len(set(everyone.values())) == len(everyone), f"an address handed out twice: {everyone}"
