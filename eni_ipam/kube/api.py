"""A thin adapter over lightkube: the only module that talks to the Kubernetes client.

Objects cross this boundary as plain dicts (lightkube's generic resources, which are dicts, so
nothing is decoded into heavy models). A list may project each object as its page is read
(``project``), so a caller that keeps only a projection never holds more than one page of whole
objects. Every request:

* is checked against :mod:`~eni_ipam.kube.permissions` (a request the RBAC in deploy/ would not
  allow is a bug, caught by the tests, never a surprise 403 in a cluster);
* is counted in ``eni_ipam_kube_requests_total{verb,resource,code}``;
* raises only :class:`~eni_ipam.kube.errors.KubeError` subclasses — never lightkube's or httpx's types.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar, overload

# The HTTP stack imports its async backends on the first request, from disk, on the event loop
# (0.2 s of stall at start on a cold page cache, measured): imported with this module instead.
import anyio._backends._asyncio  # noqa: F401
import httpcore2._backends.anyio  # noqa: F401
import httpx2
import lightkube
from lightkube.config.kubeconfig import SingleConfig
from lightkube.core.exceptions import ApiError
from lightkube.generic_resource import create_global_resource, create_namespaced_resource
from lightkube.types import PatchType

from eni_ipam.adapters.metrics.registry import MetricSet
from eni_ipam.errors import ConfigError
from eni_ipam.kube import errors, permissions
from eni_ipam.kube.health import ApiHealth

T = TypeVar("T")
Obj = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Kind:
    """One resource type the controller uses."""

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool
    install: str = dataclasses.field(default="", compare=False)
    """What installs the kind when the API server does not serve it (its CRD), as an operator runs
    it; empty: a kind every cluster serves, or one whose absence its user handles itself."""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def resource(self) -> Any:
        """lightkube's (generic, dict-based) resource class; one per kind, as lightkube requires."""
        return _resource(self)


@functools.cache
def _resource(kind: Kind) -> Any:
    make = create_namespaced_resource if kind.namespaced else create_global_resource
    return make(kind.group, kind.version, kind.kind, kind.plural)


def _as_data(view: Any) -> Obj:
    from eni_ipam.kube.views import as_data

    return as_data(view)


NODES = Kind("", "v1", "Node", "nodes", namespaced=False)
PODS = Kind("", "v1", "Pod", "pods", namespaced=True)
LEASES = Kind("coordination.k8s.io", "v1", "Lease", "leases", namespaced=True)
EVENTS = Kind("", "v1", "Event", "events", namespaced=True)
CRDS = Kind(
    "apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions", namespaced=False
)
ENIPOOLS = Kind(
    permissions.GROUP,
    permissions.VERSION,
    permissions.KIND,
    permissions.PLURAL,
    namespaced=False,
    install="kubectl apply --server-side -f deploy/kubernetes/crd.yaml (or install the Helm chart, which "
    "carries it)",
)
IPADDRESSCLAIMS = Kind(
    permissions.CLAIMS_GROUP, "v1beta1", "IPAddressClaim", "ipaddressclaims", namespaced=True
)
IPADDRESSES = Kind(permissions.CLAIMS_GROUP, "v1beta1", "IPAddress", "ipaddresses", namespaced=True)
ENDPOINTSLICES = Kind(permissions.DISCOVERY_GROUP, "v1", "EndpointSlice", "endpointslices", namespaced=True)

_BY_CODE: dict[int, type[errors.KubeError]] = {
    401: errors.KubeForbidden,
    403: errors.KubeForbidden,
    404: errors.KubeNotFound,
    409: errors.KubeConflict,
    410: errors.KubeGone,
    422: errors.KubeInvalid,
    429: errors.KubeThrottled,
}


def _retry_after(response: Any) -> float | None:
    raw = response.headers.get("Retry-After") if response is not None else None
    try:
        return float(raw) if raw else None
    except ValueError:  # an HTTP date: rare from the API server; the caller's backoff applies
        return None


def _error_class(code: int) -> type[errors.KubeError]:
    return _BY_CODE.get(code, errors.KubeUnavailable if code >= 500 else errors.KubeError)


