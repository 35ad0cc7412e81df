"""The benchmark report: results, their targets, the machine, written to docs/PERFORMANCE.md."""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import sys
from pathlib import Path

from bench import burst as burst_bench
from bench import figures, scale_report
from bench.agent_restart import BUSY_PER_CORE, KUBELET_RESTART, WINDOW_MARGIN, RestartBench
from bench.api_efficiency import Phase, Steady
from bench.cni_plugin import LOADED, MIN_ROUNDS, TARGET_RATIO, PluginBench
from bench.convergence import Convergence
from bench.cpu_memory import Cpu, Memory
from bench.datapath_cni import DATAPATH_ADD, EXTRA_MS, STANDARD_ADD, DatapathBench
from bench.latency import Latency

API_RATIO = 1.05
CONVERGENCE_RATIO = 1.1
PASS_SECONDS = 0.5
STATE_MB = 100.0
PLAN_100K_SECONDS = 1.0
STATE_KB_PER_NODE = 2.5
"""At 100,000 nodes: planning every node within a second, the state within 2.5 KB a node (250 MB)."""
P99_MS = 50.0


@dataclasses.dataclass(frozen=True)
class Results:
    machine: dict[str, str]
    phases: list[Phase]
    steady: list[Steady]
    convergence: list[Convergence]
    cpu: list[Cpu]
    memory: list[Memory]
    latency: Latency
    plugin: PluginBench
    restart: RestartBench
    seconds: float
    datapath: DatapathBench | None = None
    """Section 5b, the whole chain with the node datapath (None: not run)."""
    burst: list[burst_bench.BurstRun] = dataclasses.field(default_factory=list)
    """Section 2b, a burst of joining nodes with and without ready interfaces (empty: not run)."""

    def checks(self) -> list[tuple[str, bool]]:
        out = [
            (
                f"API ratio {p.name}, {p.nodes} nodes{', prefixes' if p.prefix_delegation else ''}",
                p.ratio <= API_RATIO,
            )
            for p in self.phases
        ]
        out += [(f"steady state, {s.nodes} nodes: no mutating call", s.mutating == 0) for s in self.steady]
        base = min(self.steady, key=lambda s: s.nodes)
        out += [
            (f"steady reads beyond pagination, {s.nodes} nodes", s.beyond_pages <= base.beyond_pages + 0.5)
            for s in self.steady
        ]
        out += [
            (f"convergence ratio, {c.nodes} nodes", c.ratio <= CONVERGENCE_RATIO) for c in self.convergence
        ]
        for c in self.cpu:
            if c.nodes == 10_000:
                out.append((f"resync pass, {c.nodes} nodes", c.resync_seconds < PASS_SECONDS))
                out.append((f"planning pass, {c.nodes} nodes", c.plan_seconds < PASS_SECONDS))
            if c.nodes == 100_000:
                out.append((f"planning pass, {c.nodes} nodes", c.plan_seconds <= PLAN_100K_SECONDS))
        for m in self.memory:
            if m.nodes == 10_000:
                out.append((f"state memory, {m.nodes} nodes", m.state_mb < STATE_MB))
            if m.nodes == 100_000:
                per_node = m.state_mb * 1024 / m.nodes
                out.append((f"state memory per node, {m.nodes} nodes", per_node <= STATE_KB_PER_NODE))
        out.append(("event to IPs p99", self.latency.p99_ms < P99_MS))
        if self.plugin.judged:
            for command in ("ADD", "DEL"):
                for suffix, host in (("", ""), (LOADED, ", loaded host")):
                    ratio = self.plugin.ratio(f"eni-ipam-cni {command}{suffix}")
                    out.append(
                        (f"CNI plugin {command} median vs bare interpreter{host}", ratio <= TARGET_RATIO)
                    )
        if self.restart.judged:
            out.append(("plugin retry window vs the slowest agent restart, loaded", self.restart.met()))
        if self.datapath is not None and self.datapath.judged:
            out.append(
                ("CNI ADD with the datapath vs ptp + host-local + a bare start + 3 ms", self.datapath.met())
            )
        return out

    def all_met(self) -> bool:
        return all(ok for _, ok in self.checks())


