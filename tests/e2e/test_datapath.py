"""End to end: the node datapath carries pods on every interface of a node, proven in an emulated VPC
whose router drops, as EC2's source/destination check does, every packet leaving through an interface
that does not own its source address.

The topology (``tests/e2e/vpc_nodes.py``): two nodes of three interfaces each, from the in-memory
cloud; the emulated VPC built from it; a fake API server whose ENIPools carry each node's pool and
interfaces as the controller writes them; per node the real ``eni-ipam-agent`` with the datapath on,
a private containerd driven over CRI and podman with its CNI backend, their network ``ptp`` with
``eni-ipam-cni`` on the node's agent.

* :func:`test_pods_on_every_interface_reach_everything_and_nothing_is_dropped`: on each node a podman
  container on the first address of each interface (``--ip``) and a containerd sandbox on the
  second (the only free address left on each: the CRI cannot ask for one); every pod and every node
  connects to the echo service of every pod, both nodes and the outside host. Each connection must
  come back, the far end seeing the pod's own address (the node's primary address for the outside
  host: SNAT), and the router must drop nothing.
* :func:`test_without_the_rules_the_cross_interface_cases_fail_and_the_check_drops`: the negative
  control. The agents are stopped (SIGSTOP) and their rules and SNAT table deleted, the pods, veths
  and tables left as they are: every connection that leaves a node from, or answers to, a pod of a
  secondary interface must fail, the outside host must see pods of the primary interface unSNATed,
  and the primary interfaces' drop counters must rise; what stays on a node must still pass. Once
  the agents run again they put back exactly what was deleted, and every connection passes again.
* :func:`test_ipv6_keeps_working_beside_the_datapath`: the datapath handles IPv4 pods; the design
  carries IPv6 (tables are per interface, not per family). With the datapath running, the nodes'
  IPv6 through the router's link-local address works on the interfaces it set up, from the route
  table it made for the interface, and it made no IPv6 rule or NAT.
* :func:`test_churn_leaves_exactly_what_the_held_addresses_need`: 200 pod starts and stops across
  both nodes and runtimes, each new pod probing a pod on the other node and the outside host, while
  the agents are SIGKILLed and restarted a second later, an interface is attached to n2 and one of
  n1's (with pods on it until the release handshake) detached. Afterwards each node's rules, routes
  and SNAT table must be exactly what the agent's held addresses need, and the router must have
  dropped nothing. :func:`test_soak` runs the same for minutes (``make soak``:
  ``bench/datapath_soak.py``).

Needs root, network namespaces, nftables, busybox-static, containerd, podman and
containernetworking-plugins (``make node-runtimes``); skips otherwise, saying which is missing.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import ipaddress
import json
import os
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from eni_ipam_testkit.vpc import OUTSIDE_IPV4
from tests.e2e.vpc_nodes import (
    NODES,
    PRIORITIES,
    PROTOCOL,
    RUN_NETNS,
    NodeHost,
    Pod,
    TryAgain,
    World,
    built,
    ipv6_of,
    probe,
    table_of,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

RUNTIMES = ("podman", "containerd")
CHURN_STARTS = 200
CHURN_WORKERS = 4
"""Pods started and stopped at once on each node."""
GROWN = 3
"""Secondary addresses added to each interface before the churn (two at first)."""
SOAK_SECONDS = "ENI_IPAM_DATAPATH_SOAK_SECONDS"
SOAK_REPORT = "ENI_IPAM_DATAPATH_SOAK_REPORT"
SOAK_SEED = "ENI_IPAM_DATAPATH_SOAK_SEED"


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    with built() as this:
        yield this


@pytest.fixture(scope="module")
def pods(world: World) -> list[Pod]:
    """On each node, a podman container on the first address of each interface and a containerd
    sandbox on the second; each runs the echo service."""
    started: list[Pod] = []
    for node in NODES:
        for iface in world.controller.interfaces(node):
            started.append(world.start(node, "podman", ip=iface.addresses[0], echo=True))
        for _ in world.controller.interfaces(node):
            started.append(world.start(node, "containerd", echo=True))
    for node in NODES:
        mine = [p for p in started if p.node == node]
        for runtime in RUNTIMES:
            covered = {where(world, p) for p in mine if p.runtime == runtime}
            assert covered == {0, 1, 2}, f"{node}: {runtime}'s pods are on devices {sorted(covered)}"
        held = world.nodes[node].allocations()
        for pod in mine:
            assert held.get(pod.address, {}).get("owner") == pod.owner, f"{pod}: the agent holds {held}"
    print("pods: " + ", ".join(f"{p} (device {where(world, p)})" for p in started))
    return started


def where(world: World, pod: Pod) -> int:
    """The device index of the interface that owns the pod's address."""
    iface = world.interface_of(pod.node, pod.address)
    assert iface is not None, f"{pod}: no interface of {pod.node} holds it"
    return iface.device_index


