"""Subnets and the APIs, judged: what the leader's metrics say of the cloud, or what the pools say.

* **Subnets**: with the leader's scrape, each subnet eni-ipam fills by its free addresses, size and
  pressure: full below :data:`SUBNET_FULL_BELOW` free, low below :data:`SUBNET_LOW_BELOW` free and
  :data:`SUBNET_LOW_SHARE` of the CIDR, under pressure while the leader says so. Without it, the
  subnets the pools' interfaces are in, and the pools whose ``SubnetPressure`` condition holds.
* **Cloud API throttling**: a counter's value alone is no rate. With ``--window``, two scrapes that far
  apart give each operation's throttled share *now*, judged against :data:`THROTTLED_SHARE`; with
  one scrape, the totals since the controller started, a note at most. Nodes whose last pass was
  throttled (a gauge: now) are said either way.
* **Failing nodes**: nodes whose passes failed :data:`FAILING_PASSES` times in a row, by the error's
  class (throttling aside); **Kubernetes API**: the controller's own ``kube_api_unhealthy``.

The thresholds are the alert rules' defaults (values.yaml, ``prometheusRule``), so the status and the
pages agree.
"""

from __future__ import annotations

from eni_ipam.adapters.metrics.scrape import Scrape
from eni_ipam.adapters.terminal import plural
from eni_ipam.app.status.model import (
    ApiView,
    Finding,
    Gathered,
    OperationRow,
    SubnetRow,
    SubnetsView,
    condition,
    duration_text,
    mapping,
    name_of,
    note,
    problem,
)

SUBNET_FULL_BELOW = 2
"""Fewer free addresses than this: the subnet is full (``prometheusRule.subnetFullBelow``)."""
SUBNET_LOW_BELOW = 64
SUBNET_LOW_SHARE = 0.25
"""Fewer free addresses than this, and less than this share of the CIDR: the subnet is low
(``subnetFreeAddressesBelow``, ``subnetLowFreeShareBelow``)."""
THROTTLED_SHARE = 0.1
"""A larger share of an operation's requests throttled needs a look (``throttledShareAbove``): the
SDK retries throttled requests, so some throttling is normal in a busy account."""
FAILING_PASSES = 3
"""Passes of a node failed in a row before it is a problem (about 7 s of backoff; one is a blip)."""
_PRESSURE_FIX = "give its nodes more subnets (subnet_ids, subnet_tags) or lower min_allocate; look for leaks"


def subnets(g: Gathered, out: list[Finding]) -> SubnetsView:
    users: dict[str, int] = {}
    for pool in g.pools:
        for subnet in _subnets_of(pool):
            users[subnet] = users.get(subnet, 0) + 1
    scrape = g.leader_scrape
    if scrape is not None:
        rows = []
        for labels, free in scrape.series("eni_ipam_available_ips_per_subnet"):
            subnet = labels.get("subnet", "")
            size = scrape.value("eni_ipam_subnet_size_ips", {"subnet": subnet})
            pressure = scrape.value("eni_ipam_subnet_pressure", {"subnet": subnet})
            row = SubnetRow(
                id=subnet,
                zone=labels.get("zone", ""),
                free=int(free),
                size=None if size is None else int(size),
                pressure=None if pressure is None else pressure == 1,
                nodes=users.get(subnet, 0),
            )
            rows.append(row)
            _judge_subnet(row, out)
        return SubnetsView("metrics", tuple(sorted(rows, key=lambda r: r.id)))
    pressured: dict[str, list[str]] = {}
    for pool in g.pools:
        said = condition(pool, "SubnetPressure")
        if said is not None and said.get("status") == "True":
            for subnet in _subnets_of(pool):
                pressured.setdefault(subnet, []).append(name_of(pool))
    for subnet, names in sorted(pressured.items()):
        shown = ", ".join(sorted(names)[:3]) + (", …" if len(names) > 3 else "")
        what = f"subnet {subnet} is under pressure ({plural(len(names), 'pool')} say so: {shown})"
        out.append(problem("subnets", subnet, what, _PRESSURE_FIX))
    rows = [SubnetRow(s, pressure=s in pressured or None, nodes=n) for s, n in sorted(users.items())]
    return SubnetsView("pools", tuple(rows))


def _subnets_of(pool: object) -> set[str]:
    status = mapping(mapping(pool).get("status"))
    interfaces = status.get("interfaces")
    if not isinstance(interfaces, list):
        return set()
    return {i["subnet"] for i in interfaces if isinstance(i, dict) and isinstance(i.get("subnet"), str)}


