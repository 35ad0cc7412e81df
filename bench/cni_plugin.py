"""Benchmark 5 — the CNI plugin's ADD and DEL against a bare interpreter start and ``host-local``.

A runtime execs the IPAM plugin for every pod, so its latency is mostly process start-up. Measured
side by side in one run, interleaved so that noise hits every figure alike:

* the floor of any Python plugin: ``python3 -I -S -c pass`` with the interpreter the plugin runs on;
* ``eni-ipam-cni`` as installed (scripts/build_cni_plugin.py), ADD and DEL, exec'd as a main plugin
  execs its IPAM plugin, against a real ``eni-ipam agent`` process (static pool, state on disk);
* Go's ``host-local`` (Debian's containernetworking-plugins), ADD and DEL, the same way;
* the whole ``bridge`` ADD and DEL in a network namespace with each of the two IPAM plugins (the
  same configuration but for ``ipam``), which is what a pod start sees;
* in the same rounds, the bare start and both IPAM plugins' ADD and DEL again on a loaded host:
  every core but one busy (:mod:`bench.load`), the figures keyed ``... (loaded)`` and each ratio
  taken against the bare start measured under the same load.

Needs root, ``ip netns`` and /usr/lib/cni/{bridge,host-local}; otherwise the section says why and
no target is checked.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench import load

CNI_DIR = Path("/usr/lib/cni")
ROOT = Path(__file__).resolve().parents[1]
TARGET_RATIO = 1.5
BARE = "python3 -I -S -c pass"
LOADED = " (loaded)"
"""The suffix of a figure measured on the loaded host."""
MIN_ROUNDS = 50


@dataclasses.dataclass(frozen=True)
class Timing:
    name: str
    median_ms: float
    p99_ms: float
    samples_ms: tuple[float, ...] = ()
    """Every round's time, in order: the distribution bench/figures.py draws."""

    @classmethod
    def of(cls, name: str, samples: list[float]) -> Timing:
        ordered = sorted(samples)
        p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
        return cls(name, statistics.median(ordered) * 1000, p99 * 1000, tuple(s * 1000 for s in ordered))


@dataclasses.dataclass(frozen=True)
class PluginBench:
    rounds: int
    interpreter: str
    timings: dict[str, Timing]
    skipped: str = ""

    @property
    def judged(self) -> bool:
        """Enough rounds for a median to mean something (a quick run only proves the set-up)."""
        return not self.skipped and self.rounds >= MIN_ROUNDS

    def ratio(self, key: str) -> float:
        """``key``'s median over the bare start's, measured under the same load."""
        bare = BARE + LOADED if key.endswith(LOADED) else BARE
        return self.timings[key].median_ms / self.timings[bare].median_ms


def _interpreter() -> str:
    """The interpreter the plugin runs on: the host's ``/usr/bin/python3`` (what the plugin's default
    ``/usr/bin/env python3`` finds on a node) when there is one, else this one."""
    host = "/usr/bin/python3"
    return host if os.access(host, os.X_OK) else os.path.realpath(sys.executable)