# --- the connection matrix ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class End:
    """A source or target of a probe: a pod, a node, or the outside host."""

    label: str
    address: str
    node: str = ""
    """The node it is on (empty: the outside host)."""
    device: int = -1
    """A pod's interface's device index (-1: no pod)."""
    netns: str = ""

    @property
    def pod(self) -> bool:
        return self.device >= 0

    @property
    def secondary(self) -> bool:
        return self.device > 0


def ends(world: World, pods: list[Pod]) -> tuple[list[End], list[End]]:
    """(sources, targets): every pod and node as sources; every pod, both nodes and the outside host
    as targets."""
    pod_ends = [
        End(
            f"{p.node}/{p.runtime} {p.address} (device {where(world, p)})",
            p.address,
            p.node,
            where(world, p),
            p.netns,
        )
        for p in pods
    ]
    node_ends = [
        End(
            f"node {n} {primary(world, n)}", primary(world, n), n, netns=str(RUN_NETNS / world.nodes[n].netns)
        )
        for n in NODES
    ]
    return [*pod_ends, *node_ends], [*pod_ends, *node_ends, End(f"outside {OUTSIDE_IPV4}", OUTSIDE_IPV4)]


def primary(world: World, node: str) -> str:
    return next(i.primary_ip for i in world.controller.interfaces(node) if i.device_index == 0)


def gateway_of(address: str) -> str:
    return str(ipaddress.ip_network(f"{address}/24", strict=False).network_address + 3)


def connections(world: World, pods: list[Pod], *, timeout: float) -> dict[tuple[End, End], str | None]:
    """Every source's connection to every target: what the target saw as its source, or None."""
    sources, targets = ends(world, pods)

    def from_source(source: End) -> dict[tuple[End, End], str | None]:
        wanted = [t for t in targets if t.address != source.address and not (not source.pod and not t.pod)]
        seen = probe(source.netns, [t.address for t in wanted], timeout=timeout)
        return {(source, t): seen[t.address] for t in wanted}

    found: dict[tuple[End, End], str | None] = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        for part in pool.map(from_source, sources):
            found.update(part)
    return found


Expect = Callable[[End, End], "set[str] | None"]
"""What the target may see as the source of a connection (None: the connection must fail)."""


def with_datapath(world: World) -> Expect:
    def expect(source: End, target: End) -> set[str] | None:
        if not source.pod:  # a node: its own pods see it as their gateway, the others its address
            return (
                {source.address, gateway_of(target.address)}
                if target.node == source.node
                else {source.address}
            )
        if not target.node:
            return {primary(world, source.node)}  # SNAT to the node's primary address
        return {source.address}

    return expect


def without_rules(world: World) -> Expect:
    """What passes with no ``from`` rule and no SNAT: a secondary interface's pod reaches nothing
    beyond its node, nothing beyond its node reaches it (the answer leaves through the primary
    interface), and the primary interface's pods reach the outside host unSNATed."""
    on = with_datapath(world)

    def expect(source: End, target: End) -> set[str] | None:
        leaves = source.node != target.node
        if leaves and (source.secondary or target.secondary):
            return None
        if source.pod and not target.node:
            return {source.address}
        return on(source, target)

    return expect


