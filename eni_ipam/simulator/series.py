"""The metric series of a simulation, as promtool's ``input_series``.

``eni-ipam simulate SCENARIO --series FILE`` records what a Prometheus scraping the simulated
controller would have stored: :class:`SeriesRecorder` reads every sample of the controller's registry
at each scrape, and a :class:`Recording` writes them in the form of a promtool unit test's
``input_series``, so an alert or a dashboard query can be tested against a simulated incident.

Invariants:

* Scrapes are taken at 0, ``interval``, 2·``interval``, … seconds after the run's start on its clock
  (the event loop's virtual time, never the OS clock), and only there: scrape ``k`` is promtool's
  sample at ``k × interval``, and the files of two runs with the same interval line up scrape for
  scrape. The interval is a whole number of milliseconds, as Prometheus durations are.
* A :class:`Recording` holds one value per scrape for every series: the sample's value, or None when
  that scrape did not have the series. Staleness is derived when writing, never stored (the first
  scrape without a series after one with it is ``stale``, the later ones ``_`` until it comes back;
  before its first sample ``_``), so a recording changed by :func:`merge`, :func:`hand_over` or a test
  cannot contradict itself.
* A series is its metric name and its labels in name order; the extra labels (``namespace``, ``job``,
  ``instance``: what Prometheus adds at scrape time) are added to every series and never replace a
  label the metric has: :class:`LabelClash` instead.
* A scrape only reads the registry: a run records the same steps, states and metrics with or without
  a recorder.
* Every value is written so that promtool reads it back exactly (integers as integers, other floats
  as their shortest repr, ``Inf``, ``-Inf``, ``NaN``), and only runs promtool expands exactly are
  written in its expanding notation.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import CollectorRegistry

from eni_ipam.adapters.metrics.registry import MetricSet
from eni_ipam.core.clock import Clock

DEFAULT_INTERVAL = 30.0
"""Seconds between two scrapes unless told: the chart's ServiceMonitor scrapes every 30 s."""

Value = float | None
"""One scrape's sample of a series: its value, or None when that scrape did not have the series."""

_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_SLACK_MS = 1e-3
"""How far (in milliseconds) a clock reading may fall short of a scrape's time and still take it:
the virtual clock adds up float steps, so it may read 29.999999999 for 30."""
_RUN = 3
"""The shortest run written in expanding notation (two values written out are as short)."""
_EXACT = 2.0**53
"""Integers below this are exact in a float64, and so are sums and differences that stay below it."""
_CREATED_TYPES = frozenset({"counter", "histogram", "summary", "gaugehistogram"})
"""The families whose ``_created`` sample is a creation time, not a value (not recorded)."""
_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}

__all__ = [
    "DEFAULT_INTERVAL",
    "LabelClash",
    "Recording",
    "SeriesKey",
    "SeriesOptions",
    "SeriesRecorder",
    "Value",
    "check_interval",
    "check_labels",
    "hand_over",
    "merge",
    "notation",
]


class LabelClash(ValueError):
    """An extra label names a label that a scraped series already has."""


# --- checks shared with the command line ---------------------------------------------------------


def check_interval(seconds: float) -> float:
    """``seconds`` if it is a scrape interval: positive, finite, a whole number of milliseconds.

    Raises:
        ValueError: it is not (the message says why).
    """
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"must be a positive number of seconds, got {seconds!r}")
    ms = seconds * 1000
    if abs(ms - round(ms)) > 1e-6:
        raise ValueError(f"must be a whole number of milliseconds (as Prometheus durations), got {seconds!r}")
    return seconds


def check_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """``labels`` as a dict if every one may be added to a series: a Prometheus label name not
    reserved to Prometheus (``__`` prefix), and a value that is not empty (Prometheus drops a label
    whose value is empty: the file would name a series promtool does not have).

    Raises:
        ValueError: one may not (the message names it).
    """
    for name, value in labels.items():
        if not _LABEL_NAME.fullmatch(name):
            raise ValueError(f"{name!r} is not a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*)")
        if name.startswith("__"):
            raise ValueError(f"{name!r}: label names starting with __ are reserved to Prometheus")
        if not isinstance(value, str) or not value:
            raise ValueError(f"{name!r}: the value must be a non-empty string, got {value!r}")
    return dict(labels)


