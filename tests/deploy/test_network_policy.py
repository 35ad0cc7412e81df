"""The chart's NetworkPolicies (``networkPolicy.enabled``): only Prometheus and the nodes reach the
metrics ports of the controllers and the agents, and a policy never allows more than it lists."""

from __future__ import annotations

from typing import Any

import pytest

from tests.deploy.conftest import one, render

pytestmark = pytest.mark.system


PROMETHEUS = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
    "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
}


def policies(overrides: dict[str, Any]) -> dict[str, dict[str, Any]]:
    docs = render(overrides)
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == "NetworkPolicy"}


def pods_of(docs: list[dict[str, Any]], kind: str) -> dict[str, str]:
    labels: dict[str, str] = one(docs, kind)["spec"]["template"]["metadata"]["labels"]
    return labels


def test_no_network_policy_unless_asked() -> None:
    assert policies({"agent": {"enabled": True}}) == {}


def test_only_prometheus_reaches_the_metrics_ports_of_the_controllers_and_the_agents() -> None:
    values = {"agent": {"enabled": True}, "networkPolicy": {"enabled": True}}
    docs = render(values)
    found = {d["metadata"]["name"]: d for d in docs if d["kind"] == "NetworkPolicy"}
    assert set(found) == {"eni-ipam", "eni-ipam-agent"}
    for name, kind, port in (
        ("eni-ipam", "Deployment", "http"),
        ("eni-ipam-agent", "DaemonSet", "agent-http"),
    ):
        spec = found[name]["spec"]
        selected = spec["podSelector"]["matchLabels"]
        assert selected.items() <= pods_of(docs, kind).items()  # its own pods
        other = "DaemonSet" if kind == "Deployment" else "Deployment"
        assert not selected.items() <= pods_of(docs, other).items()  # and not the others
        assert spec["policyTypes"] == ["Ingress"]
        assert spec["ingress"] == [{"ports": [{"port": port, "protocol": "TCP"}], "from": [PROMETHEUS]}]


@pytest.mark.parametrize(
    ("name", "http", "probes"),
    [("eni-ipam", "http", "probes"), ("eni-ipam-agent", "agent-http", "agent-probes")],
)
def test_the_nodes_addresses_are_allowed_to_the_probe_port_only(name: str, http: str, probes: str) -> None:
    """kubelet's probes have a listener of their own (decision 0043): the nodes reach it, and only
    Prometheus reaches the metrics port."""
    found = policies(
        {
            "agent": {"enabled": True},
            "networkPolicy": {"enabled": True, "nodeCIDRs": ["10.0.0.0/16", "fd00::/64"]},
        }
    )
    assert found[name]["spec"]["ingress"] == [
        {"ports": [{"port": http, "protocol": "TCP"}], "from": [PROMETHEUS]},
        {
            "ports": [{"port": probes, "protocol": "TCP"}],
            "from": [{"ipBlock": {"cidr": "10.0.0.0/16"}}, {"ipBlock": {"cidr": "fd00::/64"}}],
        },
    ]


def test_the_nodes_alone_reach_only_the_probe_port() -> None:
    found = policies({"networkPolicy": {"enabled": True, "prometheus": [], "nodeCIDRs": ["10.0.0.0/16"]}})
    assert found["eni-ipam"]["spec"]["ingress"] == [
        {"ports": [{"port": "probes", "protocol": "TCP"}], "from": [{"ipBlock": {"cidr": "10.0.0.0/16"}}]}
    ]


def test_with_no_peer_every_ingress_is_denied_not_allowed() -> None:
    """An ingress rule without ``from`` allows every source: with no peer listed, the chart writes no
    rule at all, which denies every connection."""
    found = policies({"networkPolicy": {"enabled": True, "prometheus": []}})
    assert found["eni-ipam"]["spec"]["ingress"] == []
