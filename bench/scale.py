"""Benchmark 6 — one process for a large cluster, measured as a whole (``make bench-scale``).

For each size N, three processes, so that only the controller's CPU and memory are measured:

* the cloud: the in-memory cloud holding N instances of four interfaces with ten secondary
  addresses each, answering EC2's wire protocol over HTTP with EC2-sized XML and EC2's buckets
  (``python -m eni_ipam_testkit.ec2_wire.server --fleet N --warm``);
* Kubernetes: the fake API server with N realistic Nodes of that fleet and their ENIPools
  (:mod:`bench.scale_kube`);
* the controller (:mod:`bench.scale_run`): the real ``eni-ipam run`` (AWS provider over boto3,
  Kubernetes node source, Lease election, metrics endpoint) with a loop-lag probe, run twice: a fresh
  start (pools without status), then a hand-over (a new leader on pools already up to date);
* beside that second leader, a second replica as the chart's warm standby (informers synced): once it
  stands by, the leader is killed (SIGKILL), some pools ask for more at once, and the standby's way to
  its first mutating cloud call is timed from the kill (:func:`failover`).

Beside every figure stands a reference measured in the same run: botocore's own parser on the very
pages the resync read, and the growth from the smaller sizes to the largest.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import os
import select
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from bench.scale_kube import expected_first, node_bytes, node_name

ROOT = Path(__file__).resolve().parents[1]
EC2_READY = "listening on "
KUBE_READY = "ready "


@dataclasses.dataclass(frozen=True)
class ScaleRun:
    """What one size measured: the controller's two runs, as :mod:`bench.scale_run` reports them."""

    nodes: int
    fresh: dict[str, Any]
    handover: dict[str, Any]
    failover: dict[str, Any]
    setup_s: float
    reference: dict[str, Any]
    node_json_bytes: int


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
        yield _Lines(process, command[2]).until(ready, timeout)[len(ready) :].strip()
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


class _Lines:
    """A process's standard output, line by line, each within a deadline."""

    def __init__(self, process: subprocess.Popen[str], what: str) -> None:
        assert process.stdout is not None
        self.process, self.stdout, self.what = process, process.stdout, what

    def until(self, prefix: str, timeout: float) -> str:
        """The first line starting with ``prefix``, whole."""
        deadline = time.perf_counter() + timeout
        while True:
            left = deadline - time.perf_counter()
            if left <= 0 or not select.select([self.stdout], [], [], left)[0]:
                raise RuntimeError(f"the {self.what} printed no {prefix!r} line within {timeout} s")
            line = self.stdout.readline()
            if not line:
                raise RuntimeError(f"the {self.what} exited with {self.process.wait()} before {prefix!r}")
            if line.startswith(prefix):
                return line.strip()