# --- series and recordings -----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class SeriesKey:
    """One series: a metric name and its labels, in name order."""

    name: str
    labels: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, name: str, labels: Mapping[str, str] | None = None) -> SeriesKey:
        return cls(name, tuple(sorted((labels or {}).items())))

    @property
    def selector(self) -> str:
        """The series as promtool names it: ``name{a="x",b="y"}`` (label values escaped)."""
        if not self.labels:
            return self.name
        inner = ",".join(f'{name}="{_escape(value)}"' for name, value in self.labels)
        return f"{self.name}{{{inner}}}"

    def relabel(self, labels: Mapping[str, str]) -> SeriesKey:
        """This series with ``labels`` set: a label it has gets the new value, another is added."""
        return SeriesKey.of(self.name, {**dict(self.labels), **labels})

    def __str__(self) -> str:
        return self.selector


def _escape(value: str) -> str:
    """A label value inside a PromQL double-quoted string (Go's escapes): backslash, quote and line
    breaks escaped, any other control character as ``\\xNN``."""
    return "".join(
        _ESCAPES.get(ch) or (f"\\x{ord(ch):02x}" if ch < " " or ch == "\x7f" else ch) for ch in value
    )


@dataclasses.dataclass(frozen=True)
class Recording:
    """Series by scrape: ``series[key][k]`` is the series' value at scrape ``k`` (``k × interval``
    seconds after the start), None when that scrape did not have it. Every series has exactly
    ``scrapes`` values. Build a changed copy (``dataclasses.replace``, :func:`merge`,
    :func:`hand_over`) to write something else than what was recorded."""

    interval: float
    scrapes: int
    series: Mapping[SeriesKey, tuple[Value, ...]]

    def __post_init__(self) -> None:
        check_interval(self.interval)
        if self.scrapes < 0:
            raise ValueError(f"scrapes must not be negative, got {self.scrapes}")
        for key, values in self.series.items():
            if len(values) != self.scrapes:
                raise ValueError(f"{key.selector}: {len(values)} values for {self.scrapes} scrapes")

    @property
    def interval_ms(self) -> int:
        return round(self.interval * 1000)

    def time(self, index: int) -> float:
        """Seconds after the start of scrape ``index``."""
        return index * self.interval_ms / 1000

    def first_scrape_at(self, seconds: float) -> int:
        """The index of the first scrape at or after ``seconds`` (``scrapes`` when none is)."""
        index = math.ceil((seconds * 1000 - _SLACK_MS) / self.interval_ms)
        return min(max(index, 0), self.scrapes)

    def by_selector(self) -> dict[str, tuple[Value, ...]]:
        """Every series' values by its selector, in selector order."""
        return {key.selector: self.series[key] for key in _in_order(self.series)}

    def to_input_series(self) -> dict[str, Any]:
        """promtool's ``interval`` and ``input_series`` (series in selector order; one with no
        sample at all is left out: promtool has nothing to load)."""
        return {
            "interval": _duration_text(self.interval_ms),
            "input_series": [
                {"series": key.selector, "values": notation(self.series[key])}
                for key in _in_order(self.series)
                if any(value is not None for value in self.series[key])
            ],
        }

    def write(self, path: str | os.PathLike[str], *, source: str | None = None) -> None:
        """Write :meth:`to_input_series` as YAML, after a comment saying what it is (``source``:
        where the series come from, e.g. the scenario file)."""
        document = self.to_input_series()
        origin = f" of {source}" if source else ""
        header = (
            f"# promtool input_series: {len(document['input_series'])} metric series{origin}, "
            f"one value per scrape every {document['interval']} (eni-ipam simulate --series)\n"
        )
        # No line folding: one series and its values per line, as people grep them.
        text = yaml.safe_dump(document, sort_keys=False, allow_unicode=True, width=1 << 30)
        Path(path).write_text(header + text, encoding="utf-8")


def _in_order(keys: Iterable[SeriesKey]) -> list[SeriesKey]:
    return sorted(keys, key=lambda key: key.selector)


def _duration_text(ms: int) -> str:
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


# --- promtool's notation -------------------------------------------------------------------------


def notation(values: Sequence[Value]) -> str:
    """One series' values in promtool's notation, shortened by its expanding notation.

    ``_`` before the first sample; ``stale`` at the first scrape without the series after one with
    it, ``_`` after that until it comes back; nothing after the last ``stale`` (absent to the end
    says nothing more). A run of ``n + 1`` equal values ``v`` is ``v+0xn``, ``n`` absent ones ``_xn``;
    a run of integers with a constant integer step ``b`` is ``a+bxn`` (or ``a-bxn``): promtool
    expands exactly what integers below 2**53 add up to. Runs shorter than three are written out.
    """
    tokens: list[str] = []
    seen = False
    i, end = 0, len(values)
    while i < end:
        if values[i] is None:
            j = i
            while j < end and values[j] is None:
                j += 1
            missing = j - i
            if seen:
                tokens.append("stale")  # the scrape that no longer had the series
                missing -= 1
            if j < end and missing:
                tokens.append(" ".join("_" * missing) if missing < _RUN else f"_x{missing}")
            i = j
            continue
        seen = True
        length, token = _run(values, i)
        tokens.append(token)
        i += length
    return " ".join(tokens)


