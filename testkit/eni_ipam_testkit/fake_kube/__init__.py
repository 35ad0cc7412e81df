"""A fake Kubernetes API server that the real kubectl, helm and lightkube use unchanged.

Role: the test double for the project's Kubernetes code and for checks of its Helm chart. It serves
HTTPS on ``127.0.0.1`` from the test's own event loop, so resourceVersions, watches, conflicts,
expiries, faults, RBAC denials and validation errors reach the real clients as a cluster sends them::

    async with FakeKube() as kube:
        await kube.apply_manifest(ENIPOOL_CRD_DEFAULT)  # CRDs arrive through the API, as on a cluster
        client = lightkube.AsyncClient(lightkube.KubeConfig.from_dict(kube.kubeconfig()))
        kube.write_kubeconfig(path)  # for kubectl, helm or ``eni-ipam run`` in a subprocess
        kube.kubeconfig(service_account=("kube-system", "eni-ipam"))  # RBAC applies to this one
        ...
        kube.faults.append(Fault(verb="patch", plural="enipools", status=409))
        await kube.drop_watches()
        kube.compact()

Served (:mod:`~eni_ipam_testkit.fake_kube.resources`): core ``v1`` nodes, namespaces, pods, events,
serviceaccounts, configmaps, secrets and services; ``apps/v1`` deployments and daemonsets;
``coordination.k8s.io/v1`` leases; ``policy/v1`` poddisruptionbudgets; ``rbac.authorization.k8s.io/v1``
roles, clusterroles and their bindings; ``apiextensions.k8s.io/v1`` customresourcedefinitions and the
custom resources of every stored CRD; ``admissionregistration.k8s.io/v1`` validatingadmissionpolicies
and their bindings (enforced in CEL, :mod:`~eni_ipam_testkit.fake_kube.admission`);
``authorization.k8s.io/v1`` selfsubjectaccessreviews and selfsubjectrulesreviews,
``authentication.k8s.io/v1`` selfsubjectreviews. Also
``/version``, discovery (legacy and aggregated, :mod:`~eni_ipam_testkit.fake_kube.discovery`),
OpenAPI v2 and v3 (:mod:`~eni_ipam_testkit.fake_kube.openapi`) and health paths. Any other path is a
404 ``Status``. No controller runs but the namespace controller's part: objects are stored, and nothing
else acts on them. A server starts with the namespaces every cluster has (``default``, ``kube-system``,
``kube-public``, ``kube-node-lease``).

Semantics kept (as the real kube-apiserver does it):

* TLS with a process-wide CA (:mod:`~eni_ipam_testkit.fake_kube.certs`); bearer tokens, random per
  server, for the admin (``system:masters``) and for ServiceAccounts; impersonation (``--as``,
  ``--as-group``) with its ``impersonate`` checks; RBAC for everyone but the admin, with its
  escalation checks on roles and bindings (:mod:`~eni_ipam_testkit.fake_kube.auth`), with the real
  401 and 403 answers;
* what the real server refuses before storing (:mod:`~eni_ipam_testkit.fake_kube.validation`): a
  built-in body its Go types cannot decode (400, or 422 for a patch), bad names, labels and
  annotations (422), a body over 3 MiB (413), an object over etcd's 1.5 MiB (500 ``etcdserver:
  request is too large``), a write into a namespace that does not exist (404) or is terminating (403);
  deleting a namespace deletes what it holds;
* one global, monotonically increasing ``resourceVersion``; ``uid``, ``creationTimestamp`` and a
  ``generation`` that moves only when something other than metadata (and status, for resources
  with a status subresource) changes; a write that changes nothing is a no-op;
* list: ``<Kind>List`` at the current version, label selectors (``=``, ``==``, ``!=``, ``in``,
  ``notin``, ``key``, ``!key``), field selectors on ``metadata.name``/``metadata.namespace`` and
  each type's registered field labels (any other field is a 400), ``limit``/``continue`` pages
  read from one snapshot (410 once its version is compacted); ``meta.k8s.io/v1`` Tables on request
  (:mod:`~eni_ipam_testkit.fake_kube.tables`), with a CRD's printer columns;
* watch: initial ``ADDED`` events for an unset/``"0"`` version, replay from a version kept in the
  bounded event log, an in-stream ``ERROR`` 410 for an older one, selector transitions as
  ``ADDED``/``DELETED``, ``timeoutSeconds``, ``BOOKMARK`` events every
  :attr:`FakeKube.bookmark_interval` when ``allowWatchBookmarks`` is set; watch lists
  (``sendInitialEvents``) ending their initial events with the ``k8s.io/initial-events-end`` bookmark;
* create (201, AlreadyExists, ``generateName``), get (NotFound), update (409 Conflict on a stale
  ``resourceVersion``; custom resources require one), patch (JSON patch, merge, strategic merge on
  built-in types following their OpenAPI patch metadata and a 415 on custom resources, server-side
  apply requiring ``fieldManager``; a ``resourceVersion`` left in the patched object is a
  precondition), status subresource rules for create, PUT and PATCH, ``dryRun=All``;
* field ownership (:mod:`~eni_ipam_testkit.fake_kube.managed`): ``managedFields`` per manager and
  operation, apply's removal of what its manager stopped applying, 409 conflicts and ``force``;
* ValidatingAdmissionPolicies judge every write through the API before it is stored, and a token
  bound to a Pod carries its node's name for them (``authentication.kubernetes.io/node-name``);
* fields a type does not have are pruned with a ``Warning`` header, or refused under
  ``fieldValidation=Strict`` (400 on create and update, 422 on patch);
* delete with finalizers (``deletionTimestamp`` first, removal when the finalizers are emptied, no
  new finalizers meanwhile), ``Orphan`` propagation, and owner-reference garbage collection;
* custom resources: structural-schema pruning, defaulting and validation (422 ``Invalid`` in the
  real wording, see :mod:`~eni_ipam_testkit.fake_kube.schema`); a CRD is served, Established, from
  the write that stores it (:mod:`~eni_ipam_testkit.fake_kube.crds`), and deleting it deletes its
  resources; a Node's ``spec.providerID`` is set once;
* Protobuf request bodies of the types typed clients send that way
  (:mod:`~eni_ipam_testkit.fake_kube.protobuf`); other Protobuf bodies are a 415.

Not emulated (docs/testing.md lists every difference and how each one answers): controllers,
admission beyond the checks above, ValidatingAdmissionPolicies (whose parameters and Kubernetes'
CEL library functions are refused with a 501) and Pod Security's profiles (a pod or template a
``baseline`` or ``restricted`` level would judge is a 501,
:mod:`~eni_ipam_testkit.fake_kube.podsecurity`),
the per-type rules of built-in objects beyond required fields, counts and ports (cross-field checks),
field-set conversion between versions, ``Foreground`` propagation (treated as ``Background``), lists
at an older version (410, as if compacted), CRD schema checks cel-python or this server cannot make
(refused with a 501 when the CRD is written), conversion webhooks, Protobuf responses, OpenAPI v2 in
Protobuf, HTTP/2, client certificates and anonymous requests (401), TokenReview, RBAC aggregation.
The garbage collector runs synchronously.

Time: the wall clock is read once per server, when it first writes a timestamp, and advanced by the
running event loop's clock from then on, so everything runs on virtual time under ``looptime``.
"""

from eni_ipam_testkit.fake_kube.resources import ENIPOOL_CRD_DEFAULT, ResourceType, StatusError
from eni_ipam_testkit.fake_kube.server import FakeKube, Fault, RequestRecord

__all__ = [
    "ENIPOOL_CRD_DEFAULT",
    "FakeKube",
    "Fault",
    "RequestRecord",
    "ResourceType",
    "StatusError",
]
