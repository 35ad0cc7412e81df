"""A scrape: every family read on the event loop in one step, its text written off the loop.

:meth:`~eni_ipam.adapters.metrics.registry.MetricSet.freeze` reads every family in one step on the
event loop (the per-node families only copy a dict there) and :func:`render` writes the text from that
copy, which a thread may do: the loop never waits for the text of a large scrape.

Invariants:

* :func:`render` writes exactly what prometheus_client's ``generate_latest`` (or its OpenMetrics
  one) writes for the same families, the per-node families it writes from their rows included.
* A :class:`NodeSeries` keeps one tuple per node that has samples, and collecting it copies its dict
  and nothing else: the samples, or the text, are made from that copy later.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence

from prometheus_client import generate_latest
from prometheus_client.core import Metric
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString as _untyped_float_text

NAMESPACE = "eni_ipam"
"""The prefix of every name exported (``eni_ipam_…``)."""

_float_text: Callable[[float], str] = _untyped_float_text
"""A value as the text format writes it (prometheus_client's own function)."""


class _Families:
    """Families already collected (a collector that returns them)."""

    def __init__(self, families: tuple[Metric, ...]) -> None:
        self.families = families

    def collect(self) -> Iterable[Metric]:
        return self.families


class Frozen:
    """One scrape, as :meth:`~eni_ipam.adapters.metrics.registry.MetricSet.freeze` took it:
    collectors in registration order, each either already collected or safe to collect from any
    thread."""

    def __init__(self, parts: tuple[Collector, ...]) -> None:
        self.parts = parts

    def collect(self) -> Iterator[Metric]:
        for part in self.parts:
            yield from part.collect()


def render(frozen: Frozen, *, pause: float = 0.0, openmetrics: bool = False) -> bytes:
    """The text exposition of one frozen scrape, safe in another thread: exactly
    ``generate_latest`` of its families. Each family is collected, written and let go before the
    next, and the per-node ones are written straight from their rows, so a scrape leaves few
    objects for the garbage collector to chase (its pauses hold every thread).

    ``pause``: seconds to sleep between families and every :data:`ROWS_BETWEEN_PAUSES` nodes. In a
    thread, that hands the GIL to the event loop, which would otherwise wait up to the interpreter's
    switch interval (5 ms) each time it wakes while the text is being written.

    ``openmetrics``: the OpenMetrics text format instead (what a scraper asking for
    ``application/openmetrics-text`` gets): exactly prometheus_client's OpenMetrics
    ``generate_latest`` of the families, with its one ``# EOF`` at the end.
    """
    out: list[bytes] = []
    for part in frozen.parts:
        for family in part.collect():
            if openmetrics:
                chunk: bytes = openmetrics_latest(_Families((family,)))  # type: ignore[no-untyped-call]
                out.append(chunk.removesuffix(_EOF))
            elif isinstance(family, _NodeFamily):
                out.append(family.text(pause=pause))
            else:
                out.append(generate_latest(_Families((family,))))
            if pause:
                time.sleep(pause)
    if openmetrics:
        out.append(_EOF)
    return b"".join(out)


_EOF = b"# EOF\n"


ROWS_BETWEEN_PAUSES = 500
"""Nodes a per-node family writes between two pauses of :func:`render`."""

Row = tuple[float | None, ...]
"""One node's samples of a per-node family, by the family's label value (None: no sample)."""


class NodeSeries:
    """A per-node gauge family (``node_ips``, ``node_at_capacity``): node → one value per label
    value of its second label, as a tuple in a dict.

    prometheus_client's ``Gauge`` keeps an object, a lock and a label dict per label set, about
    3 KB a node for ``node_ips`` and ``node_at_capacity``; this keeps one tuple. It offers the part
    of ``Gauge``'s interface a test or a tool may use (``labels(...).set``, ``remove``, ``clear``);
    :class:`~eni_ipam.adapters.metrics.pools.PoolGauges` writes whole rows. Collecting copies the
    dict (one step, on the event loop); the text, or the samples when read back, are made from that
    copy later, off the loop in a scrape.
    """

    def __init__(self, name: str, documentation: str, label: str, values: Sequence[str]) -> None:
        if label <= "node":
            raise ValueError(f"{label!r} must sort after 'node' (the text writes labels in name order)")
        self.name = f"{NAMESPACE}_{name}"
        self.documentation = documentation
        self.label = label
        self.values = tuple(values)
        self._index = {value: n for n, value in enumerate(self.values)}
        self._rows: dict[str, Row] = {}

    def __len__(self) -> int:
        return len(self._rows)

    def __contains__(self, node: object) -> bool:
        return node in self._rows

    def put(self, node: str, row: Row) -> None:
        self._rows[node] = row

    def drop(self, node: str) -> None:
        self._rows.pop(node, None)

    # -- Gauge's interface -------------------------------------------------------------------------

    def labels(self, *, node: str, **label: str) -> _Sample:
        ((name, value),) = label.items()
        if name != self.label:
            raise ValueError(f"{self.name} has labels node and {self.label}, not {name}")
        return _Sample(self, node, self._index[value])

    def remove(self, node: str, value: str) -> None:
        """Drop one sample; KeyError when it does not exist (as ``Gauge.remove``)."""
        row = self._rows.get(node)
        n = self._index[value]
        if row is None or row[n] is None:
            raise KeyError((node, value))
        row = (*row[:n], None, *row[n + 1 :])
        if any(v is not None for v in row):
            self._rows[node] = row
        else:
            del self._rows[node]

    def clear(self) -> None:
        self._rows.clear()

    # -- a collector -------------------------------------------------------------------------------

    def describe(self) -> Iterator[Metric]:
        yield _NodeFamily(self, {})

    def collect(self) -> Iterator[Metric]:
        yield _NodeFamily(self, self._rows.copy())


class _Sample:
    """One sample of a :class:`NodeSeries`, as ``Gauge.labels`` returns it."""

    def __init__(self, series: NodeSeries, node: str, index: int) -> None:
        self._series, self._node, self._index = series, node, index

    def set(self, value: float) -> None:
        row = self._series._rows.get(self._node) or (None,) * len(self._series.values)
        self._series._rows[self._node] = (*row[: self._index], value, *row[self._index + 1 :])


class _NodeFamily(Metric):
    """A :class:`NodeSeries` as collected: its samples are made from the copy when first read."""

    def __init__(self, series: NodeSeries, rows: dict[str, Row]) -> None:
        super().__init__(series.name, series.documentation, "gauge")
        self._labelnames = ("node", series.label)
        self._values = series.values
        self._rows = rows
        self._made: list[Sample] | None = None

    @property
    def samples(self) -> list[Sample]:
        if self._made is None:
            name, label, values = self.name, self._labelnames[1], self._values
            self._made = [
                Sample(name, {"node": node, label: values[n]}, value)
                for node, row in self._rows.items()
                for n, value in enumerate(row)
                if value is not None
            ]
        return self._made

    @samples.setter
    def samples(self, samples: list[Sample]) -> None:
        # Metric.__init__ assigns an empty list before the rows are known: made when first read.
        self._made = samples if samples else None

    def text(self, *, pause: float = 0.0) -> bytes:
        """What ``generate_latest`` writes for this family, written from the rows: strings only,
        no sample objects (labels in name order: ``node`` comes first). ``pause``: as
        :func:`render`'s."""
        name, label, values = self.name, self._labelnames[1], self._values
        documentation = self.documentation.replace("\\", r"\\").replace("\n", r"\n")
        lines = [f"# HELP {name} {documentation}\n# TYPE {name} gauge\n"]
        for count, (node, row) in enumerate(self._rows.items(), start=1):
            prefix = f'{name}{{node="{_escape(node)}",{label}="'
            for n, value in enumerate(row):
                if value is not None:
                    lines.append(f'{prefix}{values[n]}"}} {_float_text(value)}\n')
            if pause and count % ROWS_BETWEEN_PAUSES == 0:
                time.sleep(pause)
        return "".join(lines).encode()


def _escape(value: str) -> str:
    """A label value as the text format writes it."""
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