def _run(values: Sequence[Value], start: int) -> tuple[int, str]:
    """The run starting at ``start`` (``values[start]`` is a value): how many values it covers and
    its token."""
    first = values[start]
    assert first is not None  # the caller's
    equal = 1
    while start + equal < len(values) and _same(values[start + equal], first):
        equal += 1
    stepped, step = 1, 0.0
    second = values[start + 1] if start + 1 < len(values) else None
    if second is not None and _exact(first) and _exact(second) and _exact(second - first) and second != first:
        step, previous, stepped = second - first, second, 2
        while start + stepped < len(values):
            value = values[start + stepped]
            if value is None or not _exact(value) or value - previous != step:
                break
            previous, stepped = value, stepped + 1
    if max(equal, stepped) < _RUN:
        return 1, _number(first)
    if equal >= stepped:
        return equal, f"{_number(first)}+0x{equal - 1}"
    sign = "+" if step > 0 else "-"
    return stepped, f"{_number(first)}{sign}{_number(abs(step))}x{stepped - 1}"


def _same(value: Value, other: float) -> bool:
    if value is None:
        return False
    return value == other or (math.isnan(value) and math.isnan(other))


def _exact(value: float) -> bool:
    return math.isfinite(value) and float(value).is_integer() and abs(value) < _EXACT


