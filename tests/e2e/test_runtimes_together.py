"""End to end with every runtime of a node at once: ONE standalone ``eni-ipam agent`` (set up as
docs/node.md says, as in ``tests/e2e/test_node_runtimes.py``) serves podman (CNI), Docker (a macvlan
network with the libnetwork driver) and a private containerd (CRI, ``tests/e2e/test_containerd.py``)
from one pool of 30 addresses, while the faults a node meets are thrown at it:

1. the state file corrupted while all three runtimes hold addresses (then ``--ip`` of an address
   another runtime holds, and the pool filled nearly up);
2. libcni cache entries left behind by podman's failed DELs, then the state file lost;
3. quick restarts of the agent (SIGTERM and SIGKILL) while ~20 containers start across the runtimes;
4. a stopped agent (SIGSTOP): STATUS answers code 50 quickly, and after SIGCONT nothing was lost;
5. a Docker network removed while the agent is down: the same subnet can be created at once after.

After each, the invariants (:func:`check_invariants`), from each runtime's own view (``podman
inspect``, ``docker inspect``, CRI ``PodSandboxStatus``) against the agent's allocations
(``GET /v1/status``):

- no address is held by two containers, of any runtimes;
- none is lost: every running container's address is allocated to it in the agent;
- none leaks: after a sweep, every allocation is held by a running container (the Docker network's
  gateway is its subnet's router, outside the pool: the agent holds nothing of its own).

The fixtures (the agent, podman, dockerd, containerd, each relocated into a temporary directory) are
those of the two modules; only the pool is wider here. ``bench/runtimes_soak.py`` (``make soak``) runs
the same faults in random order for minutes through :func:`test_soak`, which is skipped otherwise.

Needs root, network namespaces, podman, docker.io, containerd, busybox-static and
containernetworking-plugins (``make node-runtimes``); each missing piece skips, saying why.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import json
import os
import random
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest
import yaml

from tests.e2e.test_containerd import Containerd, containerd
from tests.e2e.test_node_runtimes import (
    CNI_CACHE,
    DOCKER_RELEASE_RETRIES,
    SWEPT_WITHIN,
    Docker,
    Node,
    Podman,
    Runtime,
    docker,
    make_node,
    podman,
    require_netns_host,
    running_node,
    until,
)

__all__ = ["containerd", "docker", "podman"]  # the fixtures, imported to be used here

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

RANGE = "10.99.0.10-10.99.0.39"
"""30 addresses: enough for every runtime at once, few enough that a leak soon shows."""
SOAK_SECONDS = "ENI_IPAM_RUNTIMES_SOAK_SECONDS"
SOAK_REPORT = "ENI_IPAM_RUNTIMES_SOAK_REPORT"
SOAK_SEED = "ENI_IPAM_RUNTIMES_SOAK_SEED"
""":func:`test_soak` runs only when ``bench/runtimes_soak.py`` sets these: for how long, where to write
its figures (JSON), with which random seed."""
NAMES = ("podman", "docker", "containerd")


# --- the node: one agent, three runtimes ---------------------------------------------------------


@pytest.fixture(scope="module")
def node() -> Iterator[Node]:
    """The agent of docs/node.md (the Docker host's configuration, which is the podman host's plus its
    Docker keys; containerd's libcni cache is the default ``cni_cache_dir``), its pool 30 addresses."""
    require_netns_host("podman, dockerd, containerd and network namespaces need root")

    def make(root: Path) -> Node:
        this = make_node(root)
        this.config["pools"]["default"]["ranges"] = [RANGE]
        this.config_path.write_text(yaml.safe_dump(this.config))
        return this

    with running_node("eni-rt-", make, before_stop=resume) as this:
        yield this


@dataclass
class Runtimes:
    podman: Podman
    docker: Docker
    containerd: Containerd

    def by_name(self, name: str) -> Runtime:
        rt: Runtime = getattr(self, name)
        return rt

    def all(self) -> list[Runtime]:
        return [self.podman, self.docker, self.containerd]


def resume(node: Node) -> None:
    """SIGCONT, should a test have left the agent stopped."""
    if node.process is not None and node.process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(node.process.pid, signal.SIGCONT)


def reset(node: Node, rts: Runtimes) -> None:
    """No container in any runtime, the agent running, the Docker network there, nothing allocated."""
    resume(node)
    node.ensure_running()
    with concurrent.futures.ThreadPoolExecutor(max_workers=3) as pool:
        list(pool.map(lambda rt: rt.remove_all(), rts.all()))
    if not rts.docker.has_network():
        rts.docker.create_network()
    node.wait_clean()


@pytest.fixture
def together(node: Node, podman: Podman, docker: Docker, containerd: Containerd) -> Iterator[Runtimes]:
    rts = Runtimes(podman, docker, containerd)
    reset(node, rts)
    try:
        yield rts
    finally:
        resume(node)
        with contextlib.suppress(AssertionError):
            node.ensure_running()
        for rt in rts.all():
            rt.remove_all()


# --- starting containers across the runtimes ------------------------------------------------------


@dataclass
class Outcome:
    runtime: str
    id: str
    """The container's (the sandbox's) id; empty when the start failed."""
    error: str = ""
    ended: float = 0.0
    """When the start returned (``time.perf_counter()``)."""


def try_start(rts: Runtimes, name: str, ip: str | None = None) -> Outcome:
    rt = rts.by_name(name)
    if isinstance(rt, Containerd):
        try:
            return Outcome(name, rt.try_run(), ended=time.perf_counter())
        except grpc.RpcError as exc:
            return Outcome(name, "", str(exc.details()), time.perf_counter())
    done = rt.try_start(ip)
    if done.returncode == 0:
        return Outcome(name, done.stdout.strip(), ended=time.perf_counter())
    said = " | ".join(line for line in done.stderr.splitlines() if "level=warning" not in line)
    return Outcome(name, "", said.strip()[-1000:], time.perf_counter())


def start_across(rts: Runtimes, counts: dict[str, int], *, workers: int = 8) -> list[Outcome]:
    """Containers started at once (``workers`` at a time) in the runtimes, as many as ``counts`` says,
    in a shuffled order; every outcome."""
    plan = [name for name, n in counts.items() for _ in range(n)]
    random.shuffle(plan)
    if not plan:
        return []
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(workers, len(plan))) as pool:
        return list(pool.map(lambda name: try_start(rts, name), plan))


