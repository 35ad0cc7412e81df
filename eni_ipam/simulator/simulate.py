"""``eni-ipam simulate``: run the real NodeManager against the in-memory cloud on virtual time.

The reconciler, planner, rate limiter and metrics are the production ones; only the cloud (the
emulator of the scenario's section, :mod:`eni_ipam.simulator.emulation`), the node source
(:class:`~eni_ipam.store.memory.MemoryStore`) and the node side
(:class:`~eni_ipam.simulator.simnode.SimulatedNodeSide`) are simulated. Steps run in order; the
first failing ``expect`` ends the run with a readable diff. After every step the exported metrics
must agree with themselves (cluster totals = sums of the per-node series), or the step fails.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
from collections.abc import Callable, Mapping
from typing import Any

from eni_ipam.adapters.metrics.controller import Metrics
from eni_ipam.adapters.metrics.selection import NodeSeriesPolicy
from eni_ipam.config.suggest import did_you_mean
from eni_ipam.core.clock import LoopClock
from eni_ipam.core.model import Interface
from eni_ipam.core.spec import NodeResource
from eni_ipam.simulator.cluster import EmbeddedCluster
from eni_ipam.simulator.emulation import emulator
from eni_ipam.simulator.scenario import NODE_SPEC_KEYS, Scenario, Step, parse_sample, slot_name
from eni_ipam.simulator.series import LabelClash, Recording, SeriesOptions, SeriesRecorder
from eni_ipam.simulator.simloop import run_virtual
from eni_ipam.store.memory import MemoryStore

CONVERGE_TICK = 0.01
"""Virtual seconds between two "is every node done?" checks while converging."""


READS = ("Describe", "Resync")
"""Operations that only read: a step's ``changes`` leave them out (the plot draws the others)."""


@dataclasses.dataclass
class StepResult:
    index: int
    kind: str
    time: float
    failures: list[str]
    state: dict[str, Any]
    start: float | None = None
    """When the step began (its ``time`` is when it ended); None: the same instant."""
    changes: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    """The drawn figures at each instant inside the step at which one of them changed
    (:meth:`Simulation.figures`), oldest first."""

    def record(self) -> dict[str, Any]:
        """What ``--json`` prints for the step, and what ``--plot`` draws: ``time`` when it ended,
        ``start`` when it began, ``changes`` what moved in between and when."""
        return {
            "step": self.index,
            "kind": self.kind,
            "start": self.time if self.start is None else self.start,
            "time": self.time,
            "failures": list(self.failures),
            "changes": list(self.changes),
            **self.state,
        }


class Trace:
    """The drawn figures (:meth:`Simulation.figures`) each time a node's status is published while a
    step lets time pass: once per instant, after every status of that instant, and only when one of
    them changed. It only reads, from a callback queued on the loop, so the run is the same with or
    without it."""

    def __init__(self, simulation: Simulation) -> None:
        self._simulation = simulation
        self._active = False
        self._queued = False
        self._last: dict[str, Any] = {}
        self.samples: list[dict[str, Any]] = []

    def begin(self) -> None:
        self._active, self.samples = True, []
        self._last = self._simulation.figures()

    def end(self, now: float) -> list[dict[str, Any]]:
        """The samples of the step that ended at ``now`` (its end is the step's own record)."""
        self._active = False
        return [s for s in self.samples if s["time"] < now]

    def on_status(self, name: str, status: object) -> None:
        if self._active and not self._queued:
            self._queued = True
            asyncio.get_running_loop().call_soon(self._take)

    def _take(self) -> None:
        self._queued = False
        if not self._active:
            return
        figures = self._simulation.figures()
        if figures == self._last:
            return
        self._last = figures
        sample = {"time": self._simulation.now(), **figures}
        if self.samples and self.samples[-1]["time"] == sample["time"]:
            self.samples[-1] = sample
        else:
            self.samples.append(sample)


@dataclasses.dataclass
class Outcome:
    results: list[StepResult]
    series: Recording | None = None
    """The exported series scrape by scrape, when the run recorded them (up to its end, or to the
    failed expectation that ended it)."""

    @property
    def passed(self) -> bool:
        return all(not r.failures for r in self.results)


