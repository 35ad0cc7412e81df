"""Benchmark 5b — a pod's whole CNI ADD and DEL with the node datapath, against the standard chain.

The node datapath adds, to every ADD, the agent's netlink calls for the pod's rules (decision 0036).
Measured side by side in one run, interleaved so that noise hits every figure alike, in a network
namespace of its own standing for the node (its secondary interface a veth with the pool's MAC):

* the floor of any Python plugin: ``python3 -I -S -c pass``;
* the standard chain: ``ptp`` with Go's ``host-local``;
* the datapath's chain: ``ptp`` with ``eni-ipam-cni``, against a real agent with ``datapath.enabled``
  following its ENIPool on the fake API server (both in the node's namespace), the pod's address on
  the secondary interface, so each ADD installs a ``to`` and a ``from`` rule and each DEL removes them.

Target: the datapath chain's median ADD at most the standard chain's plus one bare interpreter start
plus 3 ms (no second interpreter, little more than the netlink calls). Needs root, ``ip`` and
/usr/lib/cni/{ptp,host-local}; otherwise the section says why and no target is checked.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import dataclasses
import json
import os
import subprocess
import tempfile
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench import cni_plugin
from bench.cni_plugin import BARE, CNI_DIR, ROOT, PluginBench, Timing, _interpreter, _timed, running_agent

EXTRA_MS = 3.0
"""What the datapath may cost beyond one interpreter start, per ADD (median)."""
STANDARD_ADD = "ptp + host-local ADD"
DATAPATH_ADD = "ptp + eni-ipam-cni (datapath) ADD"
CLONE_NEWNET = 0x40000000
SECONDARY_MAC = "02:e1:00:00:00:11"
PRIMARY_MAC = "02:e1:00:00:00:10"


@dataclasses.dataclass(frozen=True)
class DatapathBench(PluginBench):
    """The chain's figures (a :class:`PluginBench`'s), judged against the standard chain."""

    def budget_ms(self) -> float:
        """The target: the standard chain's median ADD + a bare interpreter start + 3 ms."""
        return self.timings[STANDARD_ADD].median_ms + self.timings[BARE].median_ms + EXTRA_MS

    def met(self) -> bool:
        return self.timings[DATAPATH_ADD].median_ms <= self.budget_ms()


def missing() -> str:
    """Why this machine cannot run the benchmark ("" when it can)."""
    return cni_plugin.missing(("ptp", "host-local"))


def _run(*command: str) -> None:
    subprocess.run(command, check=True, capture_output=True, timeout=30)


@contextlib.contextmanager
def _inside(netns: str) -> Iterator[None]:
    """This thread (and the processes and threads it starts) in the named network namespace."""
    libc = ctypes.CDLL(None, use_errno=True)
    original = os.open("/proc/self/ns/net", os.O_RDONLY)
    target = os.open(f"/var/run/netns/{netns}", os.O_RDONLY)
    try:
        if libc.setns(target, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), "setns into the bench's node namespace")
        try:
            yield
        finally:
            libc.setns(original, CLONE_NEWNET)
    finally:
        os.close(target)
        os.close(original)


@contextlib.contextmanager
def _api_server(kubeconfig: Path) -> Iterator[None]:
    """The fake API server (a thread's event loop) with the node's ENIPool: one pool address on a
    secondary interface per round, published with the interfaces' MAC addresses."""
    import yaml

    from eni_ipam_testkit.fake_kube import FakeKube

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="bench-api-server", daemon=True)
    thread.start()

    def call(coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, loop).result(60)

    server = FakeKube()
    call(server.start())
    try:
        crd = ROOT / "deploy" / "helm" / "eni-ipam" / "crds" / "enipools.eni-ipam.io.yaml"
        call(server.apply_manifest(yaml.safe_load(crd.read_text())))
        pool = {f"10.77.1.{host}": {"interface": "eni-1", "subnet": "s-1"} for host in range(16, 250)}
        interfaces = [
            {
                "id": "eni-0",
                "deviceIndex": 0,
                "subnet": "s-0",
                "primaryIP": "10.77.0.10",
                "macAddress": PRIMARY_MAC,
            },
            {
                "id": "eni-1",
                "deviceIndex": 1,
                "subnet": "s-1",
                "primaryIP": "10.77.1.10",
                "macAddress": SECONDARY_MAC,
            },
        ]
        status = {
            "pool": pool,
            "subnets": {"s-0": {"cidr": "10.77.0.0/24"}, "s-1": {"cidr": "10.77.1.0/24"}},
            "interfaces": interfaces,
        }
        server.add_object("enipools", {"metadata": {"name": "bench"}, "spec": {"instanceID": "i-bench"}})
        call(_publish(server, status))  # as the controller writes it: through the status subresource
        server.write_kubeconfig(str(kubeconfig))
        yield
    finally:
        call(server.close())
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


