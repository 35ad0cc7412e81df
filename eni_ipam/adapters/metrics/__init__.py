"""Prometheus metrics (namespace ``eni_ipam``), each set on a registry of its own.

Names and labels are a dashboard contract (docs/metrics.md). Two sets, one per process kind, so
neither exports the other's series: :class:`Metrics` for the controller (``eni-ipam run``, the demos,
the simulator) and ``AgentMetrics`` (in :mod:`eni_ipam.agent.metrics`) for a node agent. Both carry
what every Kubernetes client counts.

A module a job, each importing only those listed before it:

* :mod:`~eni_ipam.adapters.metrics.scrape` — another process's scrape read back (:class:`Scrape`),
  for ``eni-ipam status``;
* :mod:`~eni_ipam.adapters.metrics.exposition` — a scrape: the families frozen on the event loop,
  their text (or OpenMetrics) written off it, and :class:`NodeSeries`, the per-node family kept as
  rows;
* :mod:`~eni_ipam.adapters.metrics.registry` — :class:`MetricSet`: a registry of its own, the
  families every process exports, declaring, reading back and freezing them;
* :mod:`~eni_ipam.adapters.metrics.selection` — which nodes have per-node series
  (:class:`NodeSeriesPolicy`);
* :mod:`~eni_ipam.adapters.metrics.pools` — the controller's per-node series and cluster totals,
  kept from one record, and their invariants;
* :mod:`~eni_ipam.adapters.metrics.checks` — :func:`pool_totals_problems`, the check of those
  invariants on any scrape;
* :mod:`~eni_ipam.adapters.metrics.controller` — :class:`Metrics`, the controller's families and
  the domain's observer protocols.

The package exports the names importers need; the modules are the precise paths.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from eni_ipam.adapters.metrics.checks import pool_totals_problems
    from eni_ipam.adapters.metrics.controller import Metrics
    from eni_ipam.adapters.metrics.exposition import NAMESPACE, Frozen, NodeSeries, render
    from eni_ipam.adapters.metrics.pools import IP_TYPES, NODE_CATEGORIES, OMITTED_CATEGORIES
    from eni_ipam.adapters.metrics.registry import MetricSet
    from eni_ipam.adapters.metrics.selection import NodeSeriesPolicy
    from eni_ipam.core.observe import CAPACITY_REASONS

__all__ = [
    "CAPACITY_REASONS",
    "IP_TYPES",
    "NAMESPACE",
    "NODE_CATEGORIES",
    "OMITTED_CATEGORIES",
    "Frozen",
    "MetricSet",
    "Metrics",
    "NodeSeries",
    "NodeSeriesPolicy",
    "pool_totals_problems",
    "render",
]

_HOMES = {
    "CAPACITY_REASONS": "eni_ipam.core.observe",
    "IP_TYPES": f"{__name__}.pools",
    "NAMESPACE": f"{__name__}.exposition",
    "NODE_CATEGORIES": f"{__name__}.pools",
    "OMITTED_CATEGORIES": f"{__name__}.pools",
    "Frozen": f"{__name__}.exposition",
    "MetricSet": f"{__name__}.registry",
    "Metrics": f"{__name__}.controller",
    "NodeSeries": f"{__name__}.exposition",
    "NodeSeriesPolicy": f"{__name__}.selection",
    "pool_totals_problems": f"{__name__}.checks",
    "render": f"{__name__}.exposition",
}
"""Where each exported name lives. They are imported when first asked for (PEP 562), not with the
package: the node agent imports the registry and the exposition only, and importing the controller's
metrics cost it about 15 ms of each restart."""


def __getattr__(name: str) -> object:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value
