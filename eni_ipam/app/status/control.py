"""The controller and its CRD, judged: the leader Lease, the leader's own metrics, the ENIPool CRD.

* **Lease**: no Lease, or one nobody holds, is no leader; a holder that has not renewed within the
  Lease's duration is gone or cut off, and no standby took over. Its age is read against this
  machine's clock (the holder's renewal time is written by the holder's).
* **Metrics** (with ``--metrics-url``): the version, the role, readiness (with ``/readyz``'s reason),
  the full resyncs: failing in a row (two or more: a problem), or none succeeded for longer than
  resyncs are ever apart. A standby's scrape says nothing of pools: said so, not judged.
* **CRD**: :func:`eni_ipam.kube.crd.judge`, the controller's own judgement, against the revision this
  eni-ipam carries, and the state the scraped controller finds it in.
"""

from __future__ import annotations

from eni_ipam import __version__
from eni_ipam.adapters.terminal import plural
from eni_ipam.app.status.model import (
    ControllerView,
    CrdView,
    Finding,
    Gathered,
    LeaseView,
    MetricsView,
    duration_text,
    mapping,
    note,
    problem,
    since,
    text,
)
from eni_ipam.core.manager import MAX_RESYNC_INTERVAL
from eni_ipam.kube import crd as crds

RESYNC_LATE = MAX_RESYNC_INTERVAL + 60.0
"""Seconds without a successful full resync before it is a problem: resyncs come at most 15 minutes
apart however large the cluster (``resync_interval`` adapted to their cost)."""
DEFAULT_LEASE_DURATION = 15
"""Seconds a Lease that does not say its duration is held for (client-go's, ``kubernetes.lease_duration``)."""
RESYNCS_FAILING = 2
"""Full resyncs failed in a row before it is a problem (one is a blip the next may mend)."""


def pods_hint(namespace: str) -> str:
    return f"kubectl -n {namespace} get pods -l app.kubernetes.io/name=eni-ipam"


def controller(g: Gathered, out: list[Finding]) -> ControllerView:
    lease = _lease(g, out)
    return ControllerView(namespace=g.namespace, lease=lease, metrics=_metrics(g, lease, out))


def _lease(g: Gathered, out: list[Finding]) -> LeaseView | None:
    where = f"{g.namespace}/{g.lease_name}"
    if "leases" in g.unread:
        return None
    if g.lease is None:
        what = f"no Lease {where}: no eni-ipam controller has led in namespace {g.namespace}"
        out.append(problem("controller", where, what, f"is it installed there? {pods_hint(g.namespace)}"))
        return None
    spec = mapping(g.lease.get("spec"))
    holder = text(spec.get("holderIdentity"))
    duration = _number(spec.get("leaseDurationSeconds")) or DEFAULT_LEASE_DURATION
    renewed = since(g.now, spec.get("renewTime"))
    stale = bool(holder) and (renewed is None or renewed > duration)
    view = LeaseView(
        name=g.lease_name,
        namespace=g.namespace,
        holder=holder,
        leading_for=since(g.now, spec.get("acquireTime")) if holder else None,
        renewed_ago=renewed,
        duration=duration,
        transitions=_number(spec.get("leaseTransitions")),
        stale=stale,
    )
    if not holder:
        what = "no leader: the last one released the Lease and no replica has taken it"
        out.append(problem("controller", where, what, f"check the replicas: {pods_hint(g.namespace)}"))
    elif stale:
        ago = "never renewed it" if renewed is None else f"last renewed it {duration_text(renewed)} ago"
        what = (
            f"the leader {holder} {ago}, beyond the Lease's {duration}s: it is gone or cannot reach the "
            "API server, and no standby has taken over"
        )
        fix = (
            f"kubectl -n {g.namespace} logs {holder}; {pods_hint(g.namespace)} (this machine's clock must "
            "be right for this check)"
        )
        out.append(problem("controller", holder, what, fix))
    return view


