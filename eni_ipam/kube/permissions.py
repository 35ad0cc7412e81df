"""Every Kubernetes permission the code may use: the least-privilege contract with deploy/'s RBAC.

:class:`~eni_ipam.kube.api.KubeApi` refuses a request that is not listed here, and a test checks
that the ClusterRole and Role in deploy/ grant exactly what is listed (nothing missing, nothing
more), so RBAC and code cannot drift apart.
"""

from __future__ import annotations

GROUP = "eni-ipam.io"
"""API group of the ENIPool custom resource."""
VERSION = "v1alpha1"
KIND = "ENIPool"
PLURAL = "enipools"
CRD_GROUP = "apiextensions.k8s.io"

CLUSTER_PERMISSIONS: frozenset[tuple[str, str, str]] = frozenset(
    {
        # Nodes: the source of pools (provider id, zone, instance type) and their lifetime.
        ("", "nodes", "get"),
        ("", "nodes", "list"),
        ("", "nodes", "watch"),
        # Nodes, what eni-ipam writes on them (eni_ipam/kube/nodemarks.py): the eni-ipam.io/max-pods
        # annotation and the eni-ipam.io/no-room taint; nothing else of a Node is changed
        # (decision 0052).
        ("", "nodes", "patch"),
        # Pending pods scheduled to a node drive surge allocation.
        ("", "pods", "list"),
        ("", "pods", "watch"),
        # Pools: created from Nodes, spec read, finalizer removed when the Node goes.
        (GROUP, PLURAL, "get"),
        (GROUP, PLURAL, "list"),
        (GROUP, PLURAL, "watch"),
        (GROUP, PLURAL, "create"),
        (GROUP, PLURAL, "patch"),
        (GROUP, f"{PLURAL}/status", "get"),
        (GROUP, f"{PLURAL}/status", "patch"),
        # Events on Nodes (in the default namespace, as for every cluster-scoped object), for what an
        # operator must act on: made, then their count raised when the same is said again.
        ("", "events", "create"),
        ("", "events", "patch"),
        # The ENIPool CRD, by name only (CRD_RESOURCE_NAMES): read and watched by every replica,
        # updated when it is older than the controller's own (eni_ipam/kube/crd.py). Create is not
        # granted: it cannot be limited to a name.
        (CRD_GROUP, "customresourcedefinitions", "get"),
        (CRD_GROUP, "customresourcedefinitions", "list"),
        (CRD_GROUP, "customresourcedefinitions", "watch"),
        (CRD_GROUP, "customresourcedefinitions", "update"),
    }
)
"""(API group, resource, verb) granted cluster-wide by the ClusterRole."""

BY_NAME: dict[tuple[str, str], tuple[str, ...]] = {
    (CRD_GROUP, "customresourcedefinitions"): (f"{PLURAL}.{GROUP}",),
}
"""Resources the ClusterRole grants only on these names (a list or watch names one with the field
selector ``metadata.name``)."""

NAMESPACED_PERMISSIONS: frozenset[tuple[str, str, str]] = frozenset(
    {
        # The leader lease lives in the controller's own namespace.
        ("coordination.k8s.io", "leases", "get"),
        ("coordination.k8s.io", "leases", "create"),
        ("coordination.k8s.io", "leases", "update"),
    }
)
"""(API group, resource, verb) granted in the controller's namespace by the Role."""

PERMISSIONS = CLUSTER_PERMISSIONS | NAMESPACED_PERMISSIONS
"""Everything the controller (``eni-ipam run``) may do."""

CLAIMS_GROUP = "ipam.cluster.x-k8s.io"
"""Cluster API's IPAM group: IPAddressClaim and IPAddress."""

DISCOVERY_GROUP = "discovery.k8s.io"
"""EndpointSlices' group."""

AGENT_PERMISSIONS: frozenset[tuple[str, str, str]] = frozenset(
    {
        # The pods on its node (field selector spec.nodeName): an address a pod holds is never handed
        # out, whatever the state file says (checked at every start: status.podIPs); an address whose
        # pod is gone is released by the sweep, whatever happened to the pod's CNI DEL.
        ("", "pods", "list"),
        ("", "pods", "watch"),
        # Its own Node, once per start: the eni-ipam.io/not-ready startup taint is taken off when the
        # pool holds its minimum and the agent serves; nothing else of a Node is changed, and with
        # agent.confineToNode only that, on its own Node (decision 0052).
        ("", "nodes", "get"),
        ("", "nodes", "patch"),
        # Its own node's pool (watched by name): the addresses to hand out and the handshake marks.
        (GROUP, PLURAL, "list"),
        (GROUP, PLURAL, "watch"),
        # Its own status fields: the addresses in use and the handshake answers.
        (GROUP, f"{PLURAL}/status", "get"),
        (GROUP, f"{PLURAL}/status", "patch"),
        # Address claims served from the node's pool.
        (CLAIMS_GROUP, "ipaddressclaims", "list"),
        (CLAIMS_GROUP, "ipaddressclaims", "watch"),
        (CLAIMS_GROUP, "ipaddressclaims", "patch"),
        (CLAIMS_GROUP, "ipaddressclaims/status", "patch"),
        (CLAIMS_GROUP, "ipaddresses", "list"),
        (CLAIMS_GROUP, "ipaddresses", "watch"),
        (CLAIMS_GROUP, "ipaddresses", "create"),
        (CLAIMS_GROUP, "ipaddresses", "patch"),
        (CLAIMS_GROUP, "ipaddresses", "delete"),
        # EndpointSlices in every namespace, as kube-proxy watches them: a released address that a
        # Service still lists receives that Service's traffic, so it is not handed out again until no
        # slice lists it (the reuse quarantine, docs/decisions/0050). Only the node's own addresses
        # are kept of what is read.
        (DISCOVERY_GROUP, "endpointslices", "list"),
        (DISCOVERY_GROUP, "endpointslices", "watch"),
    }
)
"""(API group, resource, verb) the node agent's ClusterRole grants."""

STATUS_PERMISSIONS: frozenset[tuple[str, str, str]] = frozenset(
    {
        # `eni-ipam status` (eni_ipam/app/status.py), with the kubeconfig of whoever runs it: reads
        # only, one request each. docs/status.md gives a ClusterRole granting exactly these.
        (GROUP, PLURAL, "list"),
        ("", "nodes", "list"),
        # The Warning Events eni-ipam sent (on Nodes and on its CRD, in the default namespace).
        ("", "events", "list"),
        # The leader Lease, by name, in the controller's namespace.
        ("coordination.k8s.io", "leases", "get"),
        # The ENIPool CRD, by name (its revision against this eni-ipam's).
        (CRD_GROUP, "customresourcedefinitions", "get"),
    }
)
"""(API group, resource, verb) ``eni-ipam status`` asks for, and nothing else."""
