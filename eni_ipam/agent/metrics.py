"""The node agent's metrics: what its pools may hand out and have handed out, the release
handshake's answers, its status reports and readiness — and nothing of the controller's, so a
scraped agent never exports a ``ready 0`` or an empty pool total that dashboards would sum."""

from __future__ import annotations

from collections.abc import Callable

from eni_ipam._infra.metrics import MetricSet


class AgentMetrics(MetricSet):
    def __init__(self) -> None:
        super().__init__()
        self.agent_ready = self.gauge(
            "agent_ready", "1 while the node agent is ready (state restored, socket served, ENIPool seen)"
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
            "A node agent's writes of its ENIPool status fields, by outcome (ok, conflict, failed)",
            ["outcome"],
        )
        self.agent_socket_refused = self.counter(
            "agent_socket_refused",
            "Connections and requests the node agent's socket refused, by reason (connection_limit: "
            "over socket_max_connections; read_timeout: not sent whole within socket_read_timeout)",
            ["reason"],
        )

    def report_ready(self, ready: Callable[[], bool]) -> None:
        """Export ``ready`` as it is at each scrape."""
        self.agent_ready.set_function(lambda: float(ready()))