def mismatches(found: dict[tuple[End, End], str | None], expect: Expect) -> list[str]:
    out = []
    for (source, target), seen in sorted(
        found.items(), key=lambda item: (item[0][0].label, item[0][1].label)
    ):
        wanted = expect(source, target)
        if wanted is None and seen is not None:
            out.append(f"{source.label} -> {target.label}: reached (seen as {seen}), expected to fail")
        elif wanted is not None and seen is None:
            out.append(
                f"{source.label} -> {target.label}: unreachable, expected {' or '.join(sorted(wanted))}"
            )
        elif wanted is not None and seen not in wanted:
            out.append(
                f"{source.label} -> {target.label}: seen as {seen}, expected {' or '.join(sorted(wanted))}"
            )
    return out


def summary(found: dict[tuple[End, End], str | None]) -> str:
    kinds: Counter[str] = Counter()
    for (source, target), seen in found.items():
        what = "pod" if source.pod else "node"
        to = "outside" if not target.node else "pod" if target.pod else "node"
        scope = "" if not target.node else " same node" if source.node == target.node else " across nodes"
        kinds[f"{what}->{to}{scope} {'ok' if seen else 'failed'}"] += 1
    return ", ".join(f"{k}: {v}" for k, v in sorted(kinds.items()))


def changed(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: after.get(k, 0) - before.get(k, 0) for k in after if after.get(k, 0) != before.get(k, 0)}


def describe(world: World, drops: dict[str, int]) -> str:
    names = {i.id: f"{n} device {i.device_index}" for n in NODES for i in world.controller.interfaces(n)}
    return ", ".join(f"{names.get(k, k)} ({k}): {v}" for k, v in sorted(drops.items())) or "none"


# --- the tests ---------------------------------------------------------------------------------------


def test_pods_on_every_interface_reach_everything_and_nothing_is_dropped(
    world: World, pods: list[Pod]
) -> None:
    assert world.exact() == {}, "the datapath is not what the held addresses need"
    drops, outside = world.vpc.drops(), world.vpc.outside_sources()
    began = time.perf_counter()
    found = connections(world, pods, timeout=2.0)
    took = time.perf_counter() - began
    print(f"{len(found)} connections in {took:.1f}s: {summary(found)}")
    wrong = mismatches(found, with_datapath(world))
    assert not wrong, "with the datapath:\n" + "\n".join(wrong)
    rose = changed(drops, world.vpc.drops())
    assert not rose, f"the source/destination check dropped packets: {describe(world, rose)}"
    seen_outside = set(changed(outside, world.vpc.outside_sources()))
    assert seen_outside <= {primary(world, n) for n in NODES}, f"the outside host saw {sorted(seen_outside)}"


def test_without_the_rules_the_cross_interface_cases_fail_and_the_check_drops(
    world: World, pods: list[Pod]
) -> None:
    drops, outside = world.vpc.drops(), world.vpc.outside_sources()
    hosts = list(world.nodes.values())
    for host in hosts:
        host.pause_agent(True)
    try:
        for host in hosts:
            switch_off(host)
        found = connections(world, pods, timeout=1.0)
        print(f"without the rules: {summary(found)}")
        wrong = mismatches(found, without_rules(world))
        rose = changed(drops, world.vpc.drops())
        seen_outside = set(changed(outside, world.vpc.outside_sources()))
    finally:
        for host in hosts:
            host.pause_agent(False)
    assert not wrong, "without the rules (the negative control):\n" + "\n".join(wrong)
    primaries = {i.id for n in NODES for i in world.controller.interfaces(n) if i.device_index == 0}
    assert set(rose) == primaries and all(v > 0 for v in rose.values()), (
        "without the rules the check must drop on the primary interfaces only; "
        f"it dropped: {describe(world, rose)}"
    )
    unsnat = {p.address for p in pods if where(world, p) == 0}
    assert unsnat <= seen_outside, (
        f"the outside host saw {sorted(seen_outside)}: the primary's pods were SNATed"
    )
    print(f"dropped by the check without the rules: {describe(world, rose)}")

    assert world.exact() == {}, "the agents did not put back what was deleted"
    drops = world.vpc.drops()
    again = connections(world, pods, timeout=2.0)
    wrong = mismatches(again, with_datapath(world))
    assert not wrong, "after the agents put the rules back:\n" + "\n".join(wrong)
    assert not changed(drops, world.vpc.drops()), describe(world, changed(drops, world.vpc.drops()))