def _number(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _metrics(g: Gathered, lease: LeaseView | None, out: list[Finding]) -> MetricsView | None:
    if not g.metrics_url:
        return None
    scrape = g.scrape
    if scrape is None:
        what = f"metrics not reachable: {g.metrics_error}"
        out.append(note("controller", g.metrics_url, what, "port-forward to the leader (docs/status.md)"))
        return MetricsView(url=g.metrics_url, reachable=False, error=g.metrics_error)
    leader = scrape.value("eni_ipam_leader")
    ready = scrape.value("eni_ipam_ready")
    view = MetricsView(
        url=g.metrics_url,
        reachable=True,
        version=next((labels.get("version", "") for labels, _ in scrape.series("eni_ipam_build_info")), ""),
        role="" if leader is None else ("leader" if leader == 1 else "standby"),
        ready=None if ready is None else ready == 1,
        readyz=g.readyz,
        resync_age=scrape.value("eni_ipam_resync_age_seconds"),
        resync_failing=_count(scrape.value("eni_ipam_resync_failing")),
        resyncs=_count(scrape.value("eni_ipam_resync_total")),
        resync_failures=_count(scrape.value("eni_ipam_resync_failures_total")),
        crd_state=next((ls.get("state", "") for ls, v in scrape.series("eni_ipam_crd_state") if v == 1), ""),
    )
    holder = lease.holder if lease is not None and lease.holder else ""
    if view.version and view.version != __version__:
        what = f"the controller runs eni-ipam {view.version}, this command is eni-ipam {__version__}"
        out.append(note("controller", view.version, what, "judge it with the eni-ipam of its version"))
    if view.role == "standby":
        what = (
            f"these metrics are a standby's: the pools, subnets and cloud API are {holder or 'the leader'}'s"
        )
        out.append(note("controller", g.metrics_url, what, f"--metrics-url of {holder or 'the leader'}"))
        return view
    if view.ready is False:
        what = f"the controller is not ready: {g.readyz or 'eni_ipam_ready is 0'}"
        fix = f"its log says why: kubectl -n {g.namespace} logs {holder or '<pod>'}"
        out.append(problem("controller", holder or g.metrics_url, what, fix))
    failing = view.resync_failing or 0
    if failing:
        what = (
            f"the last {plural(failing, 'full resync')} of the cloud failed: the controller's view of it "
            "is as old as the last that succeeded"
        )
        fix = "its log (resync_failed) names the error: credentials, region, VPC, the policy, throttling"
        finding = problem if failing >= RESYNCS_FAILING else note
        out.append(finding("controller", "resync", what, fix))
    if view.resync_age is not None and view.resync_age > RESYNC_LATE and view.ready is not False:
        what = (
            f"no full resync has succeeded for {duration_text(view.resync_age)} (they are at most "
            f"{duration_text(MAX_RESYNC_INTERVAL)} apart)"
        )
        out.append(problem("controller", "resync", what, "a listing of the cloud hangs or fails: its log"))
    return view


def _count(value: float | None) -> int | None:
    return None if value is None else int(value)


def crd(g: Gathered, out: list[Finding], controllers: str) -> CrdView | None:
    """``controllers``: the state the scraped controller finds the CRD in ("": not scraped)."""
    if "customresourcedefinitions" in g.unread:
        return None
    expected = crds.revision(crds.bundled())
    state = crds.judge(g.crd)
    view = CrdView(crds.CRD_NAME, state.state, state.revision, expected, state.lost)
    name = crds.CRD_NAME
    if not state.current:
        out.append(problem("crd", name, state.problem(), ""))  # the sentence names the command
    elif state.revision > expected:
        what = f"the cluster's CRD is revision {state.revision}, newer than this eni-ipam's ({expected})"
        out.append(note("crd", name, what, "use the eni-ipam of the controller's version"))
    elif state.revision < expected:
        what = (
            f"the cluster's CRD is revision {state.revision}, this eni-ipam's {expected}: it keeps every "
            "field, and a controller of this version updates it (kubernetes.update_crd)"
        )
        out.append(note("crd", name, what, f"or apply it: {crds.APPLY_COMMAND}"))
    if state.current and controllers and controllers != "current":
        what = f"the controller finds the CRD {controllers}: it holds the pools' status until it is current"
        fix = "unreadable: the controller's ClusterRole; unknown: not read yet (its log)"
        out.append(problem("crd", name, what, fix))
    return view
