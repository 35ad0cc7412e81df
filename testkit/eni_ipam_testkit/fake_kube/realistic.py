"""Objects shaped like a production cluster's: Nodes, pending Pods and ENIPools at their real sizes.

Role: the objects tests use to measure what the controller keeps per object, and that benchmarks
load by the thousand. The fake API server stores whatever it is given; the small hand-written Nodes
of most tests (a name, two labels, a provider id) say nothing about memory, since a kubelet's Node
carries tens of kilobytes the controller never reads.

What a real Node carries, and so what :func:`realistic_node` writes (≈13 KB of compact JSON by default):
``status.images`` (the node's image cache, 50 entries with digests and sizes), ``managedFields``
from the kubelet, the cloud controller manager and the node controller (each with its ``fieldsV1``
tree), about 20 labels, the kubelet's and the CSI driver's annotations, the usual conditions with
heartbeats, addresses, ``nodeInfo``, capacity and allocatable. :func:`realistic_pending_pod` is a
scheduled Pod still waiting for its sandbox; :func:`realistic_enipool` an ENIPool as the controller
and the node agent leave it (one entry per pool address, interfaces, conditions).

Invariants: the output is deterministic for the same arguments (a seed derived from the name), is
valid for the fake API server (it is stored and served unchanged), and never shares a mutable
value between two calls.
"""

from __future__ import annotations

import hashlib
import random
from typing import Any

from eni_ipam.core.devices import mac_text

JSON = dict[str, Any]

_STAMP = "2026-11-02T09:14:07Z"
_HEARTBEAT = "2026-11-21T08:03:41Z"

_IMAGES = (
    "602401143452.dkr.ecr.us-east-1.amazonaws.com/amazon-k8s-cni",
    "602401143452.dkr.ecr.us-east-1.amazonaws.com/eks/kube-proxy",
    "602401143452.dkr.ecr.us-east-1.amazonaws.com/eks/pause",
    "public.ecr.aws/ebs-csi-driver/aws-ebs-csi-driver",
    "registry.k8s.io/sig-storage/livenessprobe",
    "quay.io/prometheus/node-exporter",
    "docker.io/grafana/promtail",
    "docker.io/library/nginx",
    "ghcr.io/acme/payments",
    "ghcr.io/acme/checkout",
    "ghcr.io/acme/search",
    "ghcr.io/acme/web",
)


def _uid(rng: random.Random) -> str:
    h = f"{rng.getrandbits(128):032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _digest(rng: random.Random) -> str:
    return "sha256:" + hashlib.sha256(rng.getrandbits(64).to_bytes(8, "big")).hexdigest()


def _images(rng: random.Random, count: int) -> list[JSON]:
    images = []
    for n in range(count):
        repo = _IMAGES[n % len(_IMAGES)]
        tag = f"v1.{rng.randrange(10, 40)}.{rng.randrange(0, 20)}-eksbuild.{n}"
        # Most images of a node's cache are the application's, pulled by digest only; the rest
        # (system images) are listed under their digest and their tag.
        names = [f"{repo}@{_digest(rng)}"] + ([f"{repo}:{tag}"] if n < 3 else [])
        images.append({"names": names, "sizeBytes": rng.randrange(10**6, 9 * 10**8)})
    return images


def _managed(manager: str, operation: str, fields: JSON, subresource: str = "") -> JSON:
    entry: JSON = {
        "manager": manager,
        "operation": operation,
        "apiVersion": "v1",
        "time": _HEARTBEAT,
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
    }
    if subresource:
        entry["subresource"] = subresource
    return entry


def _keys(*names: str) -> JSON:
    return {f"f:{name}": {} for name in names}


