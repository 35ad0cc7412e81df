"""Benchmark 6 — one process for a large cluster, measured as a whole (``make bench-scale``).

For each size N, three processes, so that only the controller's CPU and memory are measured:

* the cloud: the in-memory cloud holding N instances of four interfaces with ten secondary
  addresses each, answering EC2's wire protocol over HTTP with EC2-sized XML and EC2's buckets
  (``python -m eni_ipam_testkit.ec2_wire.server --fleet N --warm``);
* Kubernetes: the fake API server with N realistic Nodes of that fleet and their ENIPools
  (:mod:`bench.scale_kube`);
* the controller (:mod:`bench.scale_run`): the real ``eni-ipam run`` (AWS provider over boto3,
  Kubernetes node source, Lease election, metrics endpoint) with a loop-lag probe, run twice: a fresh
  start (pools without status), then a hand-over (a new leader on pools already up to date).

Beside every figure stands a reference measured in the same run: botocore's own parser on the very
pages the resync read, and the growth from the smaller sizes to the largest.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import select
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
EC2_READY = "listening on "
KUBE_READY = "ready "


@dataclasses.dataclass(frozen=True)
class ScaleRun:
    """What one size measured: the controller's two runs, as :mod:`bench.scale_run` reports them."""

    nodes: int
    fresh: dict[str, Any]
    handover: dict[str, Any]
    setup_s: float


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def _process(command: Sequence[str], ready: str, *, timeout: float, env: dict[str, str]) -> Iterator[str]:
    """Run ``command`` until the block ends; yields the rest of its first line starting with ``ready``."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    assert process.stdout is not None
    try:
        deadline = time.perf_counter() + timeout
        while True:
            left = deadline - time.perf_counter()
            if left <= 0 or not select.select([process.stdout], [], [], left)[0]:
                raise RuntimeError(f"{command[2]} printed no {ready!r} line within {timeout} s")
            line = process.stdout.readline()
            if not line:
                raise RuntimeError(f"{command[2]} exited with {process.wait()} before it was ready")
            if line.startswith(ready):
                break
        yield line[len(ready) :].strip()
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        process.stdout.close()


def _controller(args: Sequence[str], env: dict[str, str], timeout: float) -> dict[str, Any]:
    command = [sys.executable, "-m", "bench.scale_run", *args]
    done = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"the controller failed ({done.returncode}):\n{done.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def measure(nodes: int, *, status_qps: float = 1000.0, timeout: float = 3600.0) -> ScaleRun:
    """Set up the cloud and the cluster for ``nodes``, run the controller fresh, then hand over."""
    env = {
        **os.environ,
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_DEFAULT_REGION": "us-east-1",
        "PYTHONPATH": str(ROOT),
    }
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="eni-ipam-scale-") as tmp:
        kubeconfig = str(Path(tmp) / "kubeconfig")
        ec2_command = [
            sys.executable,
            "-m",
            "eni_ipam_testkit.ec2_wire.server",
            "--fleet",
            str(nodes),
            "--warm",
        ]
        kube_command = [
            sys.executable,
            "-m",
            "bench.scale_kube",
            "--nodes",
            str(nodes),
            "--kubeconfig",
            kubeconfig,
        ]
        with (
            _process(ec2_command, EC2_READY, timeout=timeout, env=env) as ec2,
            _process(kube_command, KUBE_READY, timeout=timeout, env=env),
        ):
            setup = time.perf_counter() - started
            url = ec2.split()[0]
            common = ["--ec2", url, "--kubeconfig", kubeconfig, "--nodes", str(nodes)]
            fresh = _controller(
                [*common, "--mode", "fresh", "--port", str(_free_port()), "--status-qps", str(status_qps)],
                env,
                timeout,
            )
            handover = _controller(
                [*common, "--mode", "handover", "--port", str(_free_port()), "--status-qps", str(status_qps)],
                env,
                timeout,
            )
    return ScaleRun(nodes=nodes, fresh=fresh, handover=handover, setup_s=setup)


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__)
    parser.add_argument("sizes", nargs="*", type=int, default=[1000])
    args = parser.parse_args(argv)
    for n in args.sizes:
        run = measure(n)
        print(json.dumps(dataclasses.asdict(run), indent=1), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