class Simulation:
    """One scenario's world: cloud, store, node side and the reconciler; ``series``: also record
    the exported metric series (:mod:`eni_ipam.simulator.series`)."""

    def __init__(self, scenario: Scenario, *, series: SeriesOptions | None = None) -> None:
        self.scenario = scenario
        self.clock = LoopClock(measure_cpu=False)
        # No process collectors: the figures (CPU, memory, open files) would be this Python
        # process's, read from the OS, not the simulated controller's on virtual time.
        self.metrics = Metrics(node_series=NodeSeriesPolicy.of(scenario.settings), process=False)
        self.store = MemoryStore()
        self.world = emulator(scenario.section).open(
            scenario.declaration,
            clock=self.clock,
            metrics=self.metrics,
            records=self.store,
            path=scenario.section,
        )
        self.provider = self.world.provider
        self.cluster = EmbeddedCluster(
            self.provider,
            settings=scenario.settings,
            metrics=self.metrics,
            clock=self.clock,
            rng=random.Random(scenario.seed),
            store=self.store,
        )
        self.node_side = self.cluster.side
        self.manager = self.cluster.manager
        self.started = 0.0
        self.recorder = (
            SeriesRecorder(self.metrics, interval=series.interval, labels=series.labels) if series else None
        )

    def add(self, entry: NodeResource) -> None:
        self.node_side.add(entry)

    async def run(self, on_step: Callable[[StepResult], None] | None = None) -> Outcome:
        self.started = self.clock.monotonic()
        for entry in self.scenario.nodes:
            self.add(entry)
        trace = Trace(self)
        self.store.observe(trace.on_status)
        results: list[StepResult] = []
        try:
            async with asyncio.TaskGroup() as tg:
                recording = None
                if self.recorder:
                    # Scrape 0 is the run as it starts (nodes declared, the reconciler not started);
                    # the task takes the later ones on the virtual clock.
                    self.recorder.scrape_until(0.0)
                    recording = tg.create_task(
                        self.recorder.run(self.clock, origin=self.started), name="eni-ipam-series"
                    )
                task = tg.create_task(self.manager.run(), name="eni-ipam-manager")
                try:
                    for n, step in enumerate(self.scenario.steps):
                        start = self.now()
                        trace.begin()
                        failures = await self.execute(step)
                        # The exported cluster totals agree with the per-node series after every step.
                        failures += [f"{step.path}: metrics: {p}" for p in self.metrics.totals_problems()]
                        end = self.now()
                        changes = trace.end(end)
                        result = StepResult(n, step.kind, end, failures, self.state(), start, changes)
                        results.append(result)
                        if on_step:
                            on_step(result)
                        if failures:
                            break
                    if self.recorder:
                        # A scrape due at the very end may not have run yet (its timer and the last
                        # step's fire at the same instant): taken now, so the last scrape is the last
                        # multiple of the interval up to the end, whichever fired first.
                        self.recorder.scrape_until(self.clock.monotonic() - self.started)
                finally:
                    task.cancel()
                    if recording:
                        recording.cancel()
        except* LabelClash as clash:  # a bad option, not a failure of the run: raised as itself
            raise clash.exceptions[0] from None
        return Outcome(results, self.recorder.recording() if self.recorder else None)

    def now(self) -> float:
        return round(self.clock.monotonic() - self.started, 6)

    async def execute(self, step: Step) -> list[str]:
        if step.kind == "converge":
            deadline = self.clock.monotonic() + step.value
            await asyncio.sleep(0)
            while self.clock.monotonic() < deadline:
                await asyncio.sleep(CONVERGE_TICK)
                if not self.manager.busy():
                    break
        elif step.kind == "advance":
            await asyncio.sleep(step.value)
        elif step.kind == "set":
            for name, fields in step.value.items():
                self._set(name, fields)
        elif step.kind == "add_node":
            self.add(step.value)
        elif step.kind == "remove_node":
            self.store.remove(step.value)
        elif step.kind == "cloud":
            self.world.change(step.value)  # the reader refused a cloud step its emulator cannot apply
        elif step.kind == "expect":
            return self.check(step.value, step.path)
        return []

    def _set(self, name: str, fields: Mapping[str, Any]) -> None:
        spec = fields.get("spec")  # the spec after the step, resolved by the reader
        if spec is None:
            spec_changes = {k: v for k, v in fields.items() if k in NODE_SPEC_KEYS}
            old = self.store.resources[name].spec
            spec = old.replace(**spec_changes).fields() if spec_changes else None
        elif spec == self.store.resources[name].spec:
            spec = None
        self.node_side.update(
            name,
            spec=spec,
            used=fields.get("used"),
            pending_pods=fields.get("pending_pods"),
            agent=fields.get("agent"),
        )

    # -- observation --------------------------------------------------------------------------------

    def node_state(self, name: str) -> dict[str, Any]:
        resource = self.store.resources[name]
        status = self.store.statuses.get(name)
        node = self.manager.nodes.get(name)
        stats = node.stats if node else None
        view = self.world.instance_view(resource.instance_id)
        interfaces = view.interfaces if view else ()
        return {
            "available": stats.available if stats else 0,
            "used": resource.used,
            "needed": stats.needed if stats else 0,
            "excess": stats.excess if stats else 0,
            "interfaces": len(interfaces),
            "prefixes": sum(len(i.prefixes) for i in interfaces),
            "running": bool(stats.running) if stats else False,
            "addresses_by_index": {slot_key(i): i.pool_size for i in interfaces},
            "subnet_by_index": {slot_key(i): i.subnet_id for i in interfaces},
            "security_groups_by_index": {slot_key(i): sorted(i.security_groups) for i in interfaces},
            "release_ips": len(status.release) if status else 0,
            "ipv6_prefixes": sum(len(i.ipv6_prefixes) for i in interfaces),
            "message": status.message if status else "",
        }

    @property
    def calls(self) -> Mapping[str, int]:
        return self.world.calls

    def figures(self) -> dict[str, Any]:
        """What ``--plot`` draws, now: each node's ``available``, ``used`` and ``needed`` (as in
        :meth:`node_state`), the free addresses per subnet, the calls so far of each operation that
        is not a read (:data:`READS`) and the throttled requests by operation."""
        nodes = {}
        for name in sorted(self.store.resources):
            node = self.manager.nodes.get(name)
            stats = node.stats if node else None
            nodes[name] = {
                "available": stats.available if stats else 0,
                "used": self.store.resources[name].used,
                "needed": stats.needed if stats else 0,
            }
        return {
            "nodes": nodes,
            "subnets": self._by_label("eni_ipam_available_ips_per_subnet", "subnet"),
            "api_calls": {op: n for op, n in sorted(self.calls.items()) if not op.startswith(READS)},
            "throttles": self._by_label("eni_ipam_api_throttled_total", "operation"),
        }

    def state(self) -> dict[str, Any]:
        return {
            "nodes": {name: self.node_state(name) for name in sorted(self.store.resources)},
            "api_calls": dict(sorted(self.calls.items())),
            "subnets": self._by_label("eni_ipam_available_ips_per_subnet", "subnet"),
            "throttles": self._by_label("eni_ipam_api_throttled_total", "operation"),
        }

    def _by_label(self, name: str, label: str) -> dict[str, int]:
        """An exported metric's samples by one label's value: free addresses of the subnets the
        controller publishes, throttled requests by operation."""
        return dict(
            sorted((dict(labels)[label], int(value)) for labels, value in self.metrics.samples(name).items())
        )

    def check(self, expect: Mapping[str, Any], path: str) -> list[str]:
        failures: list[str] = []
        for key, wanted in expect.items():
            if key == "api_calls":
                for op, count in wanted.items():
                    got = self.calls.get(op, 0)
                    if got != count:
                        failures.append(f"{path}.api_calls.{op}: expected {count}, got {got}")
            elif key == "metrics":
                for sample, value in wanted.items():
                    name, labels = parse_sample(sample)
                    got_metric = self.metrics.sample(name, labels)
                    if value is None:
                        if got_metric is not None:
                            failures.append(
                                f"{path}.metrics.{sample}: expected no such series, got {got_metric}"
                            )
                    elif got_metric is None or abs(got_metric - value) > 1e-9:
                        failures.append(f"{path}.metrics.{sample}: expected {value}, got {got_metric}")
            else:
                state = self.node_state(key)
                before = len(failures)
                for field, value in wanted.items():
                    if field == "message_contains":
                        if value not in state["message"]:
                            failures.append(
                                f"{path}.{key}.message_contains: {value!r} is not in {state['message']!r}"
                            )
                        continue
                    got = state[field]
                    want = _normalise(field, value)
                    if _normalise(field, got) != want:
                        failures.append(f"{path}.{key}.{field}: expected {_show(want)}, got {_show(got)}")
                why = self.explain(key) if len(failures) > before else ""
                if why:
                    failures.append(f"{path}.{key}: why: {why}")
        return failures

    def explain(self, name: str) -> str:
        """Why node ``name``'s pool is what it is, when the reconciler knows a reason (empty
        otherwise): its capacity reason (:data:`~eni_ipam.core.observe.CAPACITY_REASONS`), the
        sentence its status says, and for an instance type of unknown limits — most often a
        misspelt one — the closest types the cloud knows."""
        node = self.manager.nodes.get(name)
        if node is None:
            return "the reconciler has no such node now (not added yet, or removed)"
        status = self.store.statuses.get(name)
        reason = node.capacity_limit()
        said = [reason] if reason else []
        if status is not None and status.message:
            said.append(status.message)
        if reason == "limits-unknown" and node.instance is not None:
            suggestion = did_you_mean(node.instance.type, self.world.instance_types())
            if suggestion:
                said.append(suggestion)
        return ": ".join(said[:2]) + "".join(f"; {more}" for more in said[2:])