def _number(value: float) -> str:
    """A value as promtool reads it back exactly: integers without ``.0``, other floats as their
    shortest repr (Go parses it to the same float64), infinities and NaN by promtool's names."""
    value = float(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Inf" if value > 0 else "-Inf"
    if value == 0:
        return "0"  # -0.0 too: Prometheus does not tell them apart
    return repr(value).removesuffix(".0")  # the shortest text that reads back as the same float64


# --- recording -----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class SeriesOptions:
    """What a simulation records: scrapes every ``interval`` seconds, with ``labels`` added to every
    series (checked as :func:`check_interval` and :func:`check_labels` do)."""

    interval: float = DEFAULT_INTERVAL
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        check_interval(self.interval)
        check_labels(self.labels)


class SeriesRecorder:
    """Scrapes a registry (a :class:`~eni_ipam.adapters.metrics.registry.MetricSet`'s or any) at every
    multiple of ``interval`` seconds after a start, keeping every sample of every family: counters'
    ``_total``, histograms' ``_bucket``, ``_sum`` and ``_count``, gauges; never a ``_created``.

    A scrape reads the registry in one step on the event loop (no await), as the controller's own
    ``/metrics`` freezes it: the totals and the per-node series of one scrape agree. ``labels`` are
    added to every series; one that a scraped series already has raises :class:`LabelClash` at the
    first scrape that sees such a series (a family's label names show only with its first series, so
    no sooner), and that scrape is not taken.
    """

    def __init__(
        self,
        metrics: MetricSet | CollectorRegistry,
        *,
        interval: float = DEFAULT_INTERVAL,
        labels: Mapping[str, str] | None = None,
    ) -> None:
        self.registry = metrics.registry if isinstance(metrics, MetricSet) else metrics
        self.interval = check_interval(interval)
        self.labels = check_labels(labels or {})
        self._interval_ms = round(interval * 1000)
        self._series: dict[SeriesKey, list[Value]] = {}
        self._scrapes = 0

    @property
    def scrapes(self) -> int:
        """Scrapes taken so far."""
        return self._scrapes

    def scrape(self) -> None:
        """Take the next scrape: every sample the registry exports now."""
        now: dict[SeriesKey, float] = {}
        for family in self.registry.collect():
            for sample in family.samples:
                if sample.value is None or (
                    family.type in _CREATED_TYPES and sample.name.endswith("_created")
                ):
                    continue
                clash = self.labels.keys() & sample.labels.keys()
                if clash:
                    raise LabelClash(
                        f"{sample.name} has a label {min(clash)!r} of its own: an added label never "
                        "replaces a metric's"
                    )
                now[SeriesKey.of(sample.name, {**sample.labels, **self.labels})] = float(sample.value)
        # Nothing changes before the whole scrape is read: a clash leaves the recording as it was.
        for key, values in self._series.items():
            values.append(now.pop(key, None))
        for key, value in now.items():
            self._series[key] = [*([None] * self._scrapes), value]
        self._scrapes += 1

    def scrape_until(self, elapsed: float) -> int:
        """Take every scrape due at or before ``elapsed`` seconds after the start that is not taken
        yet (each reads the registry as it is now); how many."""
        taken = 0
        while self._scrapes * self._interval_ms <= elapsed * 1000 + _SLACK_MS:
            self.scrape()
            taken += 1
        return taken

    async def run(self, clock: Clock, *, origin: float) -> None:
        """Scrape on ``clock`` at every multiple of the interval after ``origin`` (a reading of the
        same clock), the ones already due first, until cancelled."""
        while True:
            self.scrape_until(clock.monotonic() - origin)
            await clock.sleep(origin + self._scrapes * self._interval_ms / 1000 - clock.monotonic())

    def recording(self) -> Recording:
        """What was scraped so far (a copy: later scrapes do not change it)."""
        return Recording(
            self.interval, self._scrapes, {key: tuple(values) for key, values in self._series.items()}
        )

    def to_input_series(self) -> dict[str, Any]:
        return self.recording().to_input_series()

    def write(self, path: str | os.PathLike[str], *, source: str | None = None) -> None:
        self.recording().write(path, source=source)


# --- changing recordings (tests of alerts and dashboards) ------------------------------------------


def merge(*recordings: Recording) -> Recording:
    """One recording of several controllers scraped by one Prometheus, e.g. two releases in
    namespaces of their own (record each with its own ``namespace`` label): every series of each.
    A recording with fewer scrapes than the longest has its series absent after its end (stale
    there, as a target that went away).

    Raises:
        ValueError: no recording, intervals that differ, or a series in two of them.
    """
    if not recordings:
        raise ValueError("merge needs at least one recording")
    interval = recordings[0].interval
    for other in recordings[1:]:
        if other.interval_ms != recordings[0].interval_ms:
            raise ValueError(f"scrape intervals differ: {interval!r} and {other.interval!r} seconds")
    scrapes = max(r.scrapes for r in recordings)
    series: dict[SeriesKey, tuple[Value, ...]] = {}
    for recording in recordings:
        for key, values in recording.series.items():
            if key in series:
                raise ValueError(
                    f"{key.selector} is in two recordings: record each with labels of its own "
                    "(e.g. namespace)"
                )
            series[key] = (*values, *([None] * (scrapes - recording.scrapes)))
    return Recording(interval, scrapes, series)


def hand_over(recording: Recording, *, at: float, gap: float = 0.0, labels: Mapping[str, str]) -> Recording:
    """The recording as if another replica had taken over at ``at`` seconds after the start, as a
    leader election hands over (e.g. ``labels={"instance": "replica-2"}``, or ``pod``).

    Scrapes before ``at`` keep every series as recorded. Scrapes in ``[at, at + gap)`` have no
    series (neither replica exports them: each old series is stale at the first). From ``at + gap``
    on, every value is recorded under its series with ``labels`` set (the label's value replaced,
    or the label added): the same values, as the simulated controller went on. A series that
    ``labels`` turns into another one already there shares it where only one has values; a series
    left with no value (all of it after ``at``) is dropped.

    Raises:
        ValueError: ``at`` or ``gap`` negative or not finite, a label :func:`check_labels` refuses,
            or two series with values at the same scrape that ``labels`` makes one.
    """
    check_labels(labels)
    for name, seconds in (("at", at), ("gap", gap)):
        if not math.isfinite(seconds) or seconds < 0:
            raise ValueError(f"{name} must be a non-negative number of seconds, got {seconds!r}")
    stop = recording.first_scrape_at(at)
    resume = recording.first_scrape_at(at + gap)
    scrapes = recording.scrapes
    series: dict[SeriesKey, list[Value]] = {}

    def put(key: SeriesKey, part: Sequence[Value]) -> None:
        have = series.setdefault(key, [None] * scrapes)
        for index, value in enumerate(part):
            if value is None:
                continue
            if have[index] is not None:
                raise ValueError(f"{key.selector}: two series would have a value at scrape {index}")
            have[index] = value

    for key, values in recording.series.items():
        put(key, [*values[:stop], *([None] * (scrapes - stop))])
        put(key.relabel(labels), [*([None] * resume), *values[resume:]])
    return Recording(
        recording.interval,
        scrapes,
        {key: tuple(values) for key, values in series.items() if any(v is not None for v in values)},
    )
