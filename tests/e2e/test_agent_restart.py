"""A restart of the agent is invisible to the runtimes: SIGKILL of the agent while 20 containers start
at once on a busy node, with podman (CNI, on a podman host) and with containerd (CRI, driven as the
kubelet drives it), the agent started again as the systemd unit starts it — ``RestartSec`` (read
from ``deploy/systemd/eni-ipam-agent.service``) after it died, with the unit's ``ExecStart`` and
``ExecStartPost``. Neither podman nor a single ``RunPodSandbox`` retries a failed ADD, so every
start must ride out the restart through the plugin's own retries (docs/node.md, "Agent restarts").
The node is kept busy meanwhile (:data:`bench.agent_restart.BUSY_PER_CORE` loops a core, each in a
scheduling group of its own, as the node's other services are each a cgroup of their own): on a
2-core host the restarted agent gets about a sixth of the CPU, and takes 3 to 4 s from the kill to
answering, as on the busy node the restarts were first seen failing on (1.9-4.1 s).

For each runtime: every one of the 20 starts succeeds, each container's address is the one the agent
lists for it, no address is held twice, and nothing is allocated that no container holds. The times
from the kill to the agent listening and answering again are printed: docs/node.md sizes the
plugin's retry window from such figures.

The agent, podman and containerd are those of ``tests/e2e/test_node_runtimes.py`` and
``tests/e2e/test_containerd.py`` (their fixtures and helpers), one agent for both with the podman
host's configuration (which is the containerd host's) and a pool of 24 addresses. Needs root, network
namespaces, podman, containerd, busybox-static and containernetworking-plugins (``make
node-runtimes``); each missing piece skips, saying why.
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
import yaml

from bench import load
from bench.agent_restart import BUSY_PER_CORE
from tests.e2e.test_containerd import Containerd, check_sandboxes, containerd
from tests.e2e.test_node_runtimes import (
    AGENT_CONFIG,
    PODMAN_SECTION,
    Node,
    Podman,
    Runtime,
    check_held,
    doc_file,
    fresh,
    podman,
    podman_fresh,
    relocated_node,
    require_netns_host,
    running_node,
    unit_service,
    until,
)

__all__ = ["containerd", "podman", "podman_fresh"]  # the fixtures, imported to be used here

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

RANGE = "10.99.0.10-10.99.0.33"
"""24 addresses: the 20 starts of a burst, and a few to spare."""
BURST = 20


def restart_delay() -> float:
    """The unit's ``RestartSec`` (seconds; systemd's default unit is seconds)."""
    return float(unit_service()["RestartSec"].removesuffix("s"))


def restart_as_the_unit(node: Node) -> tuple[float, float]:
    """SIGKILL the agent, then start it again as systemd does with ``Restart=always``: ``RestartSec``
    after it died, ExecStart, and ExecStartPost until it returns. Seconds from the kill to listening
    (ExecStartPost returned), and to answering a request."""
    began = time.perf_counter()
    node.kill()
    time.sleep(max(0.0, began + restart_delay() - time.perf_counter()))
    node.start(answering=False)
    listening = time.perf_counter() - began
    node.status()
    return listening, time.perf_counter() - began


@pytest.fixture(scope="module")
def node() -> Iterator[Node]:
    """The agent of the podman host (docs/node.md), its pool 24 addresses; skips where this host
    cannot run containers in network namespaces."""
    require_netns_host("podman, containerd and network namespaces need root")

    def make(root: Path) -> Node:
        documented = yaml.safe_load(doc_file(PODMAN_SECTION, AGENT_CONFIG))
        no_docker = root / "no-docker.sock"
        return relocated_node(root, documented, driver="", docker_api=no_docker, pool_range=RANGE)

    with running_node("eni-rs-", make) as this:
        yield this


@dataclass
class Burst:
    started: list[str]
    failed: list[str]
    in_flight: int
    """Starts not yet done when the agent was killed."""
    listening: float
    """Seconds from the kill to the agent listening again."""
    answering: float
    """Seconds from the kill to the agent answering again."""


def burst_across_a_restart(node: Node, start: Callable[[], str]) -> Burst:
    """BURST starts at once (``start`` returns the container's id, or raises with the runtime's
    error); SIGKILL of the agent once the first of them holds an address, restarted as the unit does."""
    started: list[str] = []
    failed: list[str] = []

    def one() -> None:
        try:
            started.append(start())
        except (AssertionError, grpc.RpcError) as exc:
            failed.append(str(exc.details()) if isinstance(exc, grpc.RpcError) else str(exc))

    busy = load.per_core(BUSY_PER_CORE)
    with load.loops(busy, running=True), concurrent.futures.ThreadPoolExecutor(max_workers=BURST) as pool:
        futures = [pool.submit(one) for _ in range(BURST)]
        until("a first address of the burst", node.allocations, 60, poll=0.02)
        in_flight = sum(not f.done() for f in futures)
        listening, answering = restart_as_the_unit(node)
        for future in futures:
            future.result()
    return Burst(started, failed, in_flight, listening, answering)


def check_burst(node: Node, rt: Runtime, burst: Burst, held: dict[str, str]) -> None:
    """Every start succeeded, with an address of its own that the agent lists for it, and the agent
    holds nothing else."""
    print(
        f"{rt.name}: agent killed with {burst.in_flight} of {BURST} starts in flight, listening again "
        f"{burst.listening:.2f}s and answering {burst.answering:.2f}s after the kill (RestartSec "
        f"{restart_delay():g}s); "
        f"{len(burst.started)} started, {len(burst.failed)} failed"
    )
    for error in burst.failed:
        print(f"  {rt.name} start failed: {error[-400:]}")
    assert burst.in_flight > 0, "the burst was over before the kill"
    assert not burst.failed, f"{len(burst.failed)} of {BURST} {rt.name} starts failed across the restart"
    assert len(set(held.values())) == BURST, f"an address handed out twice: {held}"
    until(
        "every allocation held by a live container; leaks:",
        lambda: not node.leaks(),
        10,
        seen=node.leaks,
    )


@pytest.fixture
def containerd_fresh(node: Node, containerd: Containerd) -> Iterator[Containerd]:
    yield from fresh(node, containerd)


def test_a_restart_during_20_podman_starts_fails_none(node: Node, podman_fresh: Podman) -> None:
    burst = burst_across_a_restart(node, podman_fresh.start)
    check_burst(node, podman_fresh, burst, check_held(node, podman_fresh, burst.started))


def test_a_restart_during_20_cri_sandbox_starts_fails_none(node: Node, containerd_fresh: Containerd) -> None:
    """One RunPodSandbox per pod, not retried: the kubelet would retry a failed one with a new
    sandbox, after a back-off the pod's start then takes."""
    burst = burst_across_a_restart(node, containerd_fresh.try_run)
    check_burst(node, containerd_fresh, burst, check_sandboxes(node, containerd_fresh, burst.started))
