"""The pool gauges' self-check: are one scrape's totals its per-node series plus the omitted part?

:func:`pool_totals_problems` reads nothing but samples (name, labels, value), so it checks what a
scraper sees, wherever they come from: the controller's own collectors
(:meth:`~eni_ipam.adapters.metrics.controller.Metrics.totals_problems`, which the simulator calls
after every step and the soak every second) or a real scrape parsed back (the demo's ``/metrics`` in
its tests).
It recomputes the sums from the per-node samples rather than reading the running sums of
:mod:`~eni_ipam.adapters.metrics.pools`, so an error in those cannot vouch for itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from eni_ipam.adapters.metrics.exposition import NAMESPACE
from eni_ipam.adapters.metrics.pools import IP_TYPES


def pool_totals_problems(samples: Iterable[tuple[str, Mapping[str, str], float]]) -> list[str]:
    """Where the totals among ``samples`` (name, labels, value: one scrape of one controller)
    disagree with the per-node series and the omitted part among them; empty when they agree or
    none is exported.

    The totals must be exactly the sums (``ips``) and counts (``nodes``) of the per-node series plus
    ``omitted_node_ips`` and ``omitted_nodes``. When every node has series (the omitted part is zero,
    or absent as from an older version) that is the sums of the per-node series alone. While any node
    is omitted, every node with series must need attention (short, or unable to grow for a reason
    other than a full node that needs nothing).
    """
    per_node: dict[str, dict[str, float]] = {}
    reasons: dict[str, str] = {}
    got: dict[str, float] = {}
    omitted: dict[str, float] = {}
    for name, labels, value in samples:
        if name == f"{NAMESPACE}_node_ips":
            per_node.setdefault(labels["node"], {})[labels["type"]] = value
        elif name == f"{NAMESPACE}_node_at_capacity":
            reasons[labels["node"]] = labels["reason"]
        elif name == f"{NAMESPACE}_ips":
            got[f'ips{{type="{labels["type"]}"}}'] = value
        elif name == f"{NAMESPACE}_nodes":
            got[f'nodes{{category="{labels["category"]}"}}'] = value
        elif name == f"{NAMESPACE}_omitted_node_ips":
            omitted[f'ips{{type="{labels["type"]}"}}'] = value
        elif name == f"{NAMESPACE}_omitted_nodes":
            omitted[f'nodes{{category="{labels["category"]}"}}'] = value
    expected: dict[str, float] = {
        f'ips{{type="{kind}"}}': sum(v.get(kind, 0.0) for v in per_node.values()) for kind in IP_TYPES
    }
    expected['nodes{category="total"}'] = len(per_node)
    expected['nodes{category="in-deficit"}'] = sum(1 for v in per_node.values() if v.get("needed", 0) > 0)
    expected['nodes{category="at-capacity"}'] = sum(1 for r in reasons.values() if r == "instance-limit")
    problems = [
        f"{node} has a {reason} series but no node_ips"
        for node, reason in reasons.items()
        if node not in per_node
    ]
    problems += [f"omitted {series} is {value:g}" for series, value in omitted.items() if value < 0]
    if omitted.get('nodes{category="total"}', 0) > 0:
        problems += [
            f"{node} has series but needs no attention while other nodes are omitted"
            for node, values in per_node.items()
            if values.get("needed", 0) <= 0 and reasons.get(node, "instance-limit") == "instance-limit"
        ]
    if not got and not per_node:
        return problems  # nothing exported (not reconciling yet, or a standby)
    for series, in_series in expected.items():
        rest = omitted.get(series, 0.0)
        have = got.get(series)
        if have != in_series + rest:
            shown = "absent" if have is None else f"{have:g}"
            says = f"the per-node series say {in_series:g}"
            if rest:
                says = (
                    f"the per-node series ({in_series:g}) and the omitted part ({rest:g}) say "
                    f"{in_series + rest:g}"
                )
            problems.append(f"{series} is {shown}, {says}")
    return problems