def realistic_node(
    name: str,
    provider_id: str,
    *,
    zone: str = "us-east-1a",
    instance_type: str = "m5.large",
    images: int = 50,
    labels: dict[str, str] | None = None,
) -> JSON:
    """A Node as an EKS kubelet and cloud controller leave it (≈13 KB of compact JSON with 50 images).

    ``labels`` are added to (and override) the usual ones; the zone and instance-type labels
    always carry ``zone`` and ``instance_type``.
    """
    rng = random.Random(f"node/{name}")
    region = zone[:-1]
    ip = f"10.{rng.randrange(0, 256)}.{rng.randrange(0, 256)}.{rng.randrange(1, 255)}"
    hostname = f"ip-{ip.replace('.', '-')}.{region}.compute.internal"
    all_labels = {
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/instance-type": instance_type,
        "beta.kubernetes.io/os": "linux",
        "eks.amazonaws.com/capacityType": "ON_DEMAND",
        "eks.amazonaws.com/nodegroup": "general-purpose",
        "eks.amazonaws.com/nodegroup-image": f"ami-{rng.getrandbits(64):017x}",
        "eks.amazonaws.com/sourceLaunchTemplateId": f"lt-{rng.getrandbits(64):017x}",
        "eks.amazonaws.com/sourceLaunchTemplateVersion": "7",
        "failure-domain.beta.kubernetes.io/region": region,
        "failure-domain.beta.kubernetes.io/zone": zone,
        "k8s.io/cloud-provider-aws": f"{rng.getrandbits(128):032x}",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": hostname,
        "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": instance_type,
        "topology.ebs.csi.aws.com/zone": zone,
        "topology.k8s.aws/zone-id": f"use1-az{rng.randrange(1, 7)}",
        "topology.kubernetes.io/region": region,
        "topology.kubernetes.io/zone": zone,
        "team.example.com/cost-center": f"cc-{rng.randrange(1000, 9999)}",
        **(labels or {}),
    }
    all_labels["topology.kubernetes.io/zone"] = zone
    all_labels["node.kubernetes.io/instance-type"] = instance_type
    conditions = [
        {
            "type": kind,
            "status": "False",
            "lastHeartbeatTime": _HEARTBEAT,
            "lastTransitionTime": _STAMP,
            "reason": f"KubeletHasSufficient{word}",
            "message": f"kubelet has sufficient {word.lower()} available",
        }
        for kind, word in (("MemoryPressure", "Memory"), ("DiskPressure", "Disk"), ("PIDPressure", "PID"))
    ]
    conditions.append(
        {
            "type": "Ready",
            "status": "True",
            "lastHeartbeatTime": _HEARTBEAT,
            "lastTransitionTime": _STAMP,
            "reason": "KubeletReady",
            "message": "kubelet is posting ready status",
        }
    )
    kubelet_fields = {
        "f:metadata": {
            "f:annotations": _keys(
                "alpha.kubernetes.io/provided-node-ip",
                "node.alpha.kubernetes.io/ttl",
                "volumes.kubernetes.io/controller-managed-attach-detach",
            ),
            "f:labels": _keys(*(k for k in all_labels if not k.startswith("topology.k8s.aws"))),
        },
        "f:spec": _keys("providerID"),
    }
    status_fields = {
        "f:status": {
            "f:allocatable": _keys(
                "cpu", "ephemeral-storage", "hugepages-1Gi", "hugepages-2Mi", "memory", "pods"
            ),
            "f:capacity": _keys(
                "cpu", "ephemeral-storage", "hugepages-1Gi", "hugepages-2Mi", "memory", "pods"
            ),
            "f:conditions": {
                f'k:{{"type":"{c["type"]}"}}': _keys(
                    "lastHeartbeatTime", "lastTransitionTime", "message", "reason", "status"
                )
                for c in conditions
            },
            "f:daemonEndpoints": {"f:kubeletEndpoint": _keys("Port")},
            "f:images": {},
            "f:nodeInfo": _keys("bootID", "containerRuntimeVersion", "kernelVersion", "kubeProxyVersion"),
        }
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": _uid(rng),
            "creationTimestamp": _STAMP,
            "labels": all_labels,
            "annotations": {
                "alpha.kubernetes.io/provided-node-ip": ip,
                "csi.volume.kubernetes.io/nodeid": '{"ebs.csi.aws.com":"'
                + provider_id.rsplit("/", 1)[-1]
                + '"}',
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
            "managedFields": [
                _managed("kubelet", "Update", kubelet_fields),
                _managed(
                    "aws-cloud-controller-manager",
                    "Update",
                    {
                        "f:metadata": {
                            "f:labels": _keys("topology.k8s.aws/zone-id", "k8s.io/cloud-provider-aws")
                        }
                    },
                ),
                _managed(
                    "kube-controller-manager",
                    "Update",
                    {"f:metadata": {"f:annotations": _keys("node.alpha.kubernetes.io/ttl")}},
                ),
                _managed("kubelet", "Update", status_fields, subresource="status"),
            ],
        },
        "spec": {"providerID": provider_id},
        "status": {
            "capacity": {
                "cpu": "2",
                "ephemeral-storage": "83873772Ki",
                "hugepages-1Gi": "0",
                "hugepages-2Mi": "0",
                "memory": "7936496Ki",
                "pods": "29",
            },
            "allocatable": {
                "cpu": "1930m",
                "ephemeral-storage": "76224326324",
                "hugepages-1Gi": "0",
                "hugepages-2Mi": "0",
                "memory": "7246320Ki",
                "pods": "29",
            },
            "conditions": conditions,
            "addresses": [
                {"type": "InternalIP", "address": ip},
                {"type": "InternalDNS", "address": hostname},
                {"type": "Hostname", "address": hostname},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": f"{rng.getrandbits(128):032x}",
                "systemUUID": _uid(rng),
                "bootID": _uid(rng),
                "kernelVersion": "6.1.112-122.189.amzn2023.x86_64",
                "osImage": "Amazon Linux 2023.6.20241010",
                "containerRuntimeVersion": "containerd://1.7.22",
                "kubeletVersion": "v1.31.0-eks-a737599",
                "kubeProxyVersion": "v1.31.0-eks-a737599",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
            "images": _images(rng, images),
        },
    }


def realistic_pending_pod(name: str, namespace: str, node_name: str) -> JSON:
    """A Pod bound to ``node_name`` and still Pending (its sandbox waits for an address): ≈3 KB."""
    rng = random.Random(f"pod/{namespace}/{name}")
    app = name.rsplit("-", 2)[0]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": _uid(rng),
            "creationTimestamp": _HEARTBEAT,
            "generateName": name[: name.rfind("-") + 1],
            "labels": {"app.kubernetes.io/name": app, "pod-template-hash": f"{rng.getrandbits(40):010x}"},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": name[: name.rfind("-")],
                    "uid": _uid(rng),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
            "managedFields": [
                _managed(
                    "kube-controller-manager",
                    "Update",
                    {
                        "f:metadata": {
                            "f:generateName": {},
                            "f:labels": _keys("app.kubernetes.io/name", "pod-template-hash"),
                        },
                        "f:spec": {
                            "f:containers": {
                                f'k:{{"name":"{app}"}}': _keys("image", "name", "ports", "resources")
                            }
                        },
                    },
                ),
                _managed(
                    "kubelet",
                    "Update",
                    {"f:status": {"f:conditions": {}, "f:containerStatuses": {}}},
                    "status",
                ),
            ],
        },
        "spec": {
            "nodeName": node_name,
            "serviceAccountName": "default",
            "containers": [
                {
                    "name": app,
                    "image": f"ghcr.io/example-org/{app}:v2.{rng.randrange(0, 40)}.{rng.randrange(0, 9)}",
                    "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                    "resources": {
                        "requests": {"cpu": "250m", "memory": "256Mi"},
                        "limits": {"memory": "512Mi"},
                    },
                    "env": [{"name": "LOG_LEVEL", "value": "info"}, {"name": "PORT", "value": "8080"}],
                    "volumeMounts": [
                        {
                            "name": "kube-api-access",
                            "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                            "readOnly": True,
                        }
                    ],
                }
            ],
            "tolerations": [
                {
                    "key": "node.kubernetes.io/not-ready",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
                {
                    "key": "node.kubernetes.io/unreachable",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
            ],
        },
        "status": {
            "phase": "Pending",
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": _HEARTBEAT},
                {
                    "type": "ContainersReady",
                    "status": "False",
                    "lastTransitionTime": _HEARTBEAT,
                    "reason": "ContainersNotReady",
                    "message": f"containers with unready status: [{app}]",
                },
            ],
            "qosClass": "Burstable",
            "startTime": _HEARTBEAT,
            "containerStatuses": [
                {
                    "name": app,
                    "ready": False,
                    "restartCount": 0,
                    "image": f"ghcr.io/example-org/{app}",
                    "imageID": "",
                    "state": {"waiting": {"reason": "ContainerCreating"}},
                }
            ],
        },
    }


