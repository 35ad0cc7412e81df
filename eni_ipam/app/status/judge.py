"""What was read of a cluster → the report: every section judged, the findings ranked.

Pure: no I/O and no clock (``Gathered.now`` is the moment of the reading). The sections are judged
in :mod:`~eni_ipam.app.status.control` (the controller, its CRD), :mod:`~eni_ipam.app.status.nodes`
(the Nodes, their agents) and :mod:`~eni_ipam.app.status.cloud` (subnets, the APIs).
"""

from __future__ import annotations

import datetime

from eni_ipam import __version__
from eni_ipam.app.status import cloud, control, nodes
from eni_ipam.app.status.model import SECTIONS, Finding, Gathered, Report, problem


def judge(g: Gathered) -> Report:
    """The report on what ``g`` holds."""
    findings: list[Finding] = []
    for resource, why in sorted(g.unread.items()):
        what = f"cannot read {resource}: {why}"
        findings.append(problem("api", resource, what, "grant eni-ipam status its reads (docs/status.md)"))
    controller = control.controller(g, findings)
    crd = control.crd(g, findings, controller.metrics.crd_state if controller.metrics is not None else "")
    node_view = nodes.nodes(g, findings)
    subnet_view = cloud.subnets(g, findings)
    api_view = cloud.api(g, findings)
    agent_view = nodes.agents(g, findings)
    order = {name: n for n, name in enumerate(SECTIONS)}
    ranked = sorted(findings, key=lambda f: (f.severity != "problem", order[f.section]))
    return Report(
        checked_at=g.now.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        version=__version__,
        controller=controller,
        crd=crd,
        nodes=node_view,
        subnets=subnet_view,
        api=api_view,
        agents=agent_view,
        findings=tuple(ranked),
    )