def switch_off(host: NodeHost) -> None:
    """Delete the agent's rules (protocol 234) and SNAT table: what the node would hold without them."""
    lines = []
    for rule in host.ip_json("-4", "rule", "show"):
        if str(rule.get("protocol")) != PROTOCOL:
            continue
        if rule.get("fwmark"):
            selector = f"fwmark {rule['fwmark']}/{rule.get('fwmask', rule['fwmark'])}"
        elif rule.get("src", "all") != "all":
            selector = f"from {rule['src']}"
        else:
            selector = f"to {rule['dst']}"
        lines.append(f"rule del priority {rule['priority']} {selector} table {rule['table']}")
    assert lines, f"{host.name}: no rule of the agent's to delete"
    host.ip_batch(lines)
    host.sh("nft", "delete", "table", "ip", "eni_ipam")
    left = [r for r in host.ip_json("-4", "rule", "show") if str(r.get("protocol")) == PROTOCOL]
    assert not left and not host.nft_table(), f"{host.name}: left {left}"


def test_ipv6_keeps_working_beside_the_datapath(world: World, pods: list[Pod]) -> None:
    """The datapath routes IPv4 pods; IPv6 comes later on the same design (a table per interface, a
    default route through the router's link-local address). With the datapath running: the devices
    it set up have their IPv6 link-local address; IPv6 configured by hand beside it reaches the other
    node through the primary interface, and through device 1 from that interface's own table once a
    rule sends its address there (without the rule, the packet leaves through the primary interface
    and the check drops it); the datapath made no IPv6 rule, route or NAT, and left what it did not
    make alone."""
    n1, n2 = world.nodes["n1"], world.nodes["n2"]
    eth1 = next(i for i in world.controller.interfaces("n1") if i.device_index == 1)
    device, table = world.vpc.device(eth1.id), table_of(eth1)
    source, target = ipv6_of(eth1.primary_ip), ipv6_of(primary(world, "n2"))
    hand: list[tuple[NodeHost, str]] = []

    def configure(host: NodeHost, line: str) -> None:
        host.ip_batch([line], family="-6")
        hand.append((host, line))

    try:
        for host in (n1, n2):
            eth0 = next(i for i in world.controller.interfaces(host.name) if i.device_index == 0)
            configure(host, f"addr add {ipv6_of(eth0.primary_ip)}/128 dev {world.vpc.device(eth0.id)} nodad")
            configure(host, f"route add default via fe80::1 dev {world.vpc.device(eth0.id)}")
        configure(n1, f"addr add {source}/128 dev {device} nodad")
        configure(n1, f"route add default via fe80::1 dev {device} table {table}")
        link_local = [
            a for link in n1.ip_json("-6", "addr", "show", "dev", device) for a in link["addr_info"]
            if a["local"].startswith("fe80:")
        ]  # fmt: skip
        assert link_local, f"n1's {device}, set up by the datapath, has no IPv6 link-local address"
        drops = world.vpc.drops()
        assert world.vpc.ping(n1.netns, target), "n1 -> n2 over IPv6, primary interfaces"
        assert not world.vpc.ping(n1.netns, target, source=source, timeout=0.5), (
            f"{source} of device 1 reached n2 through the primary interface: the check let it pass"
        )
        primary_id = next(i.id for i in world.controller.interfaces("n1") if i.device_index == 0)
        assert changed(drops, world.vpc.drops()) == {primary_id: 1}, describe(
            world, changed(drops, world.vpc.drops())
        )
        configure(n1, f"rule add from {source} lookup {table} priority {PRIORITIES['from']}")
        drops = world.vpc.drops()
        assert world.vpc.ping(n1.netns, target, source=source), (
            f"n1 -> n2 over IPv6 from device 1 ({device}), through its table {table}"
        )
        assert not changed(drops, world.vpc.drops()), describe(world, changed(drops, world.vpc.drops()))
        for host in (n1, n2):
            ours = [r for r in host.ip_json("-6", "rule", "show") if str(r.get("protocol")) == PROTOCOL]
            assert not ours, f"{host.name}: the datapath made IPv6 rules {ours}"
            tables = host.sh("nft", "list", "tables").stdout.split("\n")
            assert [t for t in tables if t.strip()] == ["table ip eni_ipam"], tables
        time.sleep(2.5)  # the agents reconcile every 2 s here: what they did not make stays
        assert world.exact() == {}, "the hand-made IPv6 configuration disturbed the datapath"
        kept = n1.ip_json("-6", "route", "show", "table", str(table))
        assert [r.get("gateway") for r in kept] == ["fe80::1"], f"table {table} lost its IPv6 route: {kept}"
    finally:
        for host, line in reversed(hand):
            host.ip_batch([line.replace(" add ", " del ", 1)], check=False, family="-6")