def started(outcomes: list[Outcome]) -> list[Outcome]:
    failed = [o for o in outcomes if not o.id]
    assert not failed, "starts failed: " + "; ".join(f"{o.runtime}: {o.error}" for o in failed)
    return outcomes


# --- the invariants -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Holder:
    runtime: str
    id: str
    address: str

    def owner_matches(self, owner: str) -> bool:
        if self.runtime == "docker":  # the network's pool owns it
            return owner.startswith("libnetwork:")
        return owner == f"cni:{self.id}:eth0"

    def __str__(self) -> str:
        return f"{self.runtime} {self.id[:12]}"


def inspected(rt: Runtime, network: str) -> list[Holder]:
    """podman's or Docker's own record of each running container's address on the network."""
    ids = sorted(rt.containers())
    if not ids:
        return []
    fmt = f'{{{{.Id}}}} {{{{with index .NetworkSettings.Networks "{network}"}}}}{{{{.IPAddress}}}}{{{{end}}}}'
    done = rt.cmd("inspect", "--format", fmt, *ids, timeout=60, check=False)
    out = []
    for line in done.stdout.splitlines():
        cid, _, address = line.strip().partition(" ")
        if address:
            out.append(Holder(rt.name, cid, address))
    return out


def holders(rts: Runtimes) -> list[Holder]:
    """Every address a container holds, as each runtime reports it."""
    out = inspected(rts.podman, rts.podman.network) + inspected(rts.docker, rts.docker.network)
    for sandbox_id in sorted(rts.containerd.containers(all_states=True)):
        with contextlib.suppress(grpc.RpcError):  # removed meanwhile
            status = rts.containerd.cri.pod_sandbox_status(sandbox_id)
            if status.ip:
                out.append(Holder("containerd", sandbox_id, status.ip))
    return out


@dataclass
class Findings:
    duplicates: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    leaks: list[str] = field(default_factory=list)
    held: int = 0
    allocated: int = 0

    def __bool__(self) -> bool:
        return bool(self.duplicates or self.lost or self.leaks)

    def __str__(self) -> str:
        parts = [f"{name}: {getattr(self, name)}" for name in ("duplicates", "lost", "leaks")]
        return f"{self.held} held by containers, {self.allocated} allocated; " + "; ".join(parts)