def machine() -> dict[str, str]:
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        pass
    memory = ""
    try:
        with open("/proc/meminfo") as f:
            kb = int(next(line.split()[1] for line in f if line.startswith("MemTotal")))
            memory = f"{kb / 2**20:.0f} GiB"
    except (OSError, StopIteration, ValueError):
        pass
    return {
        "CPU": model or platform.processor() or "unknown",
        "cores": str(os.cpu_count()),
        "memory": memory or "unknown",
        "Python": sys.version.split()[0],
        "OS": f"{platform.system()} {platform.release()}",
    }


def _plugin_section(p: PluginBench) -> list[str]:
    lines = [
        "## 5. CNI plugin ADD and DEL",
        "",
        "A runtime execs the IPAM plugin for every pod, so its latency is mostly process start-up. In one",
        "run, interleaved: the floor of any Python plugin (`python3 -I -S -c pass`, same interpreter),",
        "`eni-ipam-cni` as installed (scripts/build_cni_plugin.py) exec'd the way a main plugin execs its",
        "IPAM plugin, against a real `eni-ipam agent` process (static pool, state file on this machine's",
        "disk, `log_level: warning`), and Go's `host-local` the same way; then the whole `bridge` ADD and",
        "DEL in a network namespace with each (the same configuration but for `ipam`): bench/cni_plugin.py.",
        "In the same rounds the bare start and both IPAM plugins run again on a loaded host, every core but",
        "one busy with a loop in a session of its own (bench/load.py); each loaded figure is set against",
        "the bare start under the same load.",
        f"Target: `eni-ipam-cni` median ADD and DEL within {TARGET_RATIO}× the bare interpreter start, idle",
        "and loaded.",
        "",
    ]
    if p.skipped:
        return [*lines, f"Not measured on this machine: {p.skipped}.", ""]
    judged = "" if p.judged else f" (fewer than {MIN_ROUNDS}: the target is not judged)"
    lines += [
        f"{p.rounds} rounds{judged}; interpreter `{p.interpreter}`.",
        "",
        "| what | median (ms) | p99 (ms) | median vs bare start |",
        "|---|---:|---:|---:|",
    ]
    for key, timing in p.timings.items():
        lines.append(f"| {key} | {timing.median_ms:.2f} | {timing.p99_ms:.2f} | {p.ratio(key):.2f}× |")
    return [*lines, ""]


