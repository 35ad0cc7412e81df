"""The node agent's metrics: what its pools may hand out and have handed out, the release
handshake's answers, its status reports and readiness — and nothing of the controller's, so a
scraped agent never exports a ``ready 0`` or an empty pool total that dashboards would sum."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Collection, Iterable

from aiohttp import web

from eni_ipam.adapters.metrics.registry import MetricSet
from eni_ipam.agent.libnetwork.protocol import ERR_NO_AVAILABLE_IPS

CNI_PREFIX = "/v1/cni/"
LIBNETWORK_PREFIXES = ("/IpamDriver.", "/Plugin.")
LIBNETWORK_OUTCOMES = {400: "invalid", 403: "forbidden", 503: "unavailable", 500: "failed"}
"""A libnetwork refusal's outcome by HTTP status (its body carries only a message)."""


class AgentMetrics(MetricSet):
    def __init__(self, *, process: bool = True) -> None:
        super().__init__(process=process)
        self.agent_ready = self.gauge(
            "agent_ready", "1 while the node agent is ready (state restored, socket served, ENIPool seen)"
        )
        self.agent_state_writable = self.gauge(
            "agent_state_writable",
            "0 while the node agent's state file cannot be written (a full or failing disk): every "
            "change is refused until a write succeeds; 1 otherwise",
        )
        self.agent_source_unread = self.gauge(
            "agent_source_unread",
            "1 while a source of what is in use on the node (docker: Docker's API; pods: the node's pods "
            "from the API server) has not been read since the agent started: what it may hold is "
            "withheld, the rebuild of the node's allocations is incomplete",
            ["source"],
        )
        self.agent_pool_addresses = self.gauge(
            "agent_pool_addresses",
            "Addresses a node agent's pool may hand out, by node and pool",
            ["node", "pool"],
        )
        self.agent_allocations = self.gauge(
            "agent_allocations", "Addresses a node agent has handed out, by node and pool", ["node", "pool"]
        )
        self.agent_release_answers = self.gauge(
            "agent_release_answers",
            "A node agent's answers in the release handshake, by answer",
            ["node", "answer"],
        )
        self.agent_status_reports = self.counter(
            "agent_status_reports",
            "A node agent's writes of its ENIPool status fields, by outcome (ok, conflict, failed, refused)",
            ["outcome"],
        )
        self.agent_requests = self.counter(
            "agent_requests",
            "Requests the node agent answered, by API (cni, libnetwork), operation and outcome (ok, "
            "pool_exhausted: no free address, or the error's code)",
            ["api", "operation", "outcome"],
        )
        self.agent_socket_refused = self.counter(
            "agent_socket_refused",
            "Connections and requests the node agent's socket refused, by reason (connection_limit: "
            "over socket_max_connections; evicted: aborted to give its slot to a process holding fewer; "
            "read_timeout: not sent whole within socket_read_timeout; "
            "write_timeout: an answer not read within socket_read_timeout)",
            ["reason"],
        )
        self.agent_claim_conflicts = self.counter(
            "agent_claim_conflicts",
            "IPAddressClaims of the node's pool found with an IPAddress of their name that is not theirs "
            "(counted once per claim and IPAddress), by reason: node (another node's label), pool (another "
            "pool), claim (another claimRef), owner (another controller), address (another address, "
            "prefix or gateway than the allocator holds)",
            ["reason"],
        )
        self.agent_quarantined_addresses = self.gauge(
            "agent_quarantined_addresses",
            "Released addresses the node agent's automatic choice passes by: their quarantine has not "
            "passed, or an EndpointSlice still lists them (or the slices are not read yet)",
        )
        self.agent_quarantine_early_reuses = self.counter(
            "agent_quarantine_early_reuses",
            "Quarantined addresses handed out before their time, by reason (pool_exhausted: no other "
            "address of the family was free, the oldest release went first; requested: asked for by "
            "address)",
            ["reason"],
        )

        self.agent_datapath_reconciles = self.counter(
            "agent_datapath_reconciles",
            "Reconciles of the node datapath (tables, rules, SNAT) with the pool and its pods, by outcome "
            "(ok, changed: something on the host was set right, failed)",
            ["outcome"],
        )
        self.agent_datapath_unready_interfaces = self.gauge(
            "agent_datapath_unready_interfaces",
            "Interfaces of the node's pool without a datapath (no device found by MAC yet): their "
            "addresses are not handed out",
        )

    def report_ready(self, ready: Callable[[], bool]) -> None:
        """Export ``ready`` as it is at each scrape."""
        self.agent_ready.set_function(lambda: float(ready()))

    def report_state(
        self, *, writable: Callable[[], bool], unread: Callable[[], Collection[str]], sources: Iterable[str]
    ) -> None:
        """Export, as they are at each scrape, whether the state file can be written and which of
        ``sources`` the start has not read yet."""
        self.agent_state_writable.set_function(lambda: float(writable()))

        def reading(source: str) -> Callable[[], float]:
            return lambda: float(source in unread())

        for source in sources:
            self.agent_source_unread.labels(source=source).set_function(reading(source))

    def report_quarantine(self, held: Callable[[], int]) -> None:
        """Export the quarantined addresses held, as they are at each scrape."""
        self.agent_quarantined_addresses.set_function(lambda: float(held()))

    def count_requests(self) -> Callable[..., Awaitable[web.StreamResponse]]:
        """An aiohttp middleware counting every CNI and libnetwork request by its outcome."""

        @web.middleware
        async def count(
            request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
        ) -> web.StreamResponse:
            response = await handler(request)
            named = request_operation(request.path)
            if named is not None:
                api, operation = named
                self.agent_requests.labels(api=api, operation=operation, outcome=outcome(api, response)).inc()
            return response

        return count


def request_operation(path: str) -> tuple[str, str] | None:
    """``(api, operation)`` of a request path the agent serves to runtimes (None: another path)."""
    if path.startswith(CNI_PREFIX):
        return "cni", path.removeprefix(CNI_PREFIX)
    if path.startswith(LIBNETWORK_PREFIXES):
        return "libnetwork", path.rsplit(".", 1)[-1]
    return None


def outcome(api: str, response: web.StreamResponse) -> str:
    """``ok``, ``pool_exhausted`` when no address was free, otherwise the answer's error code."""
    if response.status < 400:
        return "ok"
    body = getattr(response, "body", None)
    try:
        answer = json.loads(body) if isinstance(body, bytes) else {}
    except ValueError:
        answer = {}
    if api == "cni":
        error = answer.get("error") if isinstance(answer, dict) else None
        code = error.get("code") if isinstance(error, dict) else None
        return code if isinstance(code, str) else f"http_{response.status}"
    if isinstance(answer, dict) and answer.get("Err") == ERR_NO_AVAILABLE_IPS:
        return "pool_exhausted"
    return LIBNETWORK_OUTCOMES.get(response.status, f"http_{response.status}")