def look(node: Node, rts: Runtimes) -> Findings:
    """One comparison of the runtimes' views with the agent's allocations."""
    allocations = node.allocations()
    seen = holders(rts)
    by_address: dict[str, list[Holder]] = collections.defaultdict(list)
    for holder in seen:
        by_address[holder.address].append(holder)
    found = Findings(held=len(seen), allocated=len(allocations))
    for address, who in sorted(by_address.items()):
        if len(who) > 1:
            found.duplicates.append(f"{address} held by {', '.join(map(str, who))}")
    for holder in seen:
        owner = allocations.get(holder.address)
        if owner is None or not holder.owner_matches(owner):
            found.lost.append(f"{holder.address} of {holder} is allocated to {owner!r} in the agent")
    for address, owner in sorted(allocations.items()):
        if not any(h.owner_matches(owner) for h in by_address.get(address, [])):
            found.leaks.append(f"{address} ({owner}) held by no container")
    return found


def check_invariants(node: Node, rts: Runtimes) -> Findings:
    """The findings once a sweep has had its time (SWEPT_WITHIN) to release what no container holds:
    duplicates and lost addresses are final at once, leaks only if they outlast the sweep."""
    deadline = time.perf_counter() + SWEPT_WITHIN
    while True:
        found = look(node, rts)
        if found.duplicates or found.lost or not found.leaks or time.perf_counter() > deadline:
            return found
        time.sleep(0.5)


def assert_invariants(node: Node, rts: Runtimes, where: str) -> None:
    found = check_invariants(node, rts)
    print(f"{where}: {found}")
    assert not found, f"{where}: invariant broken: {found}"


# --- the faults -----------------------------------------------------------------------------------

Say = Callable[[str], None]
"""Where a fault reports what the runtimes saw (printed by the tests, counted by the soak)."""


def state_file(node: Node) -> Path:
    return Path(node.config["state_dir"]) / "allocations.json"