def _proc_mb(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM of a live process, in MB."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0]) / 1024
    return fields


def demand_nodes(nodes: int) -> list[str]:
    """The pools made to ask for more at the kill: one in a thousand (at least two), none of those
    that already wait or ask (:func:`bench.scale_kube.expected_first`)."""
    count, busy = max(nodes // 1000, 2), expected_first(nodes)
    spread = [node_name(n) for n in range(0, nodes, max(nodes // count, 1))]
    chosen = [name for name in spread if name not in busy][:count]
    for n in range(nodes):  # where the spread met busy nodes: their neighbours
        if len(chosen) >= count:
            break
        if (name := node_name(n)) not in busy and name not in chosen:
            chosen.append(name)
    return chosen


DEMAND = {"spec": {"preAllocate": 56}}
"""What those pools ask at the kill: 56 free addresses where they hold 40, none in use."""


async def _raise_demand(kubeconfig: str, names: Sequence[str]) -> None:
    from lightkube.types import PatchType

    from eni_ipam.kube.api import ENIPOOLS, client_from_kubeconfig

    client = client_from_kubeconfig(kubeconfig)
    try:
        resource = ENIPOOLS.resource()
        for name in names:
            await client.patch(resource, name, DEMAND, patch_type=PatchType.MERGE)
    finally:
        await client.close()


def _popen(args: Sequence[str], env: dict[str, str]) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "bench.scale_run", *args]
    return subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT
    )


def _end(process: subprocess.Popen[str]) -> str:
    """Stop ``process`` if it still runs; the tail of what it wrote to its standard error."""
    if process.poll() is None:
        process.kill()
    process.wait()
    assert process.stdout is not None and process.stderr is not None
    error = process.stderr.read()[-4000:]
    process.stdout.close()
    process.stderr.close()
    return error


def failover(
    common: Sequence[str], kubeconfig: str, nodes: int, env: dict[str, str], timeout: float, status_qps: float
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Two replicas, as the chart runs them: a leader starting on pools already up to date (the
    hand-over, its figures as ``handover``), then a warm standby beside it. Once the standby stands
    by with its informers synced, the leader is killed with SIGKILL and, at once, some pools ask for
    more (:func:`demand_nodes`): work the new leader must do with a mutating call. Timed from the
    kill, on the system's monotonic clock both sides read: the standby taking the Lease, and its
    first mutating cloud call. Each replica's RSS: the leader's read just before its kill."""
    qps = ["--status-qps", str(status_qps)]
    leader = _popen([*common, "--mode", "handover", "--stay", "--port", str(_free_port()), *qps], env)
    standby: subprocess.Popen[str] | None = None
    try:
        handover: dict[str, Any] = json.loads(_Lines(leader, "leader").until("{", timeout))
        standby = _popen([*common, "--mode", "standby", "--port", str(_free_port()), *qps], env)
        lines = _Lines(standby, "standby")
        standing = json.loads(lines.until("standby ", timeout).removeprefix("standby "))
        leader_mb = _proc_mb(leader.pid)
        killed_at = time.perf_counter()
        leader.kill()
        demand = demand_nodes(nodes)
        asyncio.run(_raise_demand(kubeconfig, demand))
        raised_at = time.perf_counter()
        took: dict[str, Any] = json.loads(lines.until("{", timeout))
        if standby.wait(60) != 0:
            raise RuntimeError(f"the standby exited with {standby.returncode}")
    except BaseException as error:
        tails = [f"leader:\n{_end(leader)}"] + ([f"standby:\n{_end(standby)}"] if standby else [])
        raise RuntimeError(f"the two-replica run failed: {error}\n" + "\n".join(tails)) from error
    _end(leader)
    _end(standby)
    result = {
        **took,
        "standby_synced_s": standing["synced_s"],
        "leader_rss_mb": leader_mb["VmRSS"],
        "leader_peak_rss_mb": leader_mb["VmHWM"],
        "demand_pools": len(demand),
        "demand_s": raised_at - killed_at,
        "kill_to_term_s": float(took["term_at"]) - killed_at,
        "kill_to_first_mutation_s": float(took["first_mutation_at"]) - killed_at,
        "kill_to_settled_s": float(took["settled_at"]) - killed_at,
    }
    return handover, result


def botocore_reference(pages: Path) -> dict[str, Any]:
    """botocore's own parser against the listing parser on pages the full resync read, in this
    process (after the controller exited, so neither disturbs the other): CPU per page of each, and
    the botocore CPU of the resync's listings (every page it read, at the sampled pages' speed per
    byte).

    The controller kept the first pages of each listing exactly as botocore handed them to the
    parser, and counted every page and byte (``pages/summary.json``, :mod:`bench.scale_run`).
    """
    from bench import ec2_parse
    from providers.aws import listings

    summary = json.loads((pages / "summary.json").read_text())
    out: dict[str, Any] = {"pages": {}}
    botocore_resync_s = 0.0
    for operation, read in sorted(summary.items()):
        sample = [(pages / name).read_bytes() for name in read["kept"]]
        if operation not in (ec2_parse.DNI, ec2_parse.DI) or not sample:
            continue
        warm = listings.ReuseCache()
        for body in sample:
            ec2_parse.fast_reads(body, operation, warm)
        readers: dict[str, tuple[Callable[[], object], Callable[[], object]]] = {
            "botocore": (functools.partial(_read_all, ec2_parse.botocore_reads, sample, operation), _nothing),
            "fast_cold": (
                functools.partial(_read_all, ec2_parse.fast_reads, sample, operation),
                listings.forget_shared,
            ),
            "fast_warm": (
                functools.partial(
                    _read_all, functools.partial(ec2_parse.fast_reads, cache=warm), sample, operation
                ),
                _nothing,
            ),
        }
        sampled_bytes = sum(map(len, sample))
        figures = ec2_parse._cpu_ms(readers, 3)
        out["pages"][operation] = {
            "requested": read["pages"],
            "bytes": read["bytes"],
            "sampled": len(sample),
            "kb_per_page": read["bytes"] / read["pages"] / 1024,
            **{f"{name}_ms_per_page": ms / len(sample) for name, ms in figures.items()},
        }
        # The pages differ in size (the last is short, a filtered listing is small): by the byte.
        botocore_resync_s += figures["botocore"] / 1000 * read["bytes"] / sampled_bytes
    out["botocore_resync_cpu_s"] = botocore_resync_s
    return out


def _read_all(read: Any, bodies: list[bytes], operation: str) -> list[Any]:
    return [read(body, operation) for body in bodies]


def _nothing() -> None:
    pass


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
            # The controller paces itself by EC2's buckets (its own limiter); the server's are off
            # so that the benchmark's changes behind the controller's back do not queue behind them.
            "--no-throttle",
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
            pages = Path(tmp) / "pages"
            first = str(len(expected_first(nodes)) + 50)
            common = ["--ec2", url, "--kubeconfig", kubeconfig, "--nodes", str(nodes), "--first", first]
            fresh = _controller(
                [
                    *common,
                    "--mode",
                    "fresh",
                    "--pages",
                    str(pages),
                    "--port",
                    str(_free_port()),
                    "--status-qps",
                    str(status_qps),
                ],
                env,
                timeout,
            )
            reference = botocore_reference(pages)
            handover, failed_over = failover(common, kubeconfig, nodes, env, timeout, status_qps)
    return ScaleRun(
        nodes=nodes,
        fresh=fresh,
        handover=handover,
        failover=failed_over,
        setup_s=setup,
        reference=reference,
        node_json_bytes=node_bytes(nodes),
    )


OUT = ROOT / "docs" / "PERFORMANCE.md"
SIZES = (1000, 10_000, 100_000)


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    from bench import scale_report
    from bench.report import machine

    parser = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__)
    parser.add_argument(
        "sizes",
        nargs="*",
        type=int,
        help="cluster sizes (default 1,000, 10,000 and 100,000; none with --with)",
    )
    parser.add_argument(
        "--out", type=Path, default=OUT, help=f"the report whose section 6 is replaced ({OUT})"
    )
    parser.add_argument("--print", action="store_true", help="print the section instead of writing it")
    parser.add_argument("--json", type=Path, help="also write every run's figures here")
    parser.add_argument(
        "--with",
        dest="earlier",
        type=Path,
        action="append",
        default=[],
        help="runs an earlier --json wrote, reported with these (a size measured again replaces them)",
    )
    args = parser.parse_args(argv)
    sizes = args.sizes or ([] if args.earlier else list(SIZES))
    earlier = [run for path in args.earlier for run in json.loads(path.read_text())]
    runs = [run for run in earlier if int(run["nodes"]) not in sizes]
    for n in sorted(sizes):
        print(f"bench-scale: {n:,} nodes", file=sys.stderr, flush=True)
        runs.append(dataclasses.asdict(measure(n)))
        if args.json:
            args.json.write_text(json.dumps(runs, indent=1))
    section = scale_report.render(runs, machine())
    if args.print:
        print(section)
    else:
        args.out.write_text(scale_report.splice(args.out.read_text() if args.out.exists() else "", section))
        print(f"bench-scale: wrote {args.out}", file=sys.stderr)
    for target, measured, ok in scale_report.checks(runs):
        if not ok:
            print(f"bench-scale: not met: {target} (measured {measured})", file=sys.stderr)
    return 0 if scale_report.all_met(runs) else 1


if __name__ == "__main__":
    sys.exit(main())
