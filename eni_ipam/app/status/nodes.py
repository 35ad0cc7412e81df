"""The Nodes and their agents, judged from the Nodes, their ENIPools and eni-ipam's Events.

Each Node gets one state (:data:`~eni_ipam.app.status.model.NODE_STATES`) from its pool's ``Ready``
condition, or from the Node alone when it has no pool:

* ``ready`` — the condition is true;
* ``short`` — false: the reason (``Deficit``, ``AtCapacity``, ``LimitsUnknown``,
  ``DuplicateInstance``, ``CRDOutdated``) and the pool's ``status.message`` say why. Something said in
  the pool's way is a problem at once; a pool only filling up becomes one after :data:`NEW_GRACE`;
* ``no-instance`` — no usable ``spec.providerID`` (no pool is made), or the reason
  ``InstanceNotRunning`` (the cloud does not know the instance, or it is stopped);
* ``no-pool`` — the Node names an instance but has no ENIPool (a problem after :data:`NEW_GRACE`);
* ``pending`` — its pool has no status yet (likewise).

**Agents.** The pool's status carries nothing of the node agent. What shows that an agent never
served is the startup taint ``eni-ipam.io/not-ready``: the agent takes it off its Node once the pool
holds its minimum and it serves. A Node still carrying it :data:`AGENT_GRACE` after its pool became
ready has an agent that is not serving. Nodes registered without the taint (it is opt-in: the
kubelet's ``--register-with-taints``, Karpenter's ``startupTaints``) cannot be judged so.
"""

from __future__ import annotations

from collections.abc import Mapping

from eni_ipam.app.status.model import (
    NODE_STATES,
    AgentsView,
    Finding,
    Gathered,
    NodeRow,
    NodesView,
    Obj,
    condition,
    duration_text,
    mapping,
    meta,
    name_of,
    note,
    problem,
    since,
    text,
)
from eni_ipam.kube.nodemarks import STARTUP_TAINT
from eni_ipam.kube.resources import instance_id_from_provider_id

NEW_GRACE = 120.0
"""Seconds a new Node may wait for its ENIPool, a new pool for its first status, and a pool for the
addresses it lacks with nothing said in its way, before it is a problem (the controller serves a
joining node within seconds; a scale-up queued behind the cloud's rate limits within a minute or two)."""
AGENT_GRACE = 300.0
"""Seconds a Node may keep the startup taint after its pool became ready (its agent lifts it within
seconds of serving)."""
RECENT_EVENTS = 3600.0
"""Seconds an Event counts as recent (the API server keeps Events an hour by default)."""

_FIXES = {
    "AtCapacity": "every interface is full: larger instance types, /28 prefixes (prefix_delegation), a "
    "lower first_interface_index, or fewer pods a node (eni-ipam max-pods)",
    "LimitsUnknown": "allow ec2:DescribeInstanceTypes (update_limits_via_api), or upgrade eni-ipam for a "
    "newer limits table",
    "DuplicateInstance": "delete the stale Node (the instance registered again under another name)",
    "CRDOutdated": "the CRD (above) would prune the pool's status: apply it",
}


def nodes(g: Gathered, out: list[Finding]) -> NodesView:
    pools = {name_of(p): p for p in g.pools if name_of(p)}
    found = {name_of(n): n for n in g.nodes if name_of(n)}
    if "enipools" in g.unread:  # every Node would look poolless: nothing to judge them by
        return NodesView(total=len(found), counts={}, rows=(), pools_without_node=())
    rows: list[NodeRow] = []
    for name in sorted(found):
        row = _row(g, found[name], pools.get(name))
        rows.append(row)
        finding = _finding(row)
        if finding is not None:
            out.append(finding)
    orphans = () if "nodes" in g.unread or g.selector else tuple(sorted(set(pools) - set(found)))
    for name in orphans:
        deleting = since(g.now, meta(pools[name]).get("deletionTimestamp"))
        if deleting is not None and deleting > NEW_GRACE:
            what = f"ENIPool {name} was deleted {duration_text(deleting)} ago and its finalizer stays"
            fix = "the leader removes it once the node's last pass is over: is a controller leading?"
            out.append(problem("nodes", name, what, fix))
    counts = {state: sum(1 for r in rows if r.state == state) for state in NODE_STATES}
    return NodesView(total=len(rows), counts=counts, rows=tuple(rows), pools_without_node=orphans)