def corrupt_state_file(node: Node, rts: Runtimes, say: Say) -> None:
    """3 containers in each runtime; the state file overwritten with garbage while the agent is down;
    after its start, ``--ip`` of another runtime's address refused, and the pool filled nearly up."""
    first = started(start_across(rts, dict.fromkeys(NAMES, 3)))
    held = {h.address: h for h in holders(rts)}
    assert len(held) == len(first), f"{len(first)} started, {len(held)} addresses held: {held}"

    node.kill()
    state_file(node).write_bytes(b"{not json" + os.urandom(256))
    mark = node.log_size()
    node.start()
    events = [e.get("event") for e in node.events(mark)]
    assert "state_corrupt" in events, f"the agent did not see the corrupt state file: {events}"
    rebuilt = node.allocations()
    missing = {a: str(h) for a, h in held.items() if not h.owner_matches(rebuilt.get(a, ""))}
    assert not missing, f"not rebuilt after the corrupt state file: {missing} (agent: {rebuilt})"

    by_runtime = {name: [a for a, h in held.items() if h.runtime == name] for name in NAMES}
    refused = 0
    for name, other in (("podman", "docker"), ("podman", "containerd"), ("docker", "podman"),
                        ("docker", "containerd")):  # fmt: skip
        rt, address = rts.by_name(name), by_runtime[other][0]
        done = rt.try_start(ip=address)
        assert done.returncode != 0, f"{name} run --ip {address} succeeded, yet {other} holds it"
        assert rt.refusals["taken"] in done.stderr, done.stderr
        refused += 1
    say(f"{refused} runs with --ip of another runtime's address refused")

    free = len(node.pool()) - len(node.allocations())
    fill = max(0, free - 3)  # nearly full: 3 left
    counts = {name: fill // 3 + (1 if n < fill % 3 else 0) for n, name in enumerate(NAMES)}
    more = started(start_across(rts, counts))
    say(f"state file corrupted with {len(first)} held; then {len(more)} more started, {free - fill} left")


def stale_cache_entries(node: Node, rts: Runtimes, say: Say) -> None:
    """podman containers removed while the agent is down (their DEL fails, libcni keeps the entry,
    podman never retries), the state file lost: after the start and a sweep those addresses are free
    (the pool refills) and the entries gone."""
    outcomes = started(start_across(rts, {"podman": 5, "docker": 2, "containerd": 2}))
    leaked = [o.id for o in outcomes if o.runtime == "podman"][1:]

    node.kill()
    for cid in leaked:
        removed = rts.podman.remove(cid)
        assert removed.returncode == 0, removed.stderr
    entries = [CNI_CACHE / f"{rts.podman.network}-{cid}-eth0" for cid in leaked]
    kept = [e for e in entries if e.exists()]
    assert kept, "no DEL failed: podman left no cache entry behind"
    state_file(node).unlink()
    node.start()
    until(
        "no allocation held by no container; leaks:",
        lambda: not look(node, rts).leaks,
        SWEPT_WITHIN,
        seen=lambda: look(node, rts).leaks,
    )
    left = [e.name for e in kept if e.exists()]
    assert not left, f"stale libcni cache entries still there after a sweep: {left}"

    free = len(node.pool()) - len(node.allocations())
    counts = {name: free // 3 + (1 if n < free % 3 else 0) for n, name in enumerate(NAMES)}
    started(start_across(rts, counts))
    assert len(node.allocations()) == len(node.pool()), "the pool is not full again"
    say(f"{len(kept)} stale cache entries of {len(leaked)} removed containers; the pool refilled")


RESTARTS = 5
UP_BETWEEN = float(os.environ.get("ENI_IPAM_E2E_UP_BETWEEN", "0.2"))
"""Seconds the agent serves between two restarts of the burst (as ``systemctl restart`` in a loop)."""
BURST = {"podman": 7, "docker": 7, "containerd": 6}


def restart_burst(node: Node, rts: Runtimes, say: Say) -> None:
    """The agent restarted 5 times in quick succession (SIGTERM and SIGKILL in turn, started again at
    once as systemd does) while 20 containers start across the runtimes: podman's and containerd's
    starts all succeed (the plugin retries for ~2 s); what Docker saw is reported: dockerd retries a
    driver call that met the closed socket, but with an empty body (moby/moby#39331), which the agent
    can only refuse, so such a start may fail. It is started again, and counted."""
    plan = [name for name, n in BURST.items() for _ in range(n)]
    random.shuffle(plan)
    restarts: list[str] = []
    zero = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(plan)) as pool:
        futures = [pool.submit(try_start, rts, name) for name in plan]
        until("a first address of the burst", node.allocations, 60, poll=0.05)
        for n in range(RESTARTS):
            began = time.perf_counter()
            if n % 2:
                node.kill()
            else:
                node.stop()
            node.start()
            signal_name = "SIGKILL" if n % 2 else "SIGTERM"
            restarts.append(
                f"{signal_name} at {began - zero:.1f}s, serving at {time.perf_counter() - zero:.1f}s"
            )
            time.sleep(UP_BETWEEN)
        in_flight = sum(not f.done() for f in futures)
        outcomes = [f.result() for f in futures]
    failed = collections.Counter(o.runtime for o in outcomes if not o.id)
    say(
        f"restarts (down to serving): {', '.join(restarts)}; {in_flight} starts still in flight after "
        f"the last; failed: {dict(failed) or 'none'}"
    )
    for o in outcomes:
        if not o.id:
            say(f"{o.runtime} start failed at {o.ended - zero:.1f}s: {o.error}")
    if failed["docker"]:
        again = start_across(rts, {"docker": failed["docker"]})
        say(f"docker: {sum(bool(o.id) for o in again)} of {failed['docker']} failed starts succeeded again")
    hard = {name: n for name, n in failed.items() if name != "docker"}
    # Found so: a SIGTERM closes the agent's listener with requests queued or unread, which the plugin
    # (retrying connections only) reports as "not reachable": a reset, or an answer ending in its head.
    assert not hard, f"starts failed across the restarts: {hard}"


STATUS_WITHIN = 2.0


def plugin_status(node: Node, rts: Runtimes) -> tuple[int, dict[str, object], float]:
    """The plugin run as a runtime runs STATUS (cniVersion 1.1.0): exit code, answer, seconds."""
    conflist = json.loads((Path(node.root) / "podman" / "net.d" / "10-eni.conflist").read_text())
    conf = {**conflist["plugins"][0], "cniVersion": "1.1.0", "name": conflist["name"]}
    env = {**os.environ, "CNI_COMMAND": "STATUS", "CNI_PATH": str(node.plugin_dir)}
    began = time.perf_counter()
    done = subprocess.run(
        [str(node.plugin_dir / "eni-ipam-cni")], input=json.dumps(conf), capture_output=True,
        text=True, env=env, timeout=30,
    )  # fmt: skip
    took = time.perf_counter() - began
    answer = json.loads(done.stdout) if done.stdout.strip() else {}
    return done.returncode, answer, took


def stopped_agent(node: Node, rts: Runtimes, say: Say) -> None:
    """SIGSTOP: STATUS answers code 50 within ~2 s; after SIGCONT nothing was lost and starts work."""
    started(start_across(rts, dict.fromkeys(NAMES, 2)))
    code, answer, took = plugin_status(node, rts)
    assert code == 0, f"STATUS of a running agent: {code} {answer}"
    before = node.allocations()
    assert node.process is not None
    os.kill(node.process.pid, signal.SIGSTOP)
    try:
        code, answer, took = plugin_status(node, rts)
    finally:
        os.kill(node.process.pid, signal.SIGCONT)
    say(f"STATUS of the stopped agent: exit {code}, {answer} in {took:.2f}s")
    assert code != 0 and answer.get("code") == 50, f"STATUS of a stopped agent: {code} {answer}"
    assert took <= STATUS_WITHIN, f"STATUS took {took:.2f}s"
    after = node.allocations()
    assert after == before, f"allocations changed across SIGSTOP/SIGCONT: {before} -> {after}"
    started(start_across(rts, dict.fromkeys(NAMES, 1)))


def network_removed_while_down(node: Node, rts: Runtimes, say: Say) -> None:
    """``docker network rm`` while the agent is stopped (podman and containerd keep containers
    running); after its start, ``docker network create`` on the same subnet succeeds at once."""
    started(start_across(rts, {"podman": 2, "containerd": 2, "docker": 1}))
    for cid in rts.docker.containers(all_states=True):
        rts.docker.remove(cid)
    until(
        "the Docker container's address released",
        lambda: not any(o.startswith("libnetwork:") for o in node.allocations().values()),
        SWEPT_WITHIN,
    )
    node.stop()
    began = time.perf_counter()
    rts.docker.cmd("network", "rm", rts.docker.network, timeout=DOCKER_RELEASE_RETRIES)
    removed_in = time.perf_counter() - began
    node.start()
    created = rts.docker.cmd(*rts.docker.create_args, timeout=60, check=False)
    assert created.returncode == 0, f"docker network create right after the start: {created.stderr.strip()}"
    started(start_across(rts, {"docker": 2}))
    say(f"network removed while the agent was down ({removed_in:.1f}s); created again at once")


FAULTS: dict[str, Callable[[Node, Runtimes, Say], None]] = {
    "corrupt state file": corrupt_state_file,
    "stale libcni cache entries": stale_cache_entries,
    "restart burst": restart_burst,
    "stopped agent (SIGSTOP)": stopped_agent,
    "network removed while down": network_removed_while_down,
}


# --- the tests ------------------------------------------------------------------------------------


def test_a_corrupt_state_file_hands_out_no_address_twice_across_runtimes(
    node: Node, together: Runtimes
) -> None:
    corrupt_state_file(node, together, print)
    assert_invariants(node, together, "after the corrupt state file")


def test_stale_cache_entries_of_failed_dels_are_swept_and_the_pool_refills(
    node: Node, together: Runtimes
) -> None:
    stale_cache_entries(node, together, print)
    assert_invariants(node, together, "after the stale cache entries")


def test_quick_restarts_during_starts_fail_no_cni_start_and_duplicate_nothing(
    node: Node, together: Runtimes
) -> None:
    """A start refused across the restarts fails this test, but only after the invariants are checked:
    both stay visible."""
    try:
        restart_burst(node, together, print)
    finally:
        assert_invariants(node, together, "after the restart burst")


def test_a_stopped_agent_answers_status_50_quickly_and_loses_nothing(node: Node, together: Runtimes) -> None:
    stopped_agent(node, together, print)
    assert_invariants(node, together, "after SIGSTOP and SIGCONT")


def test_a_network_removed_while_the_agent_was_down_can_be_created_again_at_once(
    node: Node, together: Runtimes
) -> None:
    network_removed_while_down(node, together, print)
    assert_invariants(node, together, "after the network's removal")


@dataclass
class SoakTally:
    rounds: collections.Counter[str] = field(default_factory=collections.Counter)
    duplicates: collections.Counter[str] = field(default_factory=collections.Counter)
    leaks: collections.Counter[str] = field(default_factory=collections.Counter)
    lost: collections.Counter[str] = field(default_factory=collections.Counter)
    failed: collections.Counter[str] = field(default_factory=collections.Counter)
    """Rounds whose fault broke an expectation of its own (a start refused, STATUS too slow...)."""
    details: list[str] = field(default_factory=list)
    notes: collections.Counter[str] = field(default_factory=collections.Counter)


@pytest.mark.timeout(float(os.environ.get(SOAK_SECONDS) or 0) + 600)
def test_soak(node: Node, together: Runtimes) -> None:
    """``bench/runtimes_soak.py``: the faults in random order for ``$ENI_IPAM_RUNTIMES_SOAK_SECONDS``,
    the invariants after each; the figures as JSON in ``$ENI_IPAM_RUNTIMES_SOAK_REPORT``."""
    if not os.environ.get(SOAK_SECONDS):
        pytest.skip(f"the soak runs from bench/runtimes_soak.py (make soak), which sets {SOAK_SECONDS}")
    seconds = float(os.environ[SOAK_SECONDS])
    faults = {**FAULTS, **trust_faults()}
    rng = random.Random(int(os.environ.get(SOAK_SEED, "7")))
    random.seed(rng.random())
    tally = SoakTally()
    began = time.perf_counter()
    order: list[str] = []
    while time.perf_counter() - began < seconds:
        if not order:
            order = list(faults)
            rng.shuffle(order)
        name = order.pop()
        n = tally.rounds[name] + 1
        tally.rounds[name] = n
        print(f"[{time.perf_counter() - began:5.0f}s] round: {name} #{n}")
        try:
            reset(node, together)
            faults[name](node, together, lambda text, name=name: note(tally, name, text))
        except AssertionError as exc:
            tally.failed[name] += 1
            tally.details.append(f"{name} #{n}: {str(exc)[-1500:]}")
            print(f"  FAILED: {exc}")
        found = check_invariants(node, together)
        print(f"  {found}")
        for kind in ("duplicates", "leaks", "lost"):
            count = len(getattr(found, kind))
            getattr(tally, kind)[name] += count
            if count:
                tally.details.append(f"{name} #{n}: {kind}: {getattr(found, kind)}")
    report = {
        "seconds": time.perf_counter() - began,
        "rounds": dict(tally.rounds),
        "duplicates": dict(tally.duplicates),
        "leaks": dict(tally.leaks),
        "lost": dict(tally.lost),
        "failed": dict(tally.failed),
        "details": tally.details,
        "notes": dict(tally.notes),
        "pool": len(node.pool()),
    }
    if out := os.environ.get(SOAK_REPORT):
        Path(out).write_text(json.dumps(report, indent=2))
    broken = sum(tally.duplicates.values()) + sum(tally.leaks.values()) + sum(tally.lost.values())
    assert not broken and not tally.failed, "\n".join(tally.details)


def trust_faults() -> dict[str, Callable[[Node, Runtimes, Say], None]]:
    """The faults of what a start trusts (docs/decisions/0034), from tests/e2e/test_node_trust.py:
    imported when the soak runs, since that module imports this one's fixtures."""
    from tests.e2e.test_node_trust import TRUST_FAULTS

    return TRUST_FAULTS


def note(tally: SoakTally, fault: str, text: str) -> None:
    """What a fault saw, printed; failed starts counted by runtime."""
    print(f"  {text}")
    for name in NAMES:
        if text.startswith(f"{name} start failed"):
            tally.notes[f"{fault}: {name} start failed"] += 1
            if name != "docker":  # the round fails: say why
                tally.details.append(f"{fault} #{tally.rounds[fault]}: {text[:600]}")