def _judge_subnet(row: SubnetRow, out: list[Finding]) -> None:
    free, size = row.free or 0, row.size
    where = f"{row.id} ({row.zone})" if row.zone else row.id
    if free < SUBNET_FULL_BELOW:
        what = f"subnet {where} is full: {plural(free, 'free address', 'free addresses')}"
        fix = (
            "free addresses now (release_excess_ips, lower watermarks, leaked interfaces), then add "
            "subnets (subnet_ids, subnet_tags)"
        )
        out.append(problem("subnets", row.id, what, fix))
    elif free < SUBNET_LOW_BELOW and size and free / size < SUBNET_LOW_SHARE:
        what = f"subnet {where} is running out: {free} of {size} addresses free"
        fix = "give nodes more subnets (subnet_ids, subnet_tags), lower the watermarks, or release_excess_ips"
        out.append(problem("subnets", row.id, what, fix))
    if row.pressure:
        what = f"subnet {where} is under pressure: its nodes keep only what their pods use or wait for"
        out.append(problem("subnets", row.id, what, _PRESSURE_FIX))


def api(g: Gathered, out: list[Finding]) -> ApiView | None:
    scrape = g.leader_scrape
    if scrape is None:
        return None
    earlier = g.earlier
    requests = _delta(scrape, earlier, "eni_ipam_api_requests_total")
    throttled = _delta(scrape, earlier, "eni_ipam_api_throttled_total")
    rows = tuple(OperationRow(op, n, throttled.get(op, 0)) for op, n in sorted(requests.items()))
    for row in rows:
        if not row.requests or row.throttled / row.requests <= THROTTLED_SHARE:
            continue
        if earlier is not None:
            over, finding = f"in the last {duration_text(g.window)}", problem
        else:
            over, finding = "since the controller started (--window judges now)", note
        what = (
            f"the cloud throttled {row.throttled / row.requests:.0%} of {row.operation} requests "
            f"({row.throttled} of {row.requests}) {over}"
        )
        fix = "another caller spends the account's API bucket: find it, or lower settings.rate_limit_share"
        out.append(finding("api", row.operation, what, fix))
    failing: dict[str, int] = {}
    stuck: dict[str, list[str]] = {}
    for labels, passes in scrape.series("eni_ipam_node_failing"):
        reason = labels.get("reason", "other")
        failing[reason] = failing.get(reason, 0) + 1
        if passes >= FAILING_PASSES and reason not in ("Throttled", "NotReady"):
            stuck.setdefault(reason, []).append(labels.get("node", ""))
    for reason, names in sorted(stuck.items()):
        shown = ", ".join(sorted(names)[:3]) + (", …" if len(names) > 3 else "")
        what = f"the passes of {plural(len(names), 'node')} keep failing with {reason}: {shown}"
        fix = "the controller's log (maintenance_failed) has the cloud's error; docs/aws.md section 9"
        out.append(problem("api", reason, what, fix))
    if failing.get("Throttled"):
        what = (
            f"the last pass of {plural(failing['Throttled'], 'node')} was throttled (retried after a backoff)"
        )
        out.append(note("api", "Throttled", what))
    unhealthy = tuple(
        sorted(ls.get("problem", "") for ls, v in scrape.series("eni_ipam_kube_api_unhealthy") if v)
    )
    for kind in unhealthy:
        said = (
            "are refused: its credentials are rejected" if kind == "credentials_rejected" else "get no answer"
        )
        fix = "its ServiceAccount's token, or the network to the API server: its log (kube_api_unhealthy)"
        out.append(problem("api", kind, f"the controller's requests to the Kubernetes API {said}", fix))
    return ApiView(g.window if earlier is not None else 0.0, rows, failing, unhealthy)


def _delta(scrape: Scrape, earlier: Scrape | None, name: str) -> dict[str, int]:
    """A counter by operation: since ``earlier``, or since the controller started without one (a
    counter reset by a restart meanwhile counts from 0)."""
    now, before = _by_operation(scrape, name), _by_operation(earlier, name) if earlier else {}
    return {
        op: value - before.get(op, 0) if value >= before.get(op, 0) else value for op, value in now.items()
    }


def _by_operation(scrape: Scrape, name: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for labels, value in scrape.series(name):
        operation = labels.get("operation", "")
        out[operation] = out.get(operation, 0) + int(value)
    return out