# --- churn -------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Tally:
    """What a churn did and found."""

    starts: Counter[str] = dataclasses.field(default_factory=Counter)
    """Pods started, by runtime."""
    stops: int = 0
    refused: Counter[str] = dataclasses.field(default_factory=Counter)
    """Starts and stops refused while an agent was down or its pool taken (tried again), by runtime."""
    probes: int = 0
    unreachable: list[str] = dataclasses.field(default_factory=list)
    """Probes of a new pod that failed or saw the wrong source."""
    kills: Counter[str] = dataclasses.field(default_factory=Counter)
    attached: list[str] = dataclasses.field(default_factory=list)
    detached: list[str] = dataclasses.field(default_factory=list)
    leaked: list[str] = dataclasses.field(default_factory=list)
    """Allocations no pod held at the end (a DEL lost while an agent was down), released afterwards."""
    wrong: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    """Stale or missing rules, routes and SNAT entries, by node (checked after every fault too)."""
    dropped: dict[str, int] = dataclasses.field(default_factory=dict)
    errors: list[str] = dataclasses.field(default_factory=list)
    seconds: float = 0.0
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock, repr=False)

    def figures(self) -> dict[str, Any]:
        return {
            "starts": dict(self.starts),
            "stops": self.stops,
            "refused": dict(self.refused),
            "probes": self.probes,
            "unreachable": len(self.unreachable),
            "kills": dict(self.kills),
            "attached": self.attached,
            "detached": self.detached,
            "leaked": len(self.leaked),
            "stale_or_missing": sum(len(v) for v in self.wrong.values()),
            "dropped": sum(self.dropped.values()),
            "errors": len(self.errors),
            "seconds": round(self.seconds, 1),
            "details": [
                *self.unreachable,
                *self.errors,
                *(f"{n}: {w}" for n, ws in self.wrong.items() for w in ws),
            ],
        }


