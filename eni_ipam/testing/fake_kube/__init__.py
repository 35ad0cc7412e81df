"""A fake Kubernetes API server that speaks the real list/watch protocol over HTTP on 127.0.0.1.

Role: the test double for the project's Kubernetes code. That code talks to the API server through
the real lightkube client; here the client talks over real HTTP to :class:`FakeKube` instead of a
cluster, so resourceVersions, watches, conflicts, expiries and faults behave as in production and
a test can drive every edge the informer and the lease elector must handle::

    async with FakeKube() as kube:
        kube.register_crd(ENIPOOL_CRD_DEFAULT)
        client = lightkube.AsyncClient(lightkube.KubeConfig.from_dict(kube.kubeconfig()))
        ...
        kube.faults.append(Fault(verb="patch", plural="enipools", status=409))
        await kube.drop_watches()
        kube.compact()

Served: core ``v1`` ``nodes``, ``namespaces`` (cluster-scoped), ``pods`` and ``events``
(namespaced), ``coordination.k8s.io/v1`` ``leases`` (namespaced), and custom resources after
:meth:`FakeKube.register_crd`. Any other path is a 404 ``Status``.

Semantics kept (as the real kube-apiserver does it):

* one global, monotonically increasing ``resourceVersion``; ``uid``, ``creationTimestamp`` and a
  ``generation`` that moves only when something other than metadata (and status, for resources
  with a status subresource) changes; a write that changes nothing is a no-op;
* list: ``<Kind>List`` at the current version, label selectors (``=``, ``==``, ``!=``, ``in``,
  ``notin``, ``key``, ``!key``), field selectors on ``metadata.name``/``metadata.namespace`` and
  each type's registered field labels (any other field is a 400), ``limit``/``continue`` pages
  read from one snapshot (410 once its version is compacted);
* watch: initial ``ADDED`` events for an unset/``"0"`` version, replay from a version kept in the
  bounded event log, an in-stream ``ERROR`` 410 for an older one, selector transitions as
  ``ADDED``/``DELETED``, ``timeoutSeconds``, ``BOOKMARK`` events every
  :attr:`FakeKube.bookmark_interval` when ``allowWatchBookmarks`` is set;
* create (201, AlreadyExists, ``generateName``), get (NotFound), update (409 Conflict on a stale
  ``resourceVersion``; custom resources require one), patch (merge, strategic as merge, JSON patch,
  simplified server-side apply requiring ``fieldManager``; a ``resourceVersion`` left in the
  patched object is a precondition), status subresource rules for create, PUT and PATCH;
* delete with finalizers (``deletionTimestamp`` first, removal when the finalizers are emptied, no
  new finalizers meanwhile), ``Orphan`` propagation, and owner-reference garbage collection;
* structural-schema pruning, defaulting and validation of custom resources (422 ``Invalid``
  naming the field path), see :mod:`eni_ipam.testing.fake_kube.schema`;
* bearer-token authentication (401 without the token from :meth:`FakeKube.kubeconfig`).

Not emulated: discovery (``/api``, ``/apis``, ``/version``, OpenAPI), RBAC and admission, any
controller (no scheduler or kubelet: pods stay ``Pending`` and are deleted at once; no namespace
controller: deleting a namespace leaves its objects, and objects may be created in namespaces that
do not exist), ``Foreground`` propagation (treated as ``Background``), strategic-merge list merging,
managedFields and apply conflicts, ``dryRun`` (rejected with 400), ``resourceVersion``/
``resourceVersionMatch`` on list (always the latest state), ``sendInitialEvents``, CEL validation
rules, conversion webhooks, Protobuf, HTTP/2 and TLS. The garbage collector runs synchronously.

Time: only the running event loop's clock is used, so everything runs on virtual time under
``looptime``; timestamps written to objects come from the wall clock.
"""

from eni_ipam.testing.fake_kube.resources import ENIPOOL_CRD_DEFAULT, ResourceType, StatusError
from eni_ipam.testing.fake_kube.server import FakeKube, Fault, RequestRecord

__all__ = ["ENIPOOL_CRD_DEFAULT", "FakeKube", "Fault", "RequestRecord", "ResourceType", "StatusError"]
