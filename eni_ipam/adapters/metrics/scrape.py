"""A scrape read back: a process's ``/metrics`` text (the Prometheus text format) as samples by name.

What reads another process's metrics (``eni-ipam status``) parses them here, with prometheus_client's
own parser, the reader of the format this package writes. Samples are keyed by their full name as
exposed (``eni_ipam_resync_total``, ``eni_ipam_api_duration_seconds_count``), each with its labels.
"""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client.parser import text_string_to_metric_families

Labels = Mapping[str, str]


class Scrape:
    """One scrape's samples; the lookups take a label subset (``{}``: any series of the name)."""

    def __init__(self, samples: Mapping[str, list[tuple[dict[str, str], float]]]) -> None:
        self.samples = samples

    @classmethod
    def parse(cls, text: str) -> Scrape:
        """The samples of ``text``.

        Raises:
            ValueError: ``text`` is not in the Prometheus text format.
        """
        samples: dict[str, list[tuple[dict[str, str], float]]] = {}
        try:
            for family in text_string_to_metric_families(text):
                for sample in family.samples:
                    samples.setdefault(sample.name, []).append((dict(sample.labels), float(sample.value)))
        except (ValueError, TypeError, IndexError, KeyError) as exc:  # the parser's errors on bad input
            raise ValueError(f"not the Prometheus text format: {exc}") from None
        return cls(samples)

    def series(self, name: str, labels: Labels | None = None) -> list[tuple[dict[str, str], float]]:
        """Every sample of ``name`` whose labels include ``labels``."""
        wanted = dict(labels or {}).items()
        return [(have, value) for have, value in self.samples.get(name, ()) if wanted <= have.items()]

    def value(self, name: str, labels: Labels | None = None) -> float | None:
        """The first sample of ``name`` with ``labels`` (None: the scrape has none)."""
        found = self.series(name, labels)
        return found[0][1] if found else None

    def total(self, name: str, labels: Labels | None = None) -> float | None:
        """The sum of the samples of ``name`` with ``labels`` (None: the scrape has none)."""
        found = self.series(name, labels)
        return sum(value for _, value in found) if found else None

    def __contains__(self, name: str) -> bool:
        return name in self.samples