class Churn:
    """Pods started and stopped on both nodes by workers, while faults are thrown at the nodes."""

    def __init__(self, world: World, anchors: dict[str, Pod], rng: random.Random, tally: Tally) -> None:
        self.world, self.anchors, self.rng, self.tally = world, anchors, rng, tally
        self.primaries = {node: primary(world, node) for node in NODES}
        """Each node's primary address, read once: the workers must not read the in-memory cloud,
        whose dictionaries the fault thread changes (a detach) while they would iterate them."""
        self.live: dict[str, Pod] = {}
        """Every pod a worker started and has not stopped, by owner."""
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.faults_done = threading.Event()

    # -- the workers --

    def started(self) -> int:
        return sum(self.tally.starts.values())

    def worker(self, node: str, index: int, limit: Callable[[], bool]) -> None:
        host = self.world.nodes[node]
        runtime = RUNTIMES[index % 2]
        while not self.stop.is_set() and not limit():
            pod = self.start(host, runtime)
            if pod is None:
                return
            self.check(pod)
            time.sleep(self.rng.uniform(0.0, 0.4))
            self.end(host, pod)
            runtime = RUNTIMES[(RUNTIMES.index(runtime) + 1) % 2]

    def start(self, host: NodeHost, runtime: str) -> Pod | None:
        deadline = time.perf_counter() + 90
        while not self.stop.is_set():
            try:
                pod = self.world.start(host.name, runtime)
            except TryAgain:
                with self.tally.lock:
                    self.tally.refused[runtime] += 1
                if time.perf_counter() > deadline:
                    self.fail(f"{host.name}/{runtime}: no start within 90 s")
                    return None
                time.sleep(0.3)
                continue
            with self.lock:
                self.live[pod.owner] = pod
            with self.tally.lock:
                self.tally.starts[runtime] += 1
            return pod
        return None

    def end(self, host: NodeHost, pod: Pod) -> None:
        """Stop the pod; a sandbox's stop is retried until it succeeds (as the kubelet does), a
        container's DEL is run once (podman never tries again)."""
        deadline = time.perf_counter() + 90
        while True:
            try:
                self.world.stop(pod)
                break
            except TryAgain:
                with self.tally.lock:
                    self.tally.refused[pod.runtime] += 1
                if time.perf_counter() > deadline:
                    self.fail(f"{pod}: not stopped within 90 s")
                    return
                time.sleep(0.3)
        with self.lock:
            self.live.pop(pod.owner, None)
        with self.tally.lock:
            self.tally.stops += 1

    def check(self, pod: Pod) -> None:
        """The new pod reaches the anchor pods of both nodes with its own address, and the outside
        host with its node's primary address."""
        expected = {a.address: pod.address for a in self.anchors.values()}
        expected[OUTSIDE_IPV4] = self.primaries[pod.node]
        seen = probe(pod.netns, list(expected), timeout=2.0)
        with self.tally.lock:
            self.tally.probes += len(expected)
            for target, wanted in expected.items():
                if seen.get(target) != wanted:
                    self.tally.unreachable.append(
                        f"{pod} -> {target}: saw {seen.get(target)}, expected {wanted}"
                    )

    def fail(self, what: str) -> None:
        with self.tally.lock:
            self.tally.errors.append(what)

    # -- the faults --

    def kill(self, node: str) -> None:
        """SIGKILL the agent; systemd starts it again a second later (RestartSec=1)."""
        host = self.world.nodes[node]
        host.kill_agent()
        time.sleep(1.0)
        host.start_agent()
        self.tally.kills[node] += 1
        self.verify(f"after {node}'s agent was killed")

    def attach(self, node: str, subnet: str, device_index: int) -> str:
        iface = self.world.controller.attach(node, subnet, device_index, 4)
        self.tally.attached.append(f"{iface.id} to {node} at device {device_index} ({subnet})")
        host = self.world.nodes[node]
        wait("the new interface's addresses in the pool", lambda: set(iface.addresses) <= pool_of(host), 30)
        self.verify(f"after {iface.id} was attached to {node}")
        return iface.id

    def detach(self, node: str, interface_id: str, *, holders: list[Pod] = ()) -> None:  # type: ignore[assignment]
        """The controller's release handshake, then the detach: every address of the interface marked
        for release (the agent hands none out again), the pods on it stopped (``holders``, and the
        workers' as they end), each answered ready-for-release; then detached in the cloud, in the
        emulated VPC and in the status. A leaked allocation (its DEL lost while the agent was down)
        is released as a retried DEL would (what the sweep does on a podman host)."""
        controller = self.world.controller
        (iface,) = [i for i in controller.interfaces(node) if i.id == interface_id]
        addresses = set(iface.addresses)
        controller.mark(node, addresses)
        for pod in holders:
            self.world.stop(pod)
        host = self.world.nodes[node]
        deadline = time.perf_counter() + 60
        suspects: dict[str, float] = {}
        while True:
            answers = controller.answers(node)
            if all(answers.get(a) == "ready-for-release" for a in addresses):
                break
            # An allocation no pod holds for 2 s (a start still in flight holds it for less).
            with contextlib.suppress(OSError, AssertionError):
                owners = {p.owner for p in self.world.pods}
                for address, allocation in host.allocations().items():
                    owner = allocation["owner"]
                    if address not in addresses or owner in owners:
                        continue
                    if time.perf_counter() - suspects.setdefault(owner, time.perf_counter()) > 2.0:
                        self.tally.leaked.append(f"{node} {address} ({owner})")
                        host.release(owner)
            assert time.perf_counter() < deadline, f"not ready for release within 60 s: {answers}"
            time.sleep(0.5)
        controller.detach(node, interface_id)
        self.tally.detached.append(f"{interface_id} from {node} (device {iface.device_index})")
        wait("the detached interface's addresses out of the pool", lambda: not addresses & pool_of(host), 30)
        self.verify(f"after {interface_id} was detached from {node}")

    def verify(self, when: str) -> None:
        """Every node's datapath exactly what its held addresses need (a few seconds allowed)."""
        wrong = self.world.exact(limit=10)
        for node, problems in wrong.items():
            self.tally.wrong.setdefault(node, []).extend(f"{when}: {p}" for p in problems)

    def leaks(self) -> dict[str, list[tuple[str, str]]]:
        """Allocations no running pod holds, by node: (address, owner)."""
        owners = {p.owner for p in self.world.pods}
        return {
            node: [
                (a, alloc["owner"]) for a, alloc in host.allocations().items() if alloc["owner"] not in owners
            ]
            for node, host in self.world.nodes.items()
        }


