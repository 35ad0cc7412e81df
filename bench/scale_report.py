"""Benchmark 6's report: the figures of :mod:`bench.scale` at each size, their targets at the largest,
and the growth between the two largest sizes, as section 6 of docs/PERFORMANCE.md.

``make bench`` rewrites sections 1 to 5 and keeps this one (:func:`kept_section`); ``make bench-scale``
replaces this one and keeps the rest (:func:`splice`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from bench.scale_kube import expected_first
from eni_ipam.kube.settings import KubeSettings

HEADING = "## 6. One process for a large cluster"

TARGET_NODES = 100_000
RSS_MB = 800.0
CORE_KB = 2.5
RESYNC_CPU_S = 15.0
BOTOCORE_RATIO = 6.0
STALL_S = 0.100
RESYNC_SHARE = 0.10
APPLY_S = 0.1
PLAN_S = 1.0
SCRAPE_STALL_S = 0.050
SCRAPE_MB = 5.0
SCRAPE_S = 0.5
INFORMER_KB = 1.0
READY_S = 60.0
LEASE_S = float(KubeSettings.model_fields["lease_duration"].default)
RETRY_S = float(KubeSettings.model_fields["retry_period"].default)
FAILOVER_S = LEASE_S + 5.0
"""The target: the standby's first mutating call within the Lease duration plus 5 s of the kill."""
FAILOVER_BOUND_S = LEASE_S + 2.2 * RETRY_S
"""When the standby may at the latest have taken the Lease (one request excepted): decision 0037."""


def _resync_share(fresh: dict[str, Any]) -> float:
    """The share of one core full resyncs take at the interval the controller chose."""
    return float(fresh["resync"]["cpu_s"]) / max(float(fresh["next_resync_in_s"]), 1e-9)


def _botocore_ratio(run: dict[str, Any]) -> float:
    return float(run["reference"]["botocore_resync_cpu_s"]) / max(
        float(run["fresh"]["resync"]["cpu_s"]), 1e-9
    )


def _scrape(fresh: dict[str, Any], key: str) -> float:
    return max(float(s[key]) for s in fresh["scrapes"])


def _held_kb(run: dict[str, Any], what: str) -> float:
    return float(run["fresh"]["bytes_per_node"][what]) / 1024


def in_order_of_need(run: dict[str, Any]) -> bool:
    first = expected_first(int(run["nodes"]))
    written = run["fresh"]["first_status_writes"][: len(first)]
    return set(written) == first