def translate(exc: BaseException) -> errors.KubeError | None:
    """The project's error for a lightkube/httpx exception (None for anything else).

    lightkube raises ApiError (with the server's Status) for most failures, but a watch refused
    before its stream starts (a 429 while the server's storage initialises) surfaces as a plain
    HTTPStatusError; both carry Retry-After in the response headers.
    """
    if isinstance(exc, ApiError):
        status = exc.status
        code = int(status.code or 0)
        retry_after = _retry_after(getattr(exc, "response", None))
        details = status.details
        if retry_after is None and details is not None and details.retryAfterSeconds:
            retry_after = float(details.retryAfterSeconds)
        return _error_class(code)(
            status.message or "", code=code, reason=status.reason or "", retry_after=retry_after
        )
    if isinstance(exc, httpx2.HTTPStatusError):
        code = exc.response.status_code
        return _error_class(code)(
            str(exc), code=code, reason=exc.response.reason_phrase, retry_after=_retry_after(exc.response)
        )
    if isinstance(exc, httpx2.HTTPError | OSError):
        return errors.KubeUnavailable(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)
    return None


def client_from_kubeconfig(
    path: str = "",
    *,
    context: str = "",
    field: str = "kubernetes.kubeconfig",
    fix: str = "",
    timeout: float = 30.0,
) -> lightkube.AsyncClient:
    """A client from a kubeconfig file (its current context, or ``context``), or the pod's service
    account when ``path`` is empty. ``field`` and ``fix``: as :func:`load_kubeconfig`'s; ``timeout``:
    seconds a request may take.

    Raises:
        ConfigError: the kubeconfig cannot be read or has no such context, or no in-cluster service
            account exists.
    """
    config = load_kubeconfig(path, context=context, field=field, fix=fix)
    return lightkube.AsyncClient(config, timeout=httpx2.Timeout(timeout))


KUBECONFIG_FIX = (
    "set kubernetes.kubeconfig (or ENI_IPAM_KUBERNETES__KUBECONFIG) to a readable kubeconfig file "
    "(`eni-ipam dev-cluster --kubeconfig FILE` writes one for a local trial), or leave it empty in a pod"
)
"""What to do about a kubeconfig that cannot be used, said by ``run`` and ``run --check`` alike."""


def load_kubeconfig(
    path: str = "", *, context: str = "", field: str = "kubernetes.kubeconfig", fix: str = ""
) -> lightkube.KubeConfig | SingleConfig:
    """The kubeconfig at ``path``, or the pod's service account when empty; its current context (or
    ``context``) resolved and the files it names (certificates, keys, a token file) present. Reads
    files only. With ``context``, that context's configuration alone.

    Raises:
        ConfigError: ``field`` (the option the path came from), saying what is missing and ``fix``
            (default :data:`KUBECONFIG_FIX`, the run configuration's).
    """
    fix = fix or KUBECONFIG_FIX
    where = path or "the in-cluster service account"
    try:
        if path:
            config = lightkube.KubeConfig.from_file(os.path.expanduser(path))
        else:
            config = lightkube.KubeConfig.from_service_account()
        single = config.get(context_name=context or None)
    except (OSError, lightkube.ConfigError, KeyError, ValueError) as exc:
        cause = f"{type(exc).__name__} {exc}" if isinstance(exc, KeyError) else str(exc)
        if not path:
            cause += " (empty kubeconfig means the pod's service account: this process is not in a pod)"
        raise ConfigError(field, f"cannot load {where}: {cause}: {fix}") from None
    if single is not None:
        named = (
            ("certificate-authority", single.cluster.certificate_auth),
            ("client-certificate", single.user.client_cert if single.user else None),
            ("client-key", single.user.client_key if single.user else None),
            ("tokenFile", single.user.token_file if single.user else None),
        )
        for key, name in named:
            if not name:
                continue
            try:
                file = str(single.abs_file(name))
            except lightkube.ConfigError:  # relative, in a configuration of no file: as written
                file = str(name)
            if not os.path.isfile(file):
                raise ConfigError(field, f"{where} names a {key} file {file} that does not exist: {fix}")
    return single if context and single is not None else config


