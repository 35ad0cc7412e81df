"""A process's metrics on a registry of its own: :class:`MetricSet`, the families every process exports,
how a family is declared (namespace and registry filled in), read back and frozen for a scrape.

Invariants:

* Library code never touches prometheus_client's global registry: every :class:`MetricSet` owns
  one, so tests and several managers in one process never collide.
* A scrape writes the families in the order they were registered.
* :meth:`MetricSet.freeze` reads on the event loop, in one step, everything that reads the caller's
  state or must agree with the rest of the scrape (the collectors given to :meth:`MetricSet.register`,
  the unlabelled metrics); only labelled prometheus_client metrics, thread-safe and holding nothing
  of the caller's, are collected later, off the loop.
"""

from __future__ import annotations

import platform
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
)
from prometheus_client.registry import Collector

from eni_ipam import __version__
from eni_ipam.adapters.metrics.exposition import NAMESPACE, Frozen, _Families, render

# Every counter and histogram would also export a ``_created`` series (its creation time): a
# series per label set nobody reads, which the text format adds to every scrape. Off for the
# process (prometheus_client's switch is global; this process exports only its own metrics).
disable_created_metrics()  # type: ignore[no-untyped-call]
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120, 300)
_M = TypeVar("_M", Gauge, Counter, Histogram)


def _is(read: Callable[[], str], value: str) -> Callable[[], float]:
    """1.0 while ``read()`` says ``value``, else 0.0 (a gauge's function)."""
    return lambda: float(read() == value)


class MetricSet:
    """A registry of its own, the families every process exports, and reading back.

    ``process``: also export the process's CPU, memory and open files, the interpreter, and its
    garbage collector's passes (``process_*``, ``python_*``), on this registry rather than the
    global one. Off where the figures would not be this set's process (a simulation) or where two
    scrapes must read the same (tests)."""

    def __init__(self, *, process: bool = True) -> None:
        self.registry = CollectorRegistry()
        self._parts: list[tuple[Collector, bool]] = []
        """Every collector in registration order, and whether a scrape reads it off the loop."""
        if process:
            self.register(ProcessCollector(registry=None))
            self.register(PlatformCollector(registry=None))
            if platform.python_implementation() == "CPython":  # what its collector reads
                # It registers itself (it takes no "none"): only the scrape's list is left to fill.
                self._parts.append((GCCollector(registry=self.registry), False))
        self.build_info = self.gauge("build_info", "Always 1; the version running", ["version"])
        self.build_info.labels(version=__version__).set(1)
        # -- every Kubernetes client ----------------------------------------------------------------
        self.kube_requests = self.counter(
            "kube_requests", "Requests to the Kubernetes API by verb, resource and HTTP status code",
            ["verb", "resource", "code"],
        )  # fmt: skip
        self.kube_api_unhealthy = self.gauge(
            "kube_api_unhealthy",
            "1 while the Kubernetes API server has rejected this process's credentials "
            "(credentials_rejected) or not answered (unreachable) for longer than "
            "kubernetes.api_unhealthy_after, with no request getting through; by problem",
            ["problem"],
            functions=True,
        )
        self.informer_relists = self.counter(
            "informer_relists",
            "Full lists of a resource (start, and after the watch's version expired)",
            ["resource"],
        )
        self.informer_watch_restarts = self.counter(
            "informer_watch_restarts",
            "Watches restarted, by resource and reason (expired, throttled, dropped, error)",
            ["resource", "reason"],
        )
        # -- every listener -------------------------------------------------------------------------
        self.http_connections_refused = self.counter(
            "http_connections_refused",
            "Connections and requests the HTTP endpoint (/metrics, /healthz, /readyz) and the probe "
            "listener refused, by reason (connection_limit: over server.max_connections, answered 503; "
            "evicted: aborted to give its slot to a client holding fewer; read_timeout: a body not sent "
            "within server.read_timeout, answered 408; write_timeout: an answer not read within "
            "server.read_timeout, the connection aborted)",
            ["reason"],
        )
        self.accept_errors = self.counter(
            "accept_errors",
            "Connections the process could not accept on any of its listeners, by error (EMFILE: its "
            "open-file limit; ENFILE: the system's; ENOBUFS, ENOMEM: kernel memory)",
            ["error"],
        )

    def report_kube_api(self, problems: Sequence[str], unhealthy: Callable[[], str]) -> None:
        """Export ``kube_api_unhealthy`` for each of ``problems`` as ``unhealthy()`` (the problem
        that makes the process unhealthy, or "") says at each scrape."""
        for problem in problems:
            self.kube_api_unhealthy.labels(problem).set_function(_is(unhealthy, problem))

    # -- declaring families (namespace and registry filled in) ----------------------------------

    def gauge(
        self, name: str, documentation: str, labels: Sequence[str] = (), *, functions: bool = False
    ) -> Gauge:
        """``functions``: its children read the caller's state (``set_function``), so a scrape
        collects it on the event loop even when it has labels."""
        gauge = Gauge(name, documentation, labels, namespace=NAMESPACE, registry=None)
        return self._add(gauge, labels, on_loop=functions)

    def counter(self, name: str, documentation: str, labels: Sequence[str] = ()) -> Counter:
        return self._add(Counter(name, documentation, labels, namespace=NAMESPACE, registry=None), labels)

    def histogram(
        self,
        name: str,
        documentation: str,
        labels: Sequence[str] = (),
        buckets: Sequence[float] = DURATION_BUCKETS,
    ) -> Histogram:
        histogram = Histogram(
            name, documentation, labels, namespace=NAMESPACE, registry=None, buckets=buckets
        )
        return self._add(histogram, labels)

    def register(self, collector: Collector) -> None:
        """Add a collector of its own making; a scrape collects it on the event loop, so its
        ``collect`` must be cheap and return families that no longer change (copies)."""
        self.registry.register(collector)
        self._parts.append((collector, False))

    def _add(self, metric: _M, labels: Sequence[str], *, on_loop: bool = False) -> _M:
        # prometheus_client's labelled metrics are thread-safe and hold no function of the caller's
        # (only an unlabelled gauge, or one declared with functions, may), so a scrape collects them
        # off the loop.
        self.registry.register(metric)
        self._parts.append((metric, bool(labels) and not on_loop))
        return metric

    # -- reading back (simulator expectations, demo, tests) -------------------------------------

    def sample(self, name: str, labels: Mapping[str, str] | None = None) -> float | None:
        return self.registry.get_sample_value(name, dict(labels or {}))

    def samples(self, name: str) -> dict[tuple[tuple[str, str], ...], float]:
        """Every sample called ``name``: sorted label pairs → value."""
        return {
            tuple(sorted(s.labels.items())): s.value
            for family in self.registry.collect()
            for s in family.samples
            if s.name == name
        }

    # -- a scrape --------------------------------------------------------------------------------

    def freeze(self) -> Frozen:
        """One scrape's families, read on the event loop in one step where they must be: the
        collectors of this package (a copy of the per-node record, the running sums: consistent with
        each other) and the unlabelled metrics (a gauge's function reads the caller's state). The
        labelled prometheus_client metrics are left for :func:`render`, which may run in a thread.
        Costs a dict copy, never the rendering of the per-node samples."""
        return Frozen(
            tuple(
                metric if threaded else _Families(tuple(metric.collect())) for metric, threaded in self._parts
            )
        )

    def exposition(self) -> bytes:
        return render(self.freeze())