def pool_of(host: NodeHost) -> set[str]:
    from tests.e2e.vpc_nodes import unix_request

    code, body = unix_request(host.socket, "GET", "/v1/status", None)
    return set(body["pools"]["default"]["addresses"]) if code == 200 else set()


def wait(what: str, check: Callable[[], bool], limit: float) -> None:
    deadline = time.perf_counter() + limit
    while not check():
        assert time.perf_counter() < deadline, f"not within {limit:g}s: {what}"
        time.sleep(0.2)


def churn(
    world: World,
    pods: list[Pod],
    *,
    rng: random.Random,
    faults: Callable[[Churn], None],
    done: Callable[[Churn], bool],
) -> Tally:
    """Grow the pools, then run the workers until ``done``, ``faults`` throwing faults meanwhile;
    then stop every worker's pod, release leaks (counted) and check the datapath and the drops."""
    tally = Tally()
    controller = world.controller
    drops = world.vpc.drops()
    outside = world.vpc.outside_sources()
    for node in NODES:
        for iface in controller.interfaces(node):
            controller.assign(node, iface.device_index, GROWN)
    for node, host in world.nodes.items():
        everything = {a for i in controller.interfaces(node) for a in i.addresses}
        wait(f"{node}'s grown pool", lambda host=host, everything=everything: everything <= pool_of(host), 30)
    anchors = {
        node: next(p for p in pods if p.node == node and p.runtime == "podman" and where(world, p) == 1)
        for node in NODES
    }
    run = Churn(world, anchors, rng, tally)
    began = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(max_workers=2 * CHURN_WORKERS + 1) as pool:
        workers = [
            pool.submit(run.worker, node, index, lambda: done(run) and run.faults_done.is_set())
            for node in NODES
            for index in range(CHURN_WORKERS)
        ]
        thrower = pool.submit(faults, run)
        try:
            thrower.result()
        except BaseException as exc:
            run.fail(f"a fault failed: {exc!r}")
            run.stop.set()
        finally:
            run.faults_done.set()
        for future in workers:
            try:
                future.result()
            except BaseException as exc:
                run.fail(f"a worker failed: {exc!r}")
    tally.seconds = time.perf_counter() - began
    run.verify("after the churn, with the leaks")
    for node, found in run.leaks().items():
        for address, owner in found:
            tally.leaked.append(f"{node} {address} ({owner})")
            world.nodes[node].release(owner)
    run.verify("after the churn")
    tally.dropped = changed(drops, world.vpc.drops())
    seen_outside = set(changed(outside, world.vpc.outside_sources()))
    if not seen_outside <= {primary(world, n) for n in NODES}:
        tally.errors.append(f"the outside host saw {sorted(seen_outside)}: not SNATed")
    return tally


