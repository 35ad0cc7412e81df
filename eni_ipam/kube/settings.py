"""Settings of the Kubernetes node source and leader election (the ``kubernetes:`` section).

A :class:`~eni_ipam.config.schema.ConfigModel`: frozen, validated, errors name the field. The lease
timings follow client-go's defaults and rules: ``lease_duration > renew_deadline > retry_period``
(a leader that cannot renew within the deadline stops before any standby may take over).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, model_validator

from eni_ipam.config.schema import ConfigModel, FieldError, PositiveDuration, PositiveInt, PositiveNumber
from eni_ipam.core.fields import TagMap
from eni_ipam.core.model import EMPTY_TAGS


def _not_blank(value: str) -> str:
    if not value:
        raise ValueError("must not be empty")
    return value


_Stripped = Annotated[str, AfterValidator(str.strip)]
_NotBlank = Annotated[str, AfterValidator(str.strip), AfterValidator(_not_blank)]


class KubeSettings(ConfigModel):
    kubeconfig: _Stripped = ""
    """Path of a kubeconfig file; empty uses the pod's service account (in-cluster)."""

    lease_name: _NotBlank = "eni-ipam"
    """Name of the coordination.k8s.io Lease the replicas compete for."""

    lease_namespace: _Stripped = ""
    """Namespace of the Lease; empty means ``$POD_NAMESPACE`` (set by the chart), else ``kube-system``."""

    identity: _Stripped = ""
    """This replica's name in the Lease; empty means ``$POD_NAME``, else the host name with a
    random suffix (two processes on one host must never pass for one holder)."""

    lease_duration: PositiveDuration = 15.0
    """Seconds a standby waits after the last renewal it saw before taking over (client-go's
    default). When a leader dies without releasing the lease, failover takes at most this plus
    ``retry_period × 2.2`` (a standby's longest wait to see the last renewal) and one request."""

    renew_deadline: PositiveDuration = 10.0
    """Seconds a leader keeps trying to renew before it stops all mutations, and how long after
    a successful renewal started its mutations are allowed, checked at each call (a paused process
    refuses until it has renewed). Shorter than ``lease_duration``, so a leader that lost contact,
    or was paused, stops before anyone else can lead."""

    retry_period: PositiveDuration = 2.0
    """Seconds between renewals, and between a standby's attempts to acquire."""

    api_unhealthy_after: PositiveDuration = 60.0
    """Seconds the API server may reject this process's credentials (401) or not answer, with no
    request getting through, before ``/readyz`` fails and ``eni_ipam_kube_api_unhealthy`` says so:
    longer than an API server's rolling restart, short enough that an expired token is seen within
    minutes (``EniIpamNotReady`` then fires after its own 5 minutes)."""

    node_selector: TagMap = EMPTY_TAGS
    """Labels a Node must carry to get a pool (empty: every Node)."""

    instance_ids: Literal["", "provider-id", "node-name"] = ""
    """Where a pool's ``instanceID`` comes from: ``provider-id`` (the Node's ``spec.providerID``; a
    Node gets its pool once the cloud controller has set it) or ``node-name`` (for clusters with no
    cloud controller). Empty: ``node-name`` with the generic provider, ``provider-id`` otherwise."""

    status_qps: PositiveNumber = 10.0
    """Pool status writes per second (token bucket refill): status is informative, and the API
    server's priority and fairness budget is shared with the rest of the cluster. Statuses wait in
    line by need (pending pods, then deficit), and one the pool already holds spends nothing."""

    status_burst: PositiveInt = 50
    """Status writes that may go out at once after a quiet period."""

    watch_timeout: PositiveDuration = 300.0
    """Seconds a watch request stays open before the server ends it and it is renewed; a watch
    silent for this long plus a minute is treated as dropped and restarted."""

    update_crd: bool = True
    """Whether the controller replaces the cluster's ENIPool CRD when it is an older revision than its
    own (helm never upgrades a chart's CRDs); the chart's ClusterRole then grants ``update`` on that
    one CRD. False: an older CRD that would prune the status stops the status writes and makes
    ``/readyz`` fail, naming the command that applies the CRD (docs/deploy.md, section 8)."""

    max_pods_annotation: bool = True
    """Whether every maintained Node carries ``eni-ipam.io/max-pods``: the most pods it can run with
    an address each, plus two host-network ones (what ``eni-ipam max-pods`` computes for its type and
    its pool's spec). Compare it with the kubelet's ``maxPods`` (the Node's ``status.capacity.pods``):
    a kubelet that admits more pods than that leaves the rest without an address. One patch per Node
    when the value changes; the controller's ClusterRole grants ``patch`` on Nodes either way."""

    no_room_taint: bool = False
    """Whether a Node that has no address left for one more pod, and cannot get one (its instance is
    full, or its subnets or security groups stop it), is tainted ``eni-ipam.io/no-room:NoSchedule``
    until room returns, so the scheduler places new pods elsewhere (and an autoscaler adds a node)
    instead of leaving them in ContainerCreating. Off by default: a DaemonSet whose pods run in the
    host's network needs no address, yet does not tolerate the taint unless told to (docs/node.md,
    "Scheduling")."""

    no_room_after: PositiveDuration = 30.0
    """Seconds a Node must have had no room before it is tainted: longer than a pass that lands
    addresses a moment after the last free one went, so a Node at its watermark does not flap."""

    room_after: PositiveDuration = 60.0
    """Seconds room must have been back before the taint comes off: twice ``no_room_after``, so a
    pod that takes the one address freed does not bring the taint straight back."""

    @model_validator(mode="after")
    def _timings(self) -> KubeSettings:
        if not self.renew_deadline > self.retry_period:
            raise FieldError("renew_deadline", "must be longer than retry_period")
        if not self.lease_duration > self.renew_deadline:
            raise FieldError("lease_duration", "must be longer than renew_deadline")
        if self.watch_timeout < 1:
            raise FieldError("watch_timeout", "must be at least 1s")
        return self


INSTANCE_ID_SOURCES = ("provider-id", "node-name")


def instance_id_source(settings: KubeSettings, provider: str) -> str:
    """``instance_ids`` resolved: generic clusters have no cloud controller to set providerID, so
    their pools name instances by node."""
    return settings.instance_ids or ("node-name" if provider == "generic" else "provider-id")