def missing(plugins: tuple[str, ...] = ("bridge", "host-local")) -> str:
    """Why this machine cannot run the benchmark with the reference ``plugins`` ("" when it can)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for plugin in plugins:
        if not (CNI_DIR / plugin).is_file():
            return f"{CNI_DIR / plugin} is missing (apt-get install containernetworking-plugins)"
    if shutil.which("ip") is None:
        return "the ip command (iproute2) is missing"
    return ""


@contextlib.contextmanager
def running_agent(directory: Path, config: dict[str, Any], *, ready: bool = False) -> Iterator[str]:
    """A real ``eni-ipam-agent`` process with ``config`` (its ``socket`` in ``directory``), until the
    block ends; yields its socket once it accepts connections (``ready``: once it answers that an ADD
    can be served). Its log is ``directory/agent.log``, quoted when it fails to start."""
    sock = directory / "agent.sock"
    path = directory / "agent.yaml"
    path.write_text(json.dumps({**config, "socket": str(sock)}))
    command = [sys.executable, "-m", "eni_ipam.agent", "--node", "bench", "--config", str(path)]
    with (directory / "agent.log").open("wb") as log:
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log)
        try:
            deadline = time.perf_counter() + 60
            while not _answers(sock, ready):
                if proc.poll() is not None or time.perf_counter() > deadline:
                    err = (directory / "agent.log").read_text(errors="replace")
                    raise RuntimeError(f"the agent did not start: {err[-2000:]}")
                time.sleep(0.05)
            yield str(sock)
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _answers(sock: Path, ready: bool) -> bool:
    """Whether the agent accepts connections on ``sock`` (``ready``: and answers STATUS ready)."""
    probe = socket.socket(socket.AF_UNIX)
    try:
        probe.connect(str(sock))
        if not ready:
            return True
        probe.sendall(b"POST /v1/cni/status HTTP/1.0\r\nContent-Length: 0\r\n\r\n")
        return b" 200 " in probe.recv(4096)
    except OSError:
        return False
    finally:
        probe.close()


def _agent(directory: Path) -> contextlib.AbstractContextManager[str]:
    """The agent this benchmark measures against: a static pool, its state on disk."""
    config = {
        "node_source": "memory",
        "state_dir": str(directory / "state"),
        "cni_cache_dir": str(directory / "cache"),
        "server": {"host": "127.0.0.1", "port": 0, "probe_port": 0},
        "claims": False,
        "log_level": "warning",
        "sweep_interval": "0s",
        "pools": {"default": {"cidr": "10.231.0.0/16", "ranges": ["10.231.0.10-10.231.3.250"]}},
    }
    return running_agent(directory, config)


def _timed(command: list[str], env: dict[str, str], stdin: bytes) -> float:
    started = time.perf_counter()
    done = subprocess.run(command, env=env, input=stdin, capture_output=True, timeout=60)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{command[0]} failed ({done.returncode}): {done.stdout!r} {done.stderr!r}")
    return elapsed


def measure(rounds: int) -> PluginBench:
    interpreter = _interpreter()
    why = missing()
    if why:
        return PluginBench(rounds, interpreter, {}, skipped=why)
    with tempfile.TemporaryDirectory(prefix="eni-bench-cni-") as tmp:
        directory = Path(tmp)
        plugins = directory / "bin"
        plugins.mkdir()
        # Built by the interpreter it runs on, so the compiled copy is the one used.
        build = [interpreter, str(ROOT / "scripts" / "build_cni_plugin.py")]
        build += ["--output", str(plugins / "eni-ipam-cni"), "--interpreter", interpreter]
        subprocess.run(build, check=True, capture_output=True, timeout=60)
        netns = f"eni-bench-{uuid.uuid4().hex[:8]}"
        subprocess.run(["ip", "netns", "add", netns], check=True, capture_output=True, timeout=10)
        bridges = [f"enib{uuid.uuid4().hex[:8]}" for _ in range(2)]
        try:
            with _agent(directory) as sock, load.loops(load.other_cores()) as busy:
                timings = _rounds(rounds, interpreter, plugins, directory, netns, sock, bridges, busy)
        finally:
            subprocess.run(["ip", "netns", "del", netns], capture_output=True, timeout=10)
            for bridge in bridges:
                subprocess.run(["ip", "link", "del", bridge], capture_output=True, timeout=10)
    return PluginBench(rounds, interpreter, timings)


def _rounds(
    rounds: int,
    interpreter: str,
    plugins: Path,
    directory: Path,
    netns: str,
    sock: str,
    bridges: list[str],
    busy: load.Load,
) -> dict[str, Timing]:
    ipams = {
        "eni-ipam-cni": {"type": "eni-ipam-cni", "socket": sock},
        "host-local": {
            "type": "host-local",
            "ranges": [[{"subnet": "10.232.0.0/16", "gateway": "10.232.0.1"}]],
            "dataDir": str(directory / "host-local"),
        },
    }
    confs = {
        name: {
            "cniVersion": "1.0.0",
            "name": f"bench-{name}",
            "type": "bridge",
            "bridge": bridge,
            "isGateway": True,
            "ipMasq": False,
            "ipam": ipam,
        }
        for (name, ipam), bridge in zip(ipams.items(), bridges, strict=True)
    }
    base = {
        "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
        "CNI_IFNAME": "eth0",
        "CNI_NETNS": f"/var/run/netns/{netns}",
        "CNI_PATH": f"{plugins}:{CNI_DIR}",
    }
    samples: dict[str, list[float]] = {}

    def record(key: str, seconds: float) -> None:
        samples.setdefault(key, []).append(seconds)

    def starts(n: int, suffix: str, keep: bool) -> None:
        """The bare start, then each IPAM plugin's ADD and DEL (exec'd as a main plugin execs it)."""
        bare = _timed([interpreter, "-I", "-S", "-c", "pass"], {}, b"")
        if keep:
            record(BARE + suffix, bare)
        for name, conf in confs.items():
            stdin = json.dumps(conf).encode()
            ipam = str(plugins / "eni-ipam-cni") if name == "eni-ipam-cni" else str(CNI_DIR / "host-local")
            for command in ("ADD", "DEL"):
                env = {**base, "CNI_COMMAND": command, "CNI_CONTAINERID": f"ipam-{n}{suffix and '-loaded'}"}
                seconds = _timed([ipam], env, stdin)
                if keep:
                    record(f"{name} {command}{suffix}", seconds)

    warm = 3
    for n in range(rounds + warm):
        keep = n >= warm
        starts(n, "", keep)
        for name, conf in confs.items():
            stdin = json.dumps(conf).encode()
            for command in ("ADD", "DEL"):
                env = {**base, "CNI_COMMAND": command, "CNI_CONTAINERID": f"pod-{n}"}
                seconds = _timed([str(CNI_DIR / "bridge")], env, stdin)
                if keep:
                    record(f"bridge + {name} {command}", seconds)
        busy.on()
        try:
            starts(n, LOADED, keep)
        finally:
            busy.off()
    order = [k for k in samples if not k.endswith(LOADED)] + [k for k in samples if k.endswith(LOADED)]
    return {key: Timing.of(key, samples[key]) for key in order}