ROWS: list[tuple[str, Callable[[dict[str, Any]], float], str]] = [
    ("start to ready (s)", lambda r: r["fresh"]["start_to_ready_s"], "{:.1f}"),
    ("CPU to ready (s)", lambda r: r["fresh"]["start_cpu_s"], "{:.1f}"),
    ("every status written (s)", lambda r: r["fresh"]["settled_s"], "{:.1f}"),
    ("RSS when ready (MB)", lambda r: r["fresh"]["ready_rss_mb"], "{:.0f}"),
    ("RSS steady (MB)", lambda r: r["fresh"]["steady_rss_mb"], "{:.0f}"),
    ("RSS peak (MB)", lambda r: max(r["fresh"]["peak_rss_mb"], r["handover"]["peak_rss_mb"]), "{:.0f}"),
    ("core state (KB a node)", lambda r: r["fresh"]["bytes_per_node"]["core"] / 1024, "{:.2f}"),
    ("Node informer (KB a node)", lambda r: r["fresh"]["bytes_per_node"]["nodes_informer"] / 1024, "{:.2f}"),
    (
        "ENIPool informer (KB a node)",
        lambda r: r["fresh"]["bytes_per_node"]["pools_informer"] / 1024,
        "{:.2f}",
    ),
    ("a Node on the wire (KB)", lambda r: r["node_json_bytes"] / 1024, "{:.1f}"),
    ("full resync: wall (s)", lambda r: r["fresh"]["resync"]["wall_s"], "{:.2f}"),
    ("full resync: CPU (s)", lambda r: r["fresh"]["resync"]["cpu_s"], "{:.2f}"),
    (
        "full resync: pages read",
        lambda r: sum(r["fresh"]["resync"]["requests"].values()),
        "{:.0f}",
    ),
    ("botocore on the same pages: CPU (s)", lambda r: r["reference"]["botocore_resync_cpu_s"], "{:.2f}"),
    ("botocore ÷ full resync CPU", _botocore_ratio, "{:.1f}×"),
    ("full resync: longest stall (ms)", lambda r: r["fresh"]["resync"]["stall_s"] * 1e3, "{:.0f}"),
    ("resync interval chosen (s)", lambda r: r["fresh"]["next_resync_in_s"], "{:.0f}"),
    ("resyncs' share of a core", lambda r: _resync_share(r["fresh"]), "{:.1%}"),
    ("resync apply, 1 % changed (s)", lambda r: r["fresh"]["resync_changed"]["apply_s"], "{:.3f}"),
    ("planning every node (s)", lambda r: r["fresh"]["plan_all_s"], "{:.3f}"),
    ("/metrics: size (MB)", lambda r: _scrape(r["fresh"], "bytes") / 2**20, "{:.2f}"),
    ("/metrics: time (s)", lambda r: _scrape(r["fresh"], "seconds"), "{:.3f}"),
    ("/metrics: longest stall (ms)", lambda r: _scrape(r["fresh"], "stall_s") * 1e3, "{:.0f}"),
    ("longest stall of the run (ms)", lambda r: r["fresh"]["worst_stall_s"] * 1e3, "{:.0f}"),
    ("status writes, fresh start", lambda r: r["fresh"]["status_writes"], "{:.0f}"),
    ("hand-over: start to ready (s)", lambda r: r["handover"]["start_to_ready_s"], "{:.1f}"),
    ("hand-over: status writes", lambda r: r["handover"]["status_writes_after_resync"], "{:.0f}"),
    ("two replicas: standby synced (s)", lambda r: r["failover"]["standby_synced_s"], "{:.1f}"),
    ("two replicas: leader RSS peak (MB)", lambda r: r["failover"]["leader_peak_rss_mb"], "{:.0f}"),
    ("two replicas: standby RSS standing by (MB)", lambda r: r["failover"]["standby_rss_mb"], "{:.0f}"),
    ("two replicas: standby RSS peak (MB)", lambda r: r["failover"]["peak_rss_mb"], "{:.0f}"),
    ("failover: pools asking for more at the kill", lambda r: r["failover"]["demand_pools"], "{:.0f}"),
    ("failover: kill to the Lease taken (s)", lambda r: r["failover"]["kill_to_term_s"], "{:.1f}"),
    (
        "failover: kill to first mutating call (s)",
        lambda r: r["failover"]["kill_to_first_mutation_s"],
        "{:.1f}",
    ),
    ("failover: kill to every node passed (s)", lambda r: r["failover"]["kill_to_settled_s"], "{:.1f}"),
    ("failover: status writes", lambda r: r["failover"]["status_writes"], "{:.0f}"),
]

GROWTH = [
    "start to ready (s)",
    "RSS steady (MB)",
    "full resync: CPU (s)",
    "resync apply, 1 % changed (s)",
    "planning every node (s)",
    "/metrics: size (MB)",
]