def report(world: World, tally: Tally) -> None:
    figures = tally.figures()
    print("churn: " + json.dumps({k: v for k, v in figures.items() if k != "details"}))
    problems = []
    if tally.wrong:
        problems.append(f"stale or missing entries: {json.dumps(tally.wrong, indent=1)}")
    if tally.dropped:
        problems.append(f"dropped by the source/destination check: {describe(world, tally.dropped)}")
    if tally.unreachable:
        problems.append(f"{len(tally.unreachable)} probes failed: " + "; ".join(tally.unreachable[:20]))
    if tally.errors:
        problems.append("errors: " + "; ".join(tally.errors))
    assert not problems, "\n".join(problems)


def test_churn_leaves_exactly_what_the_held_addresses_need(world: World, pods: list[Pod]) -> None:
    """200 pod starts and stops; at 20 %, 40 %, 60 % and 80 % of the starts an agent is killed (n1,
    n2, n1, n2); at 30 % an interface is attached to n2, at 50 % n1's device 2 detached."""
    schedule: list[tuple[float, Callable[[Churn], object]]] = [
        (0.2, lambda c: c.kill("n1")),
        (0.3, lambda c: c.attach("n2", "subnet-d", 3)),
        (0.4, lambda c: c.kill("n2")),
        (
            0.5,
            lambda c: c.detach(
                "n1", device("n1", 2), holders=[p for p in pods if p.node == "n1" and where(world, p) == 2]
            ),
        ),
        (0.6, lambda c: c.kill("n1")),
        (0.8, lambda c: c.kill("n2")),
    ]

    def device(node: str, index: int) -> str:
        return next(i.id for i in world.controller.interfaces(node) if i.device_index == index)

    def faults(c: Churn) -> None:
        for at, fault in schedule:
            while c.started() < at * CHURN_STARTS and not c.stop.is_set():
                time.sleep(0.05)
            fault(c)

    tally = churn(
        world, pods, rng=random.Random(44), faults=faults, done=lambda c: c.started() >= CHURN_STARTS
    )
    for pod in [p for p in pods if p.node == "n1" and p not in world.pods]:
        pods.remove(pod)  # stopped for the detach
    report(world, tally)
    assert sum(tally.starts.values()) >= CHURN_STARTS and tally.stops >= CHURN_STARTS
    assert set(tally.kills.elements()) == {"n1", "n2"} and tally.attached and tally.detached


@pytest.mark.timeout(float(os.environ.get(SOAK_SECONDS) or 0) + 900)
def test_soak(world: World, pods: list[Pod]) -> None:
    """``bench/datapath_soak.py`` (``make soak``): the churn for ``$ENI_IPAM_DATAPATH_SOAK_SECONDS``,
    a fault every few seconds in turn (n1's agent killed, an interface attached to a node, n2's agent
    killed, that interface detached again, to the other node next time), the datapath checked after
    each; the figures as JSON in ``$ENI_IPAM_DATAPATH_SOAK_REPORT``."""
    if not os.environ.get(SOAK_SECONDS):
        pytest.skip(f"the soak runs from bench/datapath_soak.py (make soak), which sets {SOAK_SECONDS}")
    seconds = float(os.environ[SOAK_SECONDS])
    rng = random.Random(int(os.environ.get(SOAK_SEED, "44")))
    began = time.perf_counter()

    def faults(c: Churn) -> None:
        round_ = 0
        while time.perf_counter() - began < seconds and not c.stop.is_set():
            node, other = ("n1", "n2") if round_ % 2 == 0 else ("n2", "n1")
            time.sleep(rng.uniform(2.0, 6.0))
            c.kill(node)
            time.sleep(rng.uniform(2.0, 6.0))
            attached = c.attach(node, "subnet-d", 3)
            time.sleep(rng.uniform(2.0, 6.0))
            c.kill(other)
            time.sleep(rng.uniform(2.0, 6.0))
            c.detach(node, attached)
            round_ += 1

    tally = churn(world, pods, rng=rng, faults=faults, done=lambda c: time.perf_counter() - began >= seconds)
    figures = tally.figures()
    if os.environ.get(SOAK_REPORT):
        Path(os.environ[SOAK_REPORT]).write_text(json.dumps(figures, indent=1))
    report(world, tally)