def _row(g: Gathered, node: Obj, pool: Obj | None) -> NodeRow:
    name = name_of(node)
    events = _events(g, name)
    if pool is None:
        instance = instance_id_from_provider_id(text(mapping(node.get("spec")).get("providerID")))
        age = since(g.now, meta(node).get("creationTimestamp"))
        if not instance:
            why = "the Node has no usable spec.providerID, so eni-ipam gives it no ENIPool"
            return NodeRow(name, "no-instance", "NoProviderID", why, since=age, events=events)
        return NodeRow(name, "no-pool", "NoPool", "the Node has no ENIPool", instance, age, events)
    instance = text(mapping(pool.get("spec")).get("instanceID"))
    ready = condition(pool, "Ready")
    if ready is None:
        age = since(g.now, meta(pool).get("creationTimestamp"))
        return NodeRow(name, "pending", "NoStatus", "its ENIPool has no status yet", instance, age, events)
    at = since(g.now, ready.get("lastTransitionTime"))
    reason = str(ready.get("reason") or "")
    if ready.get("status") == "True":
        return NodeRow(name, "ready", reason, "", instance, at, events)
    message = mapping(pool.get("status")).get("message") or ready.get("message") or ""
    state = "no-instance" if reason == "InstanceNotRunning" else "short"
    return NodeRow(name, state, reason, str(message), instance, at, events)


def _finding(row: NodeRow) -> Finding | None:
    name, at = row.name, row.since
    late = at is None or at > NEW_GRACE
    if row.state == "ready":
        return None
    if row.reason == "NoProviderID":
        fix = (
            "check that the cloud's controller manager runs and that kubelet was started with "
            "--cloud-provider=external: the pool is made once spec.providerID is set"
        )
        return problem("nodes", name, f"no instance: {row.message}", fix)
    if row.state == "no-instance":
        fix = (
            f"an instance gone for good: delete the Node (kubectl delete node {name}); a stopped one: "
            "start it; a wrong spec.providerID: the cloud's controller manager set it"
        )
        return problem("nodes", name, f"no instance: {row.message or 'its instance is not running'}", fix)
    finding = problem if late else note
    waited = f" for {duration_text(at)}" if at is not None else ""
    if row.state == "no-pool":
        what = f"no ENIPool{waited}: the controller has not made one"
        fix = (
            "is a controller leading (Controller)? A Node outside kubernetes.node_selector, or of "
            "another cloud than the provider's, gets none by design: leave it out with --selector"
        )
        return finding("nodes", name, what, fix)
    if row.state == "pending":
        what = f"its ENIPool has had no status{waited}: the controller has not served it"
        return finding(
            "nodes", name, what, f"is a controller leading (Controller)? kubectl describe enipool {name}"
        )
    # Short: what stands in its way needs an operator now; a pool filling up, once it is late.
    fix = _FIXES.get(row.reason) or f"kubectl describe enipool {name} (its status.message says what to do)"
    if row.reason == "Deficit" and not row.message:
        return finding("nodes", name, f"short of addresses{waited}", fix)
    return problem(
        "nodes", name, f"short ({row.reason}): {row.message}" if row.message else f"short ({row.reason})", fix
    )


def _events(g: Gathered, node: str) -> tuple[str, ...]:
    """eni-ipam's recent Warning Events about Node ``node``: one line a reason, the latest first."""
    found: list[tuple[float, str]] = []
    for event in g.events:
        involved = mapping(event.get("involvedObject"))
        if involved.get("kind") != "Node" or involved.get("name") != node or event.get("type") != "Warning":
            continue
        stamp = event.get("lastTimestamp") or event.get("eventTime") or event.get("firstTimestamp")
        ago = since(g.now, stamp)
        if ago is None or ago > RECENT_EVENTS:
            continue
        count = event.get("count")
        times = f" (×{count}, last {duration_text(ago)} ago)" if isinstance(count, int) and count > 1 else ""
        found.append((ago, f"{event.get('reason') or ''}: {event.get('message') or ''}{times}"))
    lines: dict[str, str] = {}
    for _, line in sorted(found, key=lambda item: item[0]):
        lines.setdefault(line.split(":", 1)[0], line)
    return tuple(lines.values())


def agents(g: Gathered, out: list[Finding]) -> AgentsView:
    pools = {name_of(p): p for p in g.pools}
    tainted = 0
    not_serving: list[str] = []
    for node in g.nodes:
        taints = mapping(node.get("spec")).get("taints")
        if not isinstance(taints, list) or not any(
            isinstance(t, Mapping) and t.get("key") == STARTUP_TAINT for t in taints
        ):
            continue
        tainted += 1
        name = name_of(node)
        ready = condition(pools[name], "Ready") if name in pools else None
        if ready is None or ready.get("status") != "True":
            continue  # the agent waits for its pool, whose state the Nodes section judges
        ready_for = since(g.now, ready.get("lastTransitionTime"))
        if ready_for is not None and ready_for <= AGENT_GRACE:
            continue
        not_serving.append(name)
        how_long = duration_text(ready_for) if ready_for is not None else "long"
        what = f"its agent has not served: the pool has been ready for {how_long} and {STARTUP_TAINT} stays"
        fix = (
            f"the agent's pod on it (kubectl -n {g.namespace} get pods -o wide --field-selector "
            f"spec.nodeName={name}), its log and /readyz"
        )
        out.append(problem("agents", name, what, fix))
    return AgentsView(tainted, tuple(not_serving))