def checks(runs: Sequence[dict[str, Any]]) -> list[tuple[str, str, bool]]:
    """(target, measured, met) at the largest size."""
    r = max(runs, key=lambda run: int(run["nodes"]))
    f, h = r["fresh"], r["handover"]
    peak = max(f["peak_rss_mb"], h["peak_rss_mb"])
    core_kb, informer_kb = _held_kb(r, "core"), _held_kb(r, "nodes_informer")
    scrape_stall, scrape_mb, scrape_s = (
        _scrape(f, "stall_s"),
        _scrape(f, "bytes") / 2**20,
        _scrape(f, "seconds"),
    )
    writes = (h["status_writes"], h["status_writes_after_resync"])
    fo = r["failover"]
    return [
        (f"controller RSS ≤ {RSS_MB:.0f} MB", f"{peak:.0f} MB", peak <= RSS_MB),
        (f"core state ≤ {CORE_KB} KB a node", f"{core_kb:.2f} KB", core_kb <= CORE_KB),
        (
            f"full resync CPU ≤ {RESYNC_CPU_S:.0f} s",
            f"{f['resync']['cpu_s']:.2f} s",
            f["resync"]["cpu_s"] <= RESYNC_CPU_S,
        ),
        (
            f"botocore ≥ {BOTOCORE_RATIO:.0f}× the full resync's CPU",
            f"{_botocore_ratio(r):.1f}×",
            _botocore_ratio(r) >= BOTOCORE_RATIO,
        ),
        (
            f"no loop stall over {STALL_S * 1e3:.0f} ms",
            f"{f['worst_stall_s'] * 1e3:.0f} ms",
            f["worst_stall_s"] <= STALL_S,
        ),
        (
            f"full resyncs ≤ {RESYNC_SHARE:.0%} of a core",
            f"{_resync_share(f):.1%}",
            _resync_share(f) <= RESYNC_SHARE + 1e-3,
        ),
        (
            f"resync apply, 1 % changed ≤ {APPLY_S} s",
            f"{f['resync_changed']['apply_s']:.3f} s",
            f["resync_changed"]["apply_s"] <= APPLY_S,
        ),
        (f"planning every node ≤ {PLAN_S:.0f} s", f"{f['plan_all_s']:.3f} s", f["plan_all_s"] <= PLAN_S),
        (
            f"/metrics stalls the loop ≤ {SCRAPE_STALL_S * 1e3:.0f} ms",
            f"{scrape_stall * 1e3:.0f} ms",
            scrape_stall <= SCRAPE_STALL_S,
        ),
        (f"/metrics ≤ {SCRAPE_MB:.0f} MB", f"{scrape_mb:.2f} MB", scrape_mb <= SCRAPE_MB),
        (f"/metrics ≤ {SCRAPE_S} s", f"{scrape_s:.3f} s", scrape_s <= SCRAPE_S),
        (f"Node informer ≤ {INFORMER_KB:.0f} KB a node", f"{informer_kb:.2f} KB", informer_kb <= INFORMER_KB),
        (
            f"start to ready ≤ {READY_S:.0f} s",
            f"{f['start_to_ready_s']:.1f} s",
            f["start_to_ready_s"] <= READY_S,
        ),
        ("a hand-over with nothing changed writes no status", f"{writes[0]} + {writes[1]}", writes == (0, 0)),
        (
            f"leader RSS ≤ {RSS_MB:.0f} MB, two replicas",
            f"{fo['leader_peak_rss_mb']:.0f} MB",
            fo["leader_peak_rss_mb"] <= RSS_MB,
        ),
        (
            f"standby RSS ≤ {RSS_MB:.0f} MB, two replicas",
            f"{fo['peak_rss_mb']:.0f} MB",
            fo["peak_rss_mb"] <= RSS_MB,
        ),
        (
            f"leader killed: the standby's first mutating call ≤ Lease duration + 5 s ({FAILOVER_S:.0f} s)",
            f"{fo['kill_to_first_mutation_s']:.1f} s",
            fo["kill_to_first_mutation_s"] <= FAILOVER_S,
        ),
        (
            "a fresh start writes pending pods' and deficits' nodes first",
            "yes" if in_order_of_need(r) else "no",
            in_order_of_need(r),
        ),
    ]


def all_met(runs: Sequence[dict[str, Any]]) -> bool:
    return all(ok for _, _, ok in checks(runs))