def slot_key(interface: Interface) -> str:
    """How an expectation names an interface's slot: its device index on network card 0 (``"3"``),
    and ``"<card>/<index>"`` on another card (docs/scenarios.md, "expect"). Text either way, as JSON
    writes a key."""
    card = interface.network_card
    return f"{card}/{interface.device_index}" if card else str(interface.device_index)


def _normalise(field: str, value: Any) -> Any:
    if field == "security_groups_by_index":
        return {slot_name(k): sorted(v) if isinstance(v, list) else [v] for k, v in value.items()}
    if field.endswith("_by_index"):
        return {slot_name(k): v for k, v in value.items()}
    return value


def _show(value: Any) -> str:
    return json.dumps(value, sort_keys=True) if isinstance(value, dict | list) else repr(value)


def simulate(
    scenario: Scenario,
    *,
    on_step: Callable[[StepResult], None] | None = None,
    series: SeriesOptions | None = None,
) -> Outcome:
    """Run a scenario to its end (or first failed expectation) on a virtual clock; ``series``: also
    record the exported metric series (:attr:`Outcome.series`).

    Raises:
        LabelClash: a label of ``series`` is one a scraped metric has.
    """

    async def main() -> Outcome:
        return await Simulation(scenario, series=series).run(on_step)

    result: Outcome = run_virtual(main())
    return result