class KubeApi:
    """The requests eni-ipam makes, on plain-dict objects, with one error tree and metrics."""

    def __init__(
        self,
        client: lightkube.AsyncClient,
        *,
        metrics: MetricSet,
        allowed: frozenset[tuple[str, str, str]] = permissions.PERMISSIONS,
        health: ApiHealth | None = None,
    ) -> None:
        """``allowed``: the permissions of this process (the controller's, or the agent's).
        ``health``: told the outcome of every request but watches (a watch's stream ending is
        routine; the requests that follow it tell whether the server is there)."""
        # Typed as Any: lightkube's overloads are keyed on its resource classes, built at run time here.
        self.client: Any = client
        self.metrics = metrics
        self.allowed = allowed
        self.health = health

    async def close(self) -> None:
        await self.client.close()

    @property
    def server(self) -> str:
        """The API server's URL, for messages ("" when the client does not say)."""
        config = getattr(getattr(self.client, "_client", None), "config", None)
        return str(getattr(getattr(config, "cluster", None), "server", "") or "")

    # -- reads ------------------------------------------------------------------------------------

    @overload
    async def list(
        self,
        kind: Kind,
        *,
        labels: Mapping[str, str] | None = None,
        fields: Mapping[str, str] | None = None,
        chunk_size: int = 500,
        namespace: str | None = None,
    ) -> tuple[list[Obj], str]: ...

    @overload
    async def list(
        self,
        kind: Kind,
        *,
        labels: Mapping[str, str] | None = None,
        fields: Mapping[str, str] | None = None,
        chunk_size: int = 500,
        namespace: str | None = None,
        project: Callable[[Obj], T],
        view: type | None = None,
    ) -> tuple[list[T], str]: ...

    async def list(
        self,
        kind: Kind,
        *,
        labels: Mapping[str, str] | None = None,
        fields: Mapping[str, str] | None = None,
        chunk_size: int = 500,
        namespace: str | None = None,
        project: Callable[[Obj], Any] | None = None,
        view: type | None = None,
    ) -> tuple[list[Any], str]:
        """Every matching object (paginated ``chunk_size`` at a time) and the list's resourceVersion.

        ``namespace``: of a namespaced kind, only that namespace's (default: every namespace's).
        ``project``: what to keep of each object, applied as its page is read; the page's whole
        objects are dropped before the next page is requested. ``view``: a resource class of
        :mod:`~eni_ipam.kube.views` to decode into instead of the whole object (what ``project`` is
        then given is limited to the view's fields)."""
        resource = view or kind.resource()
        keep: Callable[[Obj], Any] = project or (lambda obj: obj)
        whole = _as_data if view is not None else dict
        where = {"namespace": namespace} if kind.namespaced and namespace else self._every_namespace(kind)

        async def run() -> tuple[list[Any], str]:
            listing = self.client.list(
                resource,
                chunk_size=chunk_size,
                labels=dict(labels or {}),
                fields=dict(fields or {}),
                **where,
            )
            items = [keep(whole(item)) async for item in listing]
            return items, listing.resourceVersion

        return await self._call("list", kind, "", run)

    async def watch(
        self,
        kind: Kind,
        *,
        resource_version: str,
        labels: Mapping[str, str] | None = None,
        fields: Mapping[str, str] | None = None,
        server_timeout: float = 300.0,
        view: type | None = None,
    ) -> AsyncIterator[tuple[str, Obj]]:
        """Events after ``resource_version`` as ``(type, object)``, until cancelled (``view``: as in
        :meth:`list`).

        The server ends each request after ``server_timeout`` seconds and it is renewed from the last
        version seen. Raises KubeGone when the version is too old, KubeThrottled on 429, and
        KubeUnavailable when the stream drops.
        """
        self._permit(kind, "", "watch")
        whole = _as_data if view is not None else dict
        stream = self.client.watch(
            view or kind.resource(),
            resource_version=resource_version,
            labels=dict(labels or {}),
            fields=dict(fields or {}),
            server_timeout=max(int(server_timeout), 1),
            **self._every_namespace(kind),
        )
        self._count("watch", kind, "200")
        try:
            async for event_type, obj in stream:
                yield event_type, whole(obj)
        except Exception as exc:
            translated = translate(exc)
            if translated is None:
                raise
            self._count("watch", kind, str(translated.code or "error"))
            raise translated from exc

    async def get(self, kind: Kind, name: str, *, namespace: str | None = None, status: bool = False) -> Obj:
        resource = kind.resource().Status if status else kind.resource()
        sub = "status" if status else ""
        return await self._call(
            "get", kind, sub, lambda: self._dict(self.client.get(resource, name, namespace=namespace))
        )

    # -- writes -----------------------------------------------------------------------------------

    async def create(self, kind: Kind, obj: Obj) -> Obj:
        resource = kind.resource()
        body = {"apiVersion": kind.api_version, "kind": kind.kind, **obj}
        return await self._call("create", kind, "", lambda: self._dict(self.client.create(resource(body))))

    async def replace(self, kind: Kind, obj: Obj) -> Obj:
        """PUT the whole object; its ``metadata.resourceVersion`` makes it conditional (409 if stale)."""
        resource = kind.resource()
        body = {"apiVersion": kind.api_version, "kind": kind.kind, **obj}
        return await self._call("update", kind, "", lambda: self._dict(self.client.replace(resource(body))))

    async def patch(
        self,
        kind: Kind,
        name: str,
        patch: Obj,
        *,
        namespace: str | None = None,
        status: bool = False,
    ) -> Obj:
        """JSON merge patch (RFC 7386); a ``metadata.resourceVersion`` in it makes it conditional."""
        resource = kind.resource().Status if status else kind.resource()
        sub = "status" if status else ""
        return await self._call(
            "patch",
            kind,
            sub,
            lambda: self._dict(
                self.client.patch(resource, name, patch, namespace=namespace, patch_type=PatchType.MERGE)
            ),
        )

    async def json_patch(
        self,
        kind: Kind,
        name: str,
        operations: Sequence[Obj],
        *,
        namespace: str | None = None,
        status: bool = False,
    ) -> Obj:
        """JSON patch (RFC 6902): ``operations`` applied in order to the object as the server holds it
        when the write lands. An operation that cannot apply (a missing parent, a failed ``test``) is
        a 422; setting ``/metadata/resourceVersion`` makes the write conditional (409 if stale)."""
        resource = kind.resource().Status if status else kind.resource()
        sub = "status" if status else ""
        return await self._call(
            "patch",
            kind,
            sub,
            lambda: self._dict(
                self.client.patch(
                    resource,
                    name,
                    [dict(op) for op in operations],
                    namespace=namespace,
                    patch_type=PatchType.JSON,
                )
            ),
        )

    async def delete(self, kind: Kind, name: str, *, namespace: str | None = None) -> None:
        resource = kind.resource()
        await self._call("delete", kind, "", lambda: self.client.delete(resource, name, namespace=namespace))

    # -- plumbing ---------------------------------------------------------------------------------

    @staticmethod
    def _every_namespace(kind: Kind) -> dict[str, str]:
        # lightkube lists a namespaced kind in the client's default namespace unless told otherwise.
        return {"namespace": lightkube.ALL_NS} if kind.namespaced else {}

    @staticmethod
    async def _dict(result: Awaitable[Any]) -> Obj:
        return dict(await result)

    def _permit(self, kind: Kind, subresource: str, verb: str) -> None:
        resource = f"{kind.plural}/{subresource}" if subresource else kind.plural
        if (kind.group, resource, verb) not in self.allowed:
            raise errors.KubeForbidden(
                f"{verb} {resource} is not among the permissions eni-ipam declares (kube/permissions.py)",
                code=403,
                reason="Forbidden",
            )

    def _count(self, verb: str, kind: Kind, code: str) -> None:
        self.metrics.kube_requests.labels(verb=verb, resource=kind.plural, code=code).inc()

    async def _call(self, verb: str, kind: Kind, subresource: str, run: Callable[[], Awaitable[T]]) -> T:
        self._permit(kind, subresource, verb)
        try:
            result = await run()
        except Exception as exc:
            translated = translate(exc)
            if translated is None:
                raise
            self._count(verb, kind, str(translated.code or "error"))
            if self.health is not None:
                self.health.failed(translated)
            raise translated from exc
        self._count(verb, kind, "200")
        if self.health is not None:
            self.health.succeeded()
        return result