def render(runs: Sequence[dict[str, Any]], machine: dict[str, str]) -> str:
    runs = sorted(runs, key=lambda run: int(run["nodes"]))
    sizes = [int(r["nodes"]) for r in runs]
    largest = sizes[-1]
    lines = [
        HEADING,
        "",
        "The whole controller (`make bench-scale`, bench/scale.py): the real `eni-ipam run` service",
        "(AWS provider over boto3, Kubernetes node source, Lease election, metrics endpoint) in its own",
        "process, against the EC2 front end (the in-memory cloud answering EC2's wire protocol, N",
        "instances of four interfaces with ten secondary addresses, EC2-sized XML) and the fake API",
        "server (N Nodes of about 12 KB of JSON: 50 images, managed fields, 20 labels, conditions; their",
        "ENIPools; 0.5 % of the nodes with a pending pod, 0.5 % asking for more addresses), each in a",
        "process of its own, so only the controller is measured. Status writes are allowed 1,000 a second",
        "here (the default, 10, only spreads the same writes over time).",
        "",
        "What each figure includes:",
        "",
        "* **start to ready**: from the service's start to leading with every node known and the first",
        "  full resync applied (informer lists, the Lease, subnets, both EC2 listings); **every status",
        "  written**: until every node had its pass and no status write is queued.",
        "* **RSS**: the controller's resident set (VmRSS) when ready and at the end, after a collection;",
        "  **peak** is VmHWM over the fresh start and the hand-over. **Core state**, the informers: bytes",
        "  of every object the manager's nodes and cloud view (or the informer's cache) reach, each once.",
        "* **full resync**: one more resync in steady state: CPU of every thread of the process, wall time,",
        "  the longest event-loop stall within it (a loop-lag probe ticking every millisecond), and the",
        "  pages read. Between full instance listings (every 30 minutes by default) a resync lists the",
        "  interfaces and only the instances that are not running or not known.",
        "* **botocore on the same pages**: botocore's own parser, then the provider's readers of its",
        "  dicts, timed in the orchestrating process on the first pages of the resync's listings fetched",
        "  from the same front end, times the pages the resync read: the CPU the resync's parsing alone",
        "  would cost through botocore. The ratio sets it against the whole resync's CPU (HTTP, parsing,",
        "  apply).",
        "* **resync interval chosen**: the adaptive `resync_interval` after that resync (resyncs ≤ 10 % of",
        "  a core, at most 15 minutes); the share is the resync's CPU over it.",
        "* **resync apply, 1 % changed**: the manager's apply after 1 % of the instances gained an address",
        "  behind its back (the cloud's time excluded).",
        "* **planning every node**: statistics and an allocation plan for every node, on the loop, nothing",
        "  else running (the service plans only the nodes with work).",
        "* **/metrics**: the largest of three scrapes from another thread, as Prometheus scrapes; the",
        "  stall is the loop's longest during the scrape.",
        "* **longest stall of the run**: over the whole fresh run, planning measurement excluded.",
        "* **hand-over**: a second controller starts on pools the first one brought up to date: its",
        "  status writes until every node had its pass, and after one more resync.",
        "* **two replicas**: the hand-over's controller leads on, and a second replica starts beside it",
        "  as the chart's warm standby (informers synced, the Lease held by the other). Once it stands by,",
        "  the leader is killed with SIGKILL and, at once, one pool in a thousand (at least two) asks for",
        "  16 more free addresses than it holds (`preAllocate` 56 where 40 are free): work the new leader",
        "  can only do with a mutating call. From the kill, on the machine's monotonic clock: the",
        "  standby taking the Lease, its first mutating cloud call (the first the mutation fence lets",
        "  through: a pool short by its last status is served on a read of its own instance while the",
        "  first listing of the cloud runs, decision 0041), and every node having had its pass. With the",
        "  default timings a standby takes the Lease at most `lease_duration` + 2.2 × `retry_period`",
        f"  ({FAILOVER_BOUND_S:.1f} s) and one request after the last renewal it saw (decision 0037), and",
        "  the leader renewed at most `retry_period` before the kill; the target allows the Lease",
        f"  duration plus 5 s ({FAILOVER_S:.0f} s) for the whole way to the first mutating call. RSS: the",
        "  leader's peak (VmHWM, its start and hand-over included) read just before the kill, the",
        "  standby's when standing by and its peak after the takeover.",
        "",
        "Machine: " + "; ".join(f"{k} {v}" for k, v in machine.items()) + ".",
        "",
        "| figure | " + " | ".join(f"{n:,} nodes" for n in sizes) + " |",
        "|---|" + "---:|" * len(sizes),
    ]
    for name, figure, fmt in ROWS:
        lines.append(f"| {name} | " + " | ".join(fmt.format(figure(r)) for r in runs) + " |")
    if len(runs) >= 2:
        small, big = runs[-2], runs[-1]
        factor = int(big["nodes"]) / int(small["nodes"])
        parts = []
        for name, figure, _ in ROWS:
            if name in GROWTH:
                before = figure(small)
                parts.append(f"{name.split(' (')[0]} {figure(big) / before:.1f}×" if before else "")
        lines += [
            "",
            f"Growth from {int(small['nodes']):,} to {int(big['nodes']):,} nodes ({factor:.0f}× the nodes): "
            + ", ".join(p for p in parts if p)
            + ".",
        ]
    lines += [
        "",
        f"Targets at {largest:,} nodes"
        + ("" if largest >= TARGET_NODES else f" (the targets are set for {TARGET_NODES:,}; a smaller run)")
        + ":",
        "",
        "| target | measured | result |",
        "|---|---:|---|",
    ]
    for target, measured, ok in checks(runs):
        lines.append(f"| {target} | {measured} | {'met' if ok else '**not met**'} |")
    return "\n".join(lines) + "\n"


def kept_section(text: str) -> str:
    """Section 6 of a report (from its heading to the end), or nothing."""
    at = text.find(HEADING)
    return "" if at < 0 else text[at:]


def splice(report: str, section: str) -> str:
    """``report`` with its section 6 replaced by ``section`` (added at the end when it has none). The
    sections after section 6 (their own ``## `` headings: section 7, written by hand from
    ``python -m bench.placement``) are kept after it."""
    at = report.find(HEADING)
    head = report if at < 0 else report[:at]
    after = -1 if at < 0 else report.find("\n## ", at + len(HEADING))
    tail = report[after + 1 :] if after >= 0 else ""
    if tail and tail.split("\n", 1)[0] in section:
        tail = ""  # the new section carries it already
    return head.rstrip("\n") + "\n\n" + section + ("\n" + tail if tail else "")
