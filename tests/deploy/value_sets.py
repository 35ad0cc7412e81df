"""The chart's documented sets of values, one named case each, with where they are documented.

Each set is complete as a user would pass it, so it renders on values.yaml alone: the AWS sets carry
the region, which the chart does not default; the Azure and generic sets remove the aws section as
their pages say. tests/deploy/test_documented_values.py lints, renders and validates every one.
"""

from __future__ import annotations

import dataclasses
from typing import Any

ACCOUNT = "111122223333"
REGION = "eu-west-1"
IMAGE = f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/eni-ipam"
IRSA = {"eks.amazonaws.com/role-arn": f"arn:aws:iam::{ACCOUNT}:role/eni-ipam-prod-eu"}
AWS = {"region": REGION, "vpc_id": "vpc-0a1b2c3d4e5f60718"}
SUBSCRIPTION = "0a1b2c3d-0000-4000-8000-00000000abcd"
AZURE = {
    "subscription_id": SUBSCRIPTION,
    "resource_groups": ["MC_prod_aks_westeurope"],
    "vnet_id": f"/subscriptions/{SUBSCRIPTION}/resourceGroups/net/providers/Microsoft.Network"
    "/virtualNetworks/prod",
}
GENERIC = {
    "cluster_cidrs": ["10.244.0.0/16", "fd00:10:244::/56"],
    "service_cidrs": ["10.96.0.0/12"],
    "node_mask_ipv4": 24,
    "node_mask_ipv6": 64,
    "max_blocks_per_node": 0,
}
PROMETHEUS_LABELS = {"release": "kube-prometheus-stack"}


@dataclasses.dataclass(frozen=True)
class ValueSet:
    name: str
    documented_in: str
    """The page (docs/….md, or values.yaml for the chart's own comments) and the place in it."""
    values: dict[str, Any]
    custom_resources: frozenset[str] = frozenset()
    """Kinds of the custom resources the render holds (validated against their CRDs)."""

    @property
    def agent(self) -> bool:
        return bool(self.values.get("agent", {}).get("enabled"))


def _aws(**config: Any) -> dict[str, Any]:
    """A run configuration on AWS: the region and VPC of docs/deploy.md, with ``config`` over them."""
    aws = {**AWS, **config.pop("aws", {})}
    return {"aws": aws, "settings": {"cluster_name": "prod-eu", **config.pop("settings", {})}, **config}