def _restart_section(r: RestartBench) -> list[str]:
    lines = [
        "### An agent restart, as the runtimes see it",
        "",
        "While the agent restarts, every container start of the node waits on the plugin's retries",
        '(docs/node.md, "Agent restarts"): the plugin\'s retry window is sized from these figures. In one',
        "run, interleaved, each a SIGKILL of a running agent holding 50 allocations: the unit's `ExecStart`",
        "started again `RestartSec` after the kill (static pool); the chart's container command started",
        f"again {KUBELET_RESTART:g} s after it (the kubelet's first restart, once its PLEG has relisted; the",
        "container runtime's create and start not included), with `node_source: kubernetes` against the",
        "fake API server, answering once it has read the node's ENIPool. Hosts: idle, loaded (every core",
        f"but one busy), and a busy node ({BUSY_PER_CORE} loops a core, each in a scheduling group of its",
        "own, as in tests/e2e/test_agent_restart.py). Listening: the socket accepts a connection (the agent",
        "listens as soon as its configuration is read); answered: an ADD is answered 200. The agent's",
        "bytecode is cached, as an installed package has it: bench/agent_restart.py.",
        f"Target: the plugin's retry window at least {WINDOW_MARGIN:g}× the slowest kill → answered of the",
        'rows marked "sized from".',
        "",
    ]
    if r.skipped:
        return [*lines, f"Not measured on this machine: {r.skipped}.", ""]
    judged = "" if r.judged else " (too few for the target to be judged)"
    lines += [
        f"{r.rounds} restarts of each{judged}.",
        "",
        "| restart | host | restart delay (s) | kill → listening (s) | kill → answered (s), median | max | "
        "exec → listening (s) | listening → answered (s) | window sized from |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for row in r.rows:
        cells = [
            row.name,
            row.host,
            f"{row.delay:g}",
            f"{row.median(row.listening):.2f}",
            f"{row.median(row.answered):.2f}",
            f"{max(row.answered):.2f}",
            f"{row.median(row.exec_to_listening):.2f}",
            f"{row.median(row.listening_to_answered):.2f}",
            "yes" if row.judged else "",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    slowest = r.slowest()
    window = f"The plugin's retry window: {r.window:g} s"
    if slowest:
        window += f", {r.window / slowest:.1f}× the slowest restart it is sized from ({slowest:.2f} s)"
    lines += ["", window + ".", ""]
    return lines


def _datapath_section(d: DatapathBench | None) -> list[str]:
    lines = [
        "## 5b. CNI ADD and DEL with the node datapath",
        "",
        "The node datapath adds the agent's netlink calls for a pod's rules to every ADD and DEL",
        "(decision 0036). In one run, interleaved, in a network namespace standing for the node: the bare",
        "interpreter start, the standard chain (`ptp` with `host-local`), and `ptp` with `eni-ipam-cni`",
        "against a real agent with `datapath.enabled` following its ENIPool on the fake API server, each",
        "pod's address on a secondary interface (a `to` and a `from` rule per ADD): bench/datapath_cni.py.",
        "Target: the datapath chain's median ADD at most the standard chain's plus one bare start plus "
        f"{EXTRA_MS:g} ms.",
        "",
    ]
    if d is None:
        return [*lines, "Not run.", ""]
    if d.skipped:
        return [*lines, f"Not measured on this machine: {d.skipped}.", ""]
    judged = "" if d.judged else f" (fewer than {MIN_ROUNDS}: the target is not judged)"
    lines += [
        f"{d.rounds} rounds{judged}; interpreter `{d.interpreter}`.",
        "",
        "| what | median (ms) | p99 (ms) |",
        "|---|---:|---:|",
    ]
    for key, timing in d.timings.items():
        lines.append(f"| {key} | {timing.median_ms:.2f} | {timing.p99_ms:.2f} |")
    standard, datapath = d.timings[STANDARD_ADD].median_ms, d.timings[DATAPATH_ADD].median_ms
    lines += [
        "",
        f"The datapath chain's ADD: {datapath:.2f} ms against a budget of {d.budget_ms():.2f} ms "
        f"({standard:.2f} + {d.timings['python3 -I -S -c pass'].median_ms:.2f} + {EXTRA_MS:g}): "
        f"{_mark(d.met()) if d.judged else 'not judged, too few rounds'}.",
        "",
    ]
    return lines


def _mark(ok: bool) -> str:
    return "met" if ok else "**missed**"


def render(r: Results) -> str:
    lines = [
        "# Performance",
        "",
        "Written by `make bench` (`python -m bench`); the code is in `bench/`. Every figure stands next",
        "to a reference measured in the same run, so the ratios hold on a slower or busier machine even",
        "when the absolute times do not. Each section states its target; the table at the end says which",
        "are met.",
        "",
        "Machine: "
        + "; ".join(f"{k} {v}" for k, v in r.machine.items())
        + f". The run took {r.seconds:.0f} s.",
        "",
        "## 1. API efficiency",
        "",
        "Mutating calls on the in-memory cloud (virtual time, no throttling) against the lower bound: one",
        "call per interface that gained addresses, plus create + attach + delete-on-termination per new",
        "interface. Nodes of mixed instance types (2 to 8 interfaces) with watermarks of 8 to 45",
        "addresses. Scale-up: every node's pods grow past its pool. Pod churn: 20 rounds, 30 s apart, of",
        "every node gaining or losing up to 5 pods (the bound is summed per round).",
        f"Target: at most {API_RATIO}× the bound.",
        "",
        "| phase | nodes | prefixes | calls | lower bound | ratio | calls by operation |",
        "|---|---:|---|---:|---:|---:|---|",
    ]
    for p in r.phases:
        ops = ", ".join(f"{k} {v}" for k, v in p.operations.items())
        lines.append(
            f"| {p.name} | {p.nodes} | {'yes' if p.prefix_delegation else 'no'} | {p.calls} | {p.bound} "
            f"| {p.ratio:.3f} | {ops} |"
        )
    lines += [
        "",
        "Steady state: ten quiet virtual minutes after the churn. Read calls come from the periodic resync",
        "(one page per 1,000 items of each listing, once a minute) and garbage collection; what a minute",
        "costs beyond one resync's pages must not grow with the cluster.",
        "",
        "| nodes | mutating calls | read calls per minute | pages per resync | beyond the pages |",
        "|---:|---:|---:|---:|---:|",
    ]
    for s in r.steady:
        reads = f"{s.reads_per_minute:.1f} | {s.pages_per_resync} | {s.beyond_pages:.1f}"
        lines.append(f"| {s.nodes} | {s.mutating} | {reads} |")
    lines += [
        "",
        "## 2. Convergence under EC2's buckets",
        "",
        "Fresh clusters on the in-memory cloud with EC2's published token buckets enforced by the cloud,",
        "virtual time: seconds until the last node reaches its watermark. The bound is the longest any",
        "mutating operation's bucket needs for the calls of the lower bound: (calls - burst) / refill.",
        "The reference model runs the reference operator's algorithm in the same simulator: one",
        "mutation per node per cycle, a fresh per-instance sync before the next, one 4 QPS / burst 20",
        f"bucket for every call. Target: at most {CONVERGENCE_RATIO}× the bound.",
        "",
        "| nodes | converged (s) | bound (s) | ratio | reference model (s) | speed-up |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for conv in r.convergence:
        ref = f"{conv.reference_seconds:.0f}" if conv.reference_seconds else "–"
        speed = f"{conv.speedup:.1f}×" if conv.speedup else "–"
        row = f"{conv.seconds:.1f} | {conv.bound:.1f} | {conv.ratio:.3f} | {ref} | {speed}"
        lines.append(f"| {conv.nodes} | {row} |")
    lines += [
        "",
        *figures.link("convergence", "Seconds to converge: eni-ipam, the bucket bound, the reference model"),
        *([burst_bench.section(r.burst)] if r.burst else []),
        "## 3. CPU and memory",
        "",
        "Nodes with four interfaces of ten addresses each (m5.2xlarge limits), each short of its",
        "watermark, held by a real NodeManager; one core, best of three. The resync pass applies a full",
        "snapshot and recomputes every node; the planning pass plans every node's allocation. Memory is",
        "the resident set of a fresh process holding that state, minus the same process before it.",
        f"Targets: each pass under {PASS_SECONDS} s and the state under {STATE_MB:.0f} MB at 10,000 nodes;",
        f"at 100,000, planning every node within {PLAN_100K_SECONDS:.0f} s and the state within",
        f"{STATE_KB_PER_NODE} KB a node. (A resync that changed little passes over unchanged nodes:",
        "section 6 measures that apply.)",
        "",
        "| nodes | resync pass (s) | planning pass (s) | state (MB) | state a node (KB) | process RSS (MB) |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for c, m in zip(r.cpu, r.memory, strict=True):
        times = f"{c.resync_seconds:.3f} | {c.plan_seconds:.3f}"
        per_node = m.state_mb * 1024 / m.nodes
        lines.append(f"| {c.nodes} | {times} | {m.state_mb:.1f} | {per_node:.2f} | {m.rss_mb:.1f} |")
    if len(r.cpu) > 1:
        small, big = r.cpu[0], r.cpu[-1]
        ms, mb = r.memory[0], r.memory[-1]
        factor = big.nodes / small.nodes
        lines += [
            "",
            f"Growth from {small.nodes} to {big.nodes} nodes ({factor:.0f}× the nodes): resync pass "
            f"{big.resync_seconds / small.resync_seconds:.1f}×, planning pass "
            f"{big.plan_seconds / small.plan_seconds:.1f}×, "
            f"state {mb.state_mb / max(ms.state_mb, 0.1):.1f}×.",
        ]
    lat = r.latency
    lines += [
        "",
        *figures.link("growth", "Passes and memory against the number of nodes"),
        "## 4. Event to IPs",
        "",
        f"A converged cluster of {lat.nodes} nodes on the in-memory cloud with zero latency and no rate",
        "limit, real clock. One at a time, a node's pods grow past its pool; measured is the time from the",
        "store delivering the new usage to the start of the allocation call. It includes the coalescing",
        "of events (`trigger_min_interval`, 10 ms, when the node was maintained within it).",
        f"Target: p99 under {P99_MS:.0f} ms.",
        "",
        "| events | p50 (ms) | p99 (ms) | max (ms) |",
        "|---:|---:|---:|---:|",
        f"| {lat.events} | {lat.p50_ms:.2f} | {lat.p99_ms:.2f} | {lat.max_ms:.2f} |",
        "",
        *_plugin_section(r.plugin),
        *_restart_section(r.restart),
        *_datapath_section(r.datapath),
        "The distributions of sections 4 and 5: the share of events, or of a plugin's runs, within a time.",
        "",
        *figures.link("latency", "Event to IPs and the CNI plugin's ADD and DEL, as distributions"),
        "## Targets",
        "",
        "| check | result |",
        "|---|---|",
    ]
    lines += [f"| {name} | {_mark(ok)} |" for name, ok in r.checks()]
    return "\n".join(lines) + "\n"


def soak_arguments(
    prog: str, description: str, out: Path, argv: list[str] | None, *, seconds: float | None = None
) -> argparse.Namespace:
    """The command line of a soak: ``--quick`` (a short run, printed) and ``--out`` (the report); with
    ``seconds``, ``--seconds`` too (how long the faults go on, that by default)."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--quick", action="store_true", help="a short run; print, do not write the report")
    parser.add_argument("--out", type=Path, default=out)
    if seconds is not None:
        parser.add_argument("--seconds", type=float, default=seconds, help=f"seconds of faults ({seconds:g})")
    return parser.parse_args(argv)


RUNTIMES_HEADING = "## podman, Docker and containerd on one agent"
"""The section ``bench/runtimes_soak.py`` writes at the end of docs/RELIABILITY-node.md, which the
agent soak's report (the rest of that page) keeps when it replaces the page."""
DATAPATH_HEADING = "## The node datapath under churn"
"""The section ``bench/datapath_soak.py`` writes at the end of docs/RELIABILITY-node.md, kept the same
way."""
TAIL_HEADINGS = (RUNTIMES_HEADING, DATAPATH_HEADING)
"""The sections soaks of their own write at the end of docs/RELIABILITY-node.md, in this order."""


def section_from(text: str, heading: str) -> str:
    """``text`` from the line ``heading`` to the next of :data:`TAIL_HEADINGS` or its end, or nothing."""
    at = text.find(f"\n{heading}\n")
    if at < 0:
        return ""
    start = at + 1
    ends = [e for h in TAIL_HEADINGS if h != heading and (e := text.find(f"\n{h}\n", start)) >= 0]
    return text[start : min(ends) + 1 if ends else len(text)]


def publish(text: str, out: Path, *, quick: bool, name: str) -> None:
    """A quick run's report goes to standard output; a full run's replaces ``out`` (said on stderr),
    keeping the whole-controller section ``make bench-scale`` wrote there (bench/scale_report.py) and
    the other soaks' sections (:data:`TAIL_HEADINGS`)."""
    if quick:
        print(text)
    else:
        old = out.read_text() if out.exists() else ""
        kept = scale_report.kept_section(old)
        new = scale_report.splice(text, kept) if kept else text
        for heading in TAIL_HEADINGS:
            section = section_from(old, heading)
            if section and not section_from(new, heading):
                new = new.rstrip("\n") + "\n\n" + section.rstrip("\n") + "\n"
        out.write_text(new)
        print(f"{name}: wrote {out}", file=sys.stderr)


def publish_section(section: str, out: Path, heading: str, *, quick: bool, name: str) -> None:
    """As :func:`publish`, for a report that is one section of ``out`` (from the line ``heading``, which
    it starts with, to the next of :data:`TAIL_HEADINGS` or the end): that section is replaced where it
    is, or added at the end; the rest is kept."""
    assert section.startswith(f"{heading}\n"), f"the section must start with {heading!r}"
    if quick:
        print(section)
    else:
        old = out.read_text() if out.exists() else ""
        current = section_from(old, heading)
        if current:
            start = old.find(f"\n{heading}\n") + 1
            rest = old[start + len(current) :]
            new = old[:start] + section + ("\n" + rest if rest.strip() else "")
        else:
            new = (old.rstrip("\n") + "\n\n" if old.strip() else "") + section
        out.write_text(new)
        print(f"{name}: wrote {out}", file=sys.stderr)