async def _publish(server: Any, status: dict[str, Any]) -> None:
    import lightkube

    from eni_ipam.adapters.metrics import MetricSet
    from eni_ipam.kube.api import ENIPOOLS, KubeApi

    client = lightkube.AsyncClient(lightkube.KubeConfig.from_dict(server.kubeconfig()))
    api = KubeApi(client, metrics=MetricSet(process=False))
    try:
        await api.patch(ENIPOOLS, "bench", {"status": status}, status=True)
    finally:
        await api.close()


def _agent(directory: Path, kubeconfig: Path) -> contextlib.AbstractContextManager[str]:
    """A real agent with the datapath on, in the node's namespace, ready to serve ADDs."""
    config = {
        "state_dir": str(directory / "state"),
        "cni_cache_dir": str(directory / "cache"),
        "server": {"host": "127.0.0.1", "port": 0, "probe_port": 0},
        "kubernetes": {"kubeconfig": str(kubeconfig)},
        "claims": False,
        "log_level": "warning",
        "sweep_interval": "0s",
        "datapath": {"enabled": True, "vpc_cidrs": ["10.77.0.0/16"], "external_snat": True},
    }
    return running_agent(directory, config, ready=True)


def measure(rounds: int) -> DatapathBench:
    interpreter = _interpreter()
    why = missing()
    if why:
        return DatapathBench(rounds, interpreter, {}, skipped=why)
    node = f"eni-bench-node-{uuid.uuid4().hex[:8]}"
    pod = f"eni-bench-pod-{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory(prefix="eni-bench-datapath-") as tmp:
        directory = Path(tmp)
        plugins = directory / "bin"
        plugins.mkdir()
        build = [interpreter, str(ROOT / "scripts" / "build_cni_plugin.py")]
        build += ["--output", str(plugins / "eni-ipam-cni"), "--interpreter", interpreter]
        subprocess.run(build, check=True, capture_output=True, timeout=60)
        _run("ip", "netns", "add", node)
        _run("ip", "netns", "add", pod)
        try:
            # The node: its primary interface addressed, its secondary one a veth with the pool's MAC.
            for name, mac in (("ens5", PRIMARY_MAC), ("ens6", SECONDARY_MAC)):
                _run(
                    "ip", "-n", node, "link", "add", name, "address", mac, "type", "veth", "peer", f"{name}p"
                )
                _run("ip", "-n", node, "link", "set", f"{name}p", "up")
            _run("ip", "-n", node, "link", "set", "lo", "up")
            _run("ip", "-n", node, "link", "set", "ens5", "up")
            _run("ip", "-n", node, "addr", "add", "10.77.0.10/24", "dev", "ens5")
            _run("ip", "-n", node, "route", "add", "default", "via", "10.77.0.1")
            with _inside(node):
                kubeconfig = directory / "kubeconfig"
                with _api_server(kubeconfig), _agent(directory, kubeconfig) as sock:
                    timings = _rounds(rounds, interpreter, plugins, directory, pod, sock)
        finally:
            _run("ip", "netns", "del", pod)
            _run("ip", "netns", "del", node)
    return DatapathBench(rounds, interpreter, timings)


def _rounds(
    rounds: int, interpreter: str, plugins: Path, directory: Path, pod: str, sock: str
) -> dict[str, Timing]:
    confs = {
        "host-local": {
            "type": "host-local",
            "ranges": [[{"subnet": "10.232.0.0/16", "gateway": "10.232.0.1"}]],
            "dataDir": str(directory / "host-local"),
        },
        "eni-ipam-cni (datapath)": {"type": "eni-ipam-cni", "socket": sock},
    }
    base = {
        "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
        "CNI_IFNAME": "eth0",
        "CNI_NETNS": f"/var/run/netns/{pod}",
        "CNI_PATH": f"{plugins}:{CNI_DIR}",
    }
    samples: dict[str, list[float]] = {}
    warm = 3
    for n in range(rounds + warm):
        keep = n >= warm
        bare = _timed([interpreter, "-I", "-S", "-c", "pass"], {}, b"")
        if keep:
            samples.setdefault(BARE, []).append(bare)
        for name, ipam in confs.items():
            conf = {
                "cniVersion": "1.0.0",
                "name": "bench-datapath",
                "type": "ptp",
                "ipMasq": False,
                "ipam": ipam,
            }
            stdin = json.dumps(conf).encode()
            for command in ("ADD", "DEL"):
                env = {**base, "CNI_COMMAND": command, "CNI_CONTAINERID": f"pod-{n}"}
                seconds = _timed([str(CNI_DIR / "ptp")], env, stdin)
                if keep:
                    samples.setdefault(f"ptp + {name} {command}", []).append(seconds)
    return {key: Timing.of(key, values) for key, values in samples.items()}