VALUE_SETS: tuple[ValueSet, ...] = (
    ValueSet(
        "aws-helm-install",
        "docs/deploy.md §4, the helm install line (IRSA)",
        {
            "image": {"repository": IMAGE},
            "config": _aws(),
            "serviceAccount": {"annotations": IRSA},
        },
    ),
    ValueSet(
        "aws-values-file",
        "docs/deploy.md §4, my-values.yaml",
        {
            "image": {"repository": IMAGE},
            "serviceAccount": {"annotations": IRSA},
            "config": _aws(
                aws={"instance_tags_filter": {"kubernetes.io/cluster/prod-eu": "owned"}},
                node_defaults={"pre_allocate": 8, "subnet_tags": {"eni-ipam/pods": "true"}},
            ),
        },
    ),
    ValueSet(
        "aws-pod-identity",
        "docs/deploy.md §2 and docs/aws.md §2: EKS Pod Identity, the ServiceAccount without annotations",
        {"config": {"aws": {"region": REGION}}},
    ),
    ValueSet(
        "aws-tuned",
        "docs/aws.md §4, Example (rate limits, tags, prefix delegation, a shared account)",
        {
            "config": _aws(
                aws={
                    "instance_tags_filter": {"kubernetes.io/cluster/prod-eu": "owned"},
                    "rate_limits": {"AssignPrivateIpAddresses": {"burst": 200, "refill": 10}},
                },
                settings={
                    "interface_tags": {"team": "platform", "cost-center": "4711"},
                    "prefix_delegation": True,
                    "rate_limit_share": 0.5,
                    "gc_interval": "5m",
                    "gc_max_per_run": 25,
                },
            ),
        },
    ),
    ValueSet(
        "aws-custom-networking",
        "docs/aws.md §4, Per-node spec fields (first_interface_index 1, subnets and groups by tag)",
        {
            "config": _aws(
                node_defaults={
                    "first_interface_index": 1,
                    "subnet_tags": {"eni-ipam/pods": "true"},
                    "security_group_tags": {"eni-ipam/pods": "true"},
                    "exclude_interface_tags": {"owner": "someone-else"},
                    "delete_on_termination": False,
                },
            ),
        },
    ),
    ValueSet(
        "aws-iam-policy",
        "docs/aws.md §2, From the chart (awsIamPolicy: the ConfigMap with the cluster's IAM policy)",
        {
            "config": _aws(),
            "awsIamPolicy": {
                "render": True,
                "accountId": ACCOUNT,
                "subnetIds": ["subnet-0123456789abcdef0", "subnet-0fedcba9876543210"],
                "securityGroupIds": ["sg-0123456789abcdef0"],
            },
        },
    ),
    ValueSet(
        "azure-workload-identity",
        "docs/azure.md §3, Workload identity on AKS (azure-values.yaml)",
        {
            "serviceAccount": {"annotations": {"azure.workload.identity/client-id": SUBSCRIPTION}},
            "podLabels": {"azure.workload.identity/use": "true"},
            "config": {"provider": "azure", "aws": None, "azure": AZURE},
        },
    ),
    ValueSet(
        "generic",
        "docs/generic.md, Configuration (generic-values.yaml)",
        {
            "config": {
                "provider": "generic",
                "aws": None,
                "generic": GENERIC,
                "kubernetes": {"instance_ids": "node-name"},
                "node_defaults": {"pre_allocate": 16},
            },
        },
    ),
    ValueSet(
        "agent",
        "docs/node.md, Enabling it (--set agent.enabled=true)",
        {"config": _aws(), "agent": {"enabled": True}},
    ),
    ValueSet(
        "agent-without-claims",
        "docs/node.md, Enabling it (--set agent.config.claims=false: no Cluster API CRDs)",
        {"config": _aws(), "agent": {"enabled": True, "config": {"claims": False}}},
    ),
    ValueSet(
        "agent-unconfined",
        "docs/node.md, A compromised agent (--set agent.confineToNode=false, a cluster older than 1.30)",
        {"config": _aws(), "agent": {"enabled": True, "confineToNode": False}},
    ),
    ValueSet(
        "agent-options",
        "values.yaml agent: installCNI false, static pools, moved paths and port, extra env",
        {
            "config": _aws(),
            "agent": {
                "enabled": True,
                "installCNI": False,
                "config": {
                    "socket": "/var/lib/eni-ipam/agent.sock",
                    "state_dir": "/var/lib/eni-ipam",
                    "server": {"port": 9191},
                    "report_interval": "2s",
                    "log_level": "debug",
                    "pools": {"bridge-local": {"cidr": "10.99.0.0/24", "ranges": ["10.99.0.10-10.99.0.200"]}},
                    "exclude": ["10.0.1.250"],
                },
                "extraEnv": [{"name": "TZ", "value": "UTC"}],
            },
        },
    ),
    ValueSet(
        "generic-dual-stack-agent",
        "docs/generic.md, On the nodes, and docs/node.md (agent with ipv6 on the generic provider)",
        {
            "config": {"provider": "generic", "aws": None, "generic": GENERIC},
            "agent": {"enabled": True, "config": {"ipv6": True, "ipv6_pool_size": 512, "claims": False}},
        },
    ),
    ValueSet(
        "service-monitor",
        "docs/deploy.md §7 (serviceMonitor.enabled, labels)",
        {
            "config": _aws(),
            "serviceMonitor": {"enabled": True, "labels": PROMETHEUS_LABELS, "interval": "15s"},
        },
        frozenset({"ServiceMonitor"}),
    ),
    ValueSet(
        "prometheus-rule",
        "docs/deploy.md §7 (prometheusRule.enabled, labels, thresholds)",
        {
            "config": _aws(),
            "prometheusRule": {
                "enabled": True,
                "labels": PROMETHEUS_LABELS,
                "criticalSeverity": "page",
                "subnetFreeAddressesBelow": 128,
                "subnetTrendWindow": "12h",
                "deficitFor": "10m",
            },
        },
        frozenset({"PrometheusRule"}),
    ),
    ValueSet(
        "host-network",
        "docs/deploy.md §1 (hostNetwork: true when pod networking depends on eni-ipam)",
        {"config": _aws(), "hostNetwork": True},
    ),
    ValueSet(
        "single-replica",
        "values.yaml podDisruptionBudget (replicaCount 1 needs the PDB off)",
        {"config": _aws(), "replicaCount": 1, "podDisruptionBudget": {"enabled": False}},
    ),
    ValueSet(
        "other-namespace",
        'docs/deploy.md §4, another namespace (lease_namespace, priorityClassName "")',
        {
            "config": _aws(kubernetes={"lease_namespace": "eni-ipam-leases", "lease_name": "ipam-leader"}),
            "priorityClassName": "",
        },
    ),
    ValueSet(
        "existing-service-account",
        "values.yaml serviceAccount.create false and rbac.create false",
        {
            "config": _aws(),
            "serviceAccount": {"create": False, "name": "eni-ipam-managed"},
            "rbac": {"create": False},
        },
    ),
    ValueSet(
        "pod-overrides",
        "docs/deploy.md §3 (image tag and digest) and values.yaml's pod values",
        {
            "config": _aws(log_level="debug", shutdown_timeout="15s", server={"port": 8443}),
            "image": {
                "repository": IMAGE,
                "tag": "0.1.1",
                "digest": "sha256:" + "a" * 64,
                "pullPolicy": "Always",
            },
            "imagePullSecrets": [{"name": "regcred"}],
            "fullnameOverride": "ipam",
            "env": [{"name": "ENI_IPAM_SETTINGS__GC_INTERVAL", "value": "10m"}],
            "podAnnotations": {"example.com/team": "net"},
            "podLabels": {"team": "net"},
            "terminationGracePeriodSeconds": 30,
            "resources": {"requests": {"cpu": "200m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
            "livenessProbe": {"initialDelaySeconds": 5, "periodSeconds": 20},
            "nodeSelector": {"node-role.kubernetes.io/system": ""},
            "tolerations": [
                {"key": "dedicated", "operator": "Equal", "value": "system", "effect": "NoSchedule"}
            ],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["system"]}]}
                        ]
                    }
                }
            },
            "service": {"port": 8443},
        },
    ),
    ValueSet(
        "everything-on",
        "docs/deploy.md §1, every optional object at once (with docs/node.md's agent)",
        {
            "config": _aws(),
            "serviceAccount": {"annotations": IRSA},
            "agent": {"enabled": True},
            "serviceMonitor": {"enabled": True, "labels": PROMETHEUS_LABELS},
            "prometheusRule": {"enabled": True, "labels": PROMETHEUS_LABELS},
            "networkPolicy": {"enabled": True},
        },
        frozenset({"ServiceMonitor", "PrometheusRule"}),
    ),
    ValueSet(
        "network-policy",
        "docs/deploy.md §7, Who can reach the endpoints (nodeCIDRs; the agent on the pod network)",
        {
            "config": _aws(),
            "agent": {"enabled": True, "hostNetwork": False},
            "networkPolicy": {"enabled": True, "nodeCIDRs": ["10.0.0.0/16"]},
        },
    ),
    ValueSet(
        "agent-scraped-without-the-operator",
        "docs/deploy.md §7 (agent.listen: node, for a Prometheus without the Operator)",
        {"config": _aws(), "agent": {"enabled": True, "listen": "node"}},
    ),
)