def realistic_enipool(
    name: str,
    instance_id: str,
    *,
    addresses: int = 40,
    used: int = 12,
    node_uid: str = "",
    zone: str = "us-east-1a",
    instance_type: str = "m5.large",
) -> JSON:
    """An ENIPool as the controller and the node agent leave it: ``addresses`` pool entries over as
    many interfaces as an instance of that size needs, ``used`` of them reported by the agent."""
    rng = random.Random(f"enipool/{name}")
    base = rng.randrange(0, 250)
    per_interface = 10
    interfaces = []
    pool: JSON = {}
    for n in range((addresses + per_interface - 1) // per_interface):
        eni = f"eni-{rng.getrandbits(64):017x}"
        subnet = f"subnet-{rng.getrandbits(64):017x}"
        count = min(per_interface, addresses - n * per_interface)
        for k in range(count):
            pool[f"10.{n}.{base}.{10 + k}"] = {"interface": eni, "subnet": subnet}
        interfaces.append(
            {
                "id": eni,
                "deviceIndex": n,
                "subnet": subnet,
                "primaryIP": f"10.{n}.{base}.4",
                "macAddress": mac_text(0x02 << 40 | rng.getrandbits(40)),  # EC2's: locally administered
                "securityGroups": [f"sg-{rng.getrandbits(64):017x}"],
                "addresses": count,
                "prefixes": [],
            }
        )
    subnets = {entry["subnet"]: {"cidr": f"10.{n}.0.0/16"} for n, entry in enumerate(pool.values())}
    condition = {"observedGeneration": 1, "lastTransitionTime": _STAMP}
    return {
        "apiVersion": "eni-ipam.io/v1alpha1",
        "kind": "ENIPool",
        "metadata": {
            "name": name,
            "uid": _uid(rng),
            "resourceVersion": str(rng.randrange(10**6, 10**8)),
            "generation": 1,
            "creationTimestamp": _STAMP,
            "labels": {"app.kubernetes.io/managed-by": "eni-ipam"},
            "annotations": {"eni-ipam.io/defaults": '{"preAllocate": 8}'},
            "finalizers": ["eni-ipam.io/pool"],
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": name, "uid": node_uid or _uid(rng)}
            ],
        },
        "spec": {
            "instanceID": instance_id,
            "instanceType": instance_type,
            "zone": zone,
            "preAllocate": 8,
            "deleteOnTermination": True,
        },
        "status": {
            "pool": pool,
            "release": {},
            "subnets": subnets,
            "interfaces": interfaces,
            "stats": {
                "available": addresses,
                "used": used,
                "needed": 0,
                "excess": 0,
                "capacity": 29,
                "remainingInterfaces": 0,
                "atCapacity": False,
                "limitsKnown": True,
                "running": True,
                "prefixDelegated": False,
            },
            "message": "",
            "observedGeneration": 1,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "PoolReady",
                    "message": "the pool is within its watermarks",
                    **condition,
                },
                {
                    "type": "AtCapacity",
                    "status": "False",
                    "reason": "RoomLeft",
                    "message": "the instance can take more addresses",
                    **condition,
                },
            ],
            "used": sorted(pool)[:used],
            "releaseAnswers": {},
        },
    }
