"""The HTTPS face of the fake API server: routing, authentication, authorization, verbs, faults, records.

:class:`FakeKube` listens on ``127.0.0.1`` (an ephemeral port) with aiohttp and TLS, and answers in
order: authentication (a bearer token, :mod:`~eni_ipam_testkit.fake_kube.auth`), impersonation (the
``Impersonate-*`` headers, each authorized), then either a
non-resource path (``/version``, discovery, OpenAPI, health) or a resource request, which is
authorized (RBAC for everyone but ``system:masters``), checked against the injected
:attr:`FakeKube.faults` before it touches state, and mapped to a verb (get, list, watch, create,
update, patch, delete, deletecollection) on a :class:`Store`. Every request is recorded in
:attr:`FakeKube.requests` with its final HTTP status (a watch as soon as its stream starts).

Responses are JSON with ``Content-Type: application/json`` exactly (lightkube turns an error into
``ApiError`` only when the header is exactly that), every error is a ``kind: Status`` body, and the
content types follow the real server: a Table for ``Accept: ...;as=Table;v=v1;g=meta.k8s.io``,
aggregated discovery for its ``Accept``, 415 for a Protobuf body or a patch type the resource does
not take (strategic merge on a custom resource), ``Warning: 299 - "..."`` headers for pruned fields.
An unexpected exception in the fake itself is not dressed up as a Status: aiohttp logs it and answers
a plain-text 500, so a bug here cannot pass for a server-side error a client retries.

Handlers never await between reading the store and writing it, so writes are atomic with respect to
each other and to watch streams. Handlers are cancelled when their client disconnects, and
:meth:`FakeKube.close` drops open watches before shutting down, so no task outlives the server.

Time: the server reads the wall clock once, when it first needs a timestamp, and from then on adds the
running loop's time to it, so timestamps and ages follow virtual time under ``looptime``.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import datetime
import json
import math
import os
import secrets
import ssl
import tempfile
from collections.abc import Callable, Iterable, Mapping
from types import TracebackType
from typing import Any, Final

import aiohttp
import yaml
from aiohttp import web
from multidict import CIMultiDict

from eni_ipam_testkit.fake_kube import discovery, openapi, protobuf, tables
from eni_ipam_testkit.fake_kube.admission import Admission
from eni_ipam_testkit.fake_kube.auth import (
    ADMIN,
    REQUESTER,
    Attributes,
    Authorizer,
    User,
    forbidden,
    impersonate,
    rules_review,
    self_subject_review,
    service_account_user,
)
from eni_ipam_testkit.fake_kube.certs import server_context, tls_material
from eni_ipam_testkit.fake_kube.crds import resource_types_from_crd
from eni_ipam_testkit.fake_kube.patch import APPLY, PATCH_TYPES, STRATEGIC
from eni_ipam_testkit.fake_kube.podsecurity import PodSecurity
from eni_ipam_testkit.fake_kube.resources import (
    BUILTIN_RESOURCES,
    CRDS,
    JSON,
    Printed,
    ResourceType,
    StatusError,
    Target,
    bool_param,
    int_param,
    invalid,
    invalid_error,
    not_supported,
    parse_path,
    too_long,
)
from eni_ipam_testkit.fake_kube.selectors import FieldSelector, Filter
from eni_ipam_testkit.fake_kube.store import Change, Store, WriteOptions
from eni_ipam_testkit.fake_kube.strategies import crd_strategy, default_strategies, rbac_strategies
from eni_ipam_testkit.fake_kube.watch import WatchStream, check_list_options, check_list_version, render

MAX_REQUEST_BODY: Final = 3 * 1024 * 1024
"""The real server's limit on a write's body (``MaxRequestBodyBytes``): twice etcd's request limit."""
SYSTEM_NAMESPACES: Final = ("default", "kube-node-lease", "kube-public", "kube-system")
"""The namespaces every cluster starts with."""

_CUSTOM_PATCH_TYPES: Final = tuple(t for t in PATCH_TYPES if t != STRATEGIC)
_APPLY_NEEDS_MANAGER: Final = (
    'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch'
)
PROTOBUF: Final = protobuf.PROTOBUF


@dataclasses.dataclass
class Fault:
    """Make the next ``times`` matching requests fail with ``status`` before they touch any state.

    ``None`` in a filter field matches anything (``subresource=None`` matches the main resource and
    its ``status``). ``retry_after`` adds a ``Retry-After`` header (whole seconds, rounded up).
    ``delay`` waits that long (on the loop's clock) first; with ``status=None`` the request then
    proceeds normally, which injects latency only. A fault is removed once spent.
    """

    verb: str | None = None
    plural: str | None = None
    status: int | None = 500
    times: int = 1
    retry_after: float | None = None
    subresource: str | None = None
    namespace: str | None = None
    name: str | None = None
    message: str | None = None
    delay: float = 0.0

    def matches(self, verb: str, target: Target) -> bool:
        wanted = (
            (self.verb, verb),
            (self.plural, target.rtype.plural),
            (self.subresource, target.subresource),
            (self.namespace, target.namespace),
            (self.name, target.name),
        )
        return self.times > 0 and all(want is None or want == got for want, got in wanted)


@dataclasses.dataclass(frozen=True)
class RequestRecord:
    """One request as the server saw it; ``status`` is the HTTP code (200 for a started watch).

    A non-resource request (discovery, OpenAPI, ``/version``) has an empty ``plural``. ``user`` is
    the name the request ran as: the authenticated one, or the one it impersonated (then
    ``impersonator`` is the authenticated one); empty when authentication failed.
    """

    verb: str
    plural: str
    namespace: str | None
    name: str | None
    subresource: str | None
    status: int
    group: str = ""
    method: str = ""
    path: str = ""
    params: Mapping[str, str] = dataclasses.field(default_factory=dict)
    user: str = ""
    impersonator: str = ""
    """The authenticated user behind ``user`` when the request impersonated it."""


@dataclasses.dataclass
class _Answer:
    status: int
    body: JSON
    content_type: str = "application/json"
    warnings: list[str] = dataclasses.field(default_factory=list)


def _json_response(
    status: int,
    body: Any,
    headers: Mapping[str, str] | None = None,
    *,
    content_type: str = "application/json",
    warnings: Iterable[str] = (),
) -> web.Response:
    merged: CIMultiDict[str] = CIMultiDict({"Content-Type": content_type, **(headers or {})})
    for warning in warnings:
        merged.add("Warning", "299 - " + json.dumps(warning))
    return web.Response(status=status, body=json.dumps(body).encode(), headers=merged)


def _error_response(error: StatusError) -> web.Response:
    headers = {}
    if error.retry_after is not None:
        headers["Retry-After"] = str(math.ceil(error.retry_after))
    return _json_response(error.code, error.body(), headers)


def _verb(method: str, target: Target | None, query: Mapping[str, str]) -> str:
    named = target is not None and target.name is not None
    if method == "GET":
        if bool_param(query, "watch"):
            return "watch"
        return "get" if named else "list"
    verbs = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
    if method == "DELETE" and not named:
        return "deletecollection"
    return verbs.get(method, method.lower())


def _media_type(header: str) -> str:
    return header.split(";", 1)[0].strip().lower()


def _field_manager(request: web.Request, query: Mapping[str, str]) -> str:
    """``fieldManager``, else the client's User-Agent up to its first ``/`` (``kubectl``, ``helm``), as
    the real server names the manager of a write that does not say."""
    name = query.get("fieldManager")
    if name is None:
        return request.headers.get("User-Agent", "").split("/", 1)[0][:128]
    if len(name.encode()) > 128:
        raise invalid_error(
            "PatchOptions.meta.k8s.io", "", "meta.k8s.io", "PatchOptions", [too_long("fieldManager", 128)]
        )
    if not name.isprintable():
        error = invalid("fieldManager", name, "must only contain printable characters")
        raise invalid_error("PatchOptions.meta.k8s.io", "", "meta.k8s.io", "PatchOptions", [error])
    return name


def _write_options(query: Mapping[str, str]) -> WriteOptions:
    dry_run = query.get("dryRun")
    if dry_run not in (None, "All"):
        raise invalid_error("", "", "", "", [not_supported("dryRun", dry_run, ["All"])])
    validation = query.get("fieldValidation") or "Warn"
    if validation not in ("Ignore", "Warn", "Strict"):
        supported = '"Ignore", "Strict", "Warn"'
        raise StatusError(
            400, f'fieldValidation: Unsupported value: "{validation}": supported values: {supported}'
        )
    return WriteOptions(dry_run=dry_run == "All", field_validation=validation)


def _name_from_selector(query: Mapping[str, str], rtype: ResourceType) -> str:
    """The object a list or watch is limited to by ``metadata.name=``, as RBAC sees it (or "")."""
    try:
        selector = FieldSelector.parse(query.get("fieldSelector"), rtype)
    except StatusError:
        return ""
    names = [value for field, equal, value in selector.terms if field == "metadata.name" and equal]
    return names[0] if len(names) == 1 else ""


class FakeKube:
    """A Kubernetes API server double on ``https://127.0.0.1``; see :mod:`eni_ipam_testkit.fake_kube`."""

    def __init__(self, *, history: int = 1000, token: str | None = None, port: int = 0) -> None:
        """``port``: where to listen on 127.0.0.1 (0: a free port, as tests want). ``token``: the
        admin's bearer token (default: a new random one, so no two servers share a credential)."""
        self._anchor: tuple[datetime.datetime, float] | None = None
        self._store = Store(history, now=self._timestamp)
        self._store.strategies.update(default_strategies())
        pod_security = PodSecurity(self._store.find, self._store.objects_of)
        policies = Admission(self._store.objects_of, self._store.find)

        def admit(change: Change) -> None:
            # The real plugin order: PodSecurity before ValidatingAdmissionPolicy.
            pod_security(change)
            policies(change)

        self._store.admission = admit
        self._builtin: dict[tuple[str, str, str], ResourceType] = {
            (t.group, t.version, t.plural): t for t in BUILTIN_RESOURCES
        }
        self._types = dict(self._builtin)
        self._types_at = 0
        self._admin_token = token or secrets.token_urlsafe(32)
        self._tokens: dict[str, User | tuple[str, str]] = {self._admin_token: ADMIN}
        self._pod_tokens: dict[str, tuple[str, str, str, str]] = {}
        """Tokens bound to a Pod: (namespace, account, pod name, pod uid); valid while both exist."""
        self._authorizer = Authorizer(self._store.objects_of)
        self._store.strategies.update(rbac_strategies(self._authorizer))
        self._store.strategies[CRDS] = crd_strategy(self._store.objects_of)
        self._openapi_cache: dict[tuple[Any, ...], bytes] = {}
        self._streams: set[WatchStream] = set()
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self._port = port
        self.requests: list[RequestRecord] = []
        self.faults: list[Fault] = []
        self.bookmark_interval: float | None = 60.0
        """Seconds between BOOKMARK events on watches that allow them (None: never)."""
        namespaces = self._types[("", "v1", "namespaces")]
        for name in SYSTEM_NAMESPACES:
            self._store.create(namespaces, None, {"metadata": {"name": name}})

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        if self._runner is not None:
            raise RuntimeError("FakeKube is already started")
        app = web.Application(client_max_size=MAX_REQUEST_BODY)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", self._port, ssl_context=server_context()).start()
        self._runner = runner
        self._port = runner.addresses[0][1]

    async def close(self) -> None:
        if self._runner is None:
            return
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()
        await self.drop_watches()
        runner, self._runner = self._runner, None
        await runner.cleanup()

    async def __aenter__(self) -> FakeKube:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    @property
    def url(self) -> str:
        if self._runner is None:
            raise RuntimeError("FakeKube is not started")
        return f"https://127.0.0.1:{self._port}"

    # -- clients -------------------------------------------------------------------------------

    def token_for(self, namespace: str, name: str) -> str:
        """A bearer token of the ServiceAccount ``namespace/name`` (valid while that account exists)."""
        for token, who in self._tokens.items():
            if who == (namespace, name):
                return token
        token = f"fake-kube-sa-{secrets.token_urlsafe(32)}"
        self._tokens[token] = (namespace, name)
        return token

    def _token_request(self, namespace: str, name: str, body: Any) -> JSON:
        """``TokenRequest`` (``kubectl create token NAME``): a token of an existing ServiceAccount.

        One with ``spec.boundObjectRef`` naming a Pod (of the account's namespace) is a token of its
        own, whose user carries the pod's and its node's names and uids in ``extra``, as the real
        server's bound tokens do (Kubernetes 1.30 and later); it is refused once the pod is gone.
        """
        rtype = self._types[("", "v1", "serviceaccounts")]
        self._store.get(rtype, namespace, name)  # 404 for an account that does not exist
        spec = dict((body or {}).get("spec") or {}) if isinstance(body, dict) else {}
        seconds = int(spec.get("expirationSeconds") or 3600)
        expires = self._now() + datetime.timedelta(seconds=seconds)
        token = self.token_for(namespace, name)
        bound = spec.get("boundObjectRef")
        if isinstance(bound, dict) and bound.get("kind") == "Pod":
            pod = self._store.get(self._types[("", "v1", "pods")], namespace, str(bound.get("name") or ""))
            if (pod.get("spec") or {}).get("serviceAccountName") != name:
                message = f'cannot bind token for serviceaccount "{name}" to pod running with different '
                raise StatusError(400, message + "serviceaccount name.")
            token = secrets.token_urlsafe(32)
            self._pod_tokens[token] = (namespace, name, pod["metadata"]["name"], pod["metadata"]["uid"])
        return {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {**spec, "expirationSeconds": seconds},
            "status": {
                "token": token,
                "expirationTimestamp": expires.strftime("%Y-%m-%dT%H:%M:%SZ"),
            },
        }

    def kubeconfig(self, *, service_account: tuple[str, str] | None = None) -> JSON:
        """A kubeconfig (for ``lightkube.KubeConfig.from_dict``): HTTPS with the CA, a bearer token.

        The admin identity (``system:masters``) by default; ``service_account=("ns", "name")``
        authenticates as that ServiceAccount, whose requests RBAC then authorizes.
        """
        if service_account is None:
            token, user = self._admin_token, "fake-kube-admin"
        else:
            token, user = self.token_for(*service_account), f"{service_account[0]}-{service_account[1]}"
        cluster = {"server": self.url, "certificate-authority-data": tls_material().ca_data}
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake-kube", "cluster": cluster}],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [{"name": "fake-kube", "context": {"cluster": "fake-kube", "user": user}}],
            "current-context": "fake-kube",
        }

    @property
    def admin_token(self) -> str:
        """The admin's bearer token (``system:masters``), random per server unless one was given."""
        return self._admin_token

    def write_kubeconfig(
        self, path: str | os.PathLike[str], *, service_account: tuple[str, str] | None = None
    ) -> None:
        """Write a kubeconfig readable by its owner only (0600), atomically: a reader never sees a
        partial file (a temporary file in the same directory, renamed over ``path``). Raises
        OSError when the directory cannot be written."""
        text = yaml.safe_dump(self.kubeconfig(service_account=service_account))
        directory = os.path.dirname(os.path.abspath(path))
        descriptor, temporary = tempfile.mkstemp(prefix=".kubeconfig-", dir=directory)  # mode 0600
        try:
            with os.fdopen(descriptor, "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(temporary, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise

    @staticmethod
    def ssl_context() -> ssl.SSLContext:
        """A client TLS context trusting the server's CA (for raw aiohttp or httpx clients)."""
        return tls_material().client_context()

    async def apply_manifest(self, manifest: Mapping[str, Any] | str) -> list[JSON]:
        """Server-side apply every document of ``manifest`` (an object, or YAML text), as the admin.

        Goes over HTTPS like any client (and is recorded in :attr:`requests`), one document after
        the other, so a CustomResourceDefinition is served to the documents after it. Returns the
        applied objects; a refusal raises :class:`StatusError` with the server's answer.
        """
        documents = [manifest] if isinstance(manifest, Mapping) else list(yaml.safe_load_all(manifest))
        if self._session is None:
            connector = aiohttp.TCPConnector(ssl=self.ssl_context())
            headers = {"Authorization": f"Bearer {self._admin_token}"}
            self._session = aiohttp.ClientSession(connector=connector, headers=headers)
        applied = []
        for document in documents:
            if not document:
                continue
            path = self._object_path(document)
            params = {"fieldManager": "fake-kube", "force": "true"}
            body = json.dumps(document).encode()
            async with self._session.patch(
                self.url + path, data=body, params=params, headers={"Content-Type": APPLY}
            ) as response:
                answer = await response.json(content_type=None)
            if response.status >= 400:
                raise StatusError(response.status, answer.get("message", ""), reason=answer.get("reason"))
            applied.append(answer)
        return applied

    def _object_path(self, document: Mapping[str, Any]) -> str:
        api_version, kind = document.get("apiVersion", ""), document.get("kind", "")
        group, _, version = api_version.rpartition("/")
        matches = [
            t for t in self._served_types().values() if (t.group, t.version, t.kind) == (group, version, kind)
        ]
        if not matches:
            raise ValueError(f"no served resource has apiVersion {api_version!r} and kind {kind!r}")
        rtype, meta = matches[0], document.get("metadata") or {}
        prefix = f"/apis/{group}/{version}" if group else f"/api/{version}"
        if rtype.namespaced:
            prefix += f"/namespaces/{meta.get('namespace') or 'default'}"
        return f"{prefix}/{rtype.plural}/{meta['name']}"

    # -- state ---------------------------------------------------------------------------------

    @property
    def resource_version(self) -> str:
        """The current global resourceVersion."""
        return str(self._store.rv)

    @property
    def open_watches(self) -> int:
        """How many watch streams are being served right now."""
        return len(self._streams)

    def objects(self, plural: str, namespace: str | None = None) -> list[JSON]:
        """Copies of the stored objects of ``plural`` (or ``plural.group``), optionally one namespace's."""
        objs = self._store.objects_of(self._resolve(plural).resource)
        return [
            copy.deepcopy(o) for o in objs if namespace is None or o["metadata"].get("namespace") == namespace
        ]

    def get_object(self, plural: str, name: str, namespace: str | None = None) -> JSON | None:
        obj = self._store.find(self._resolve(plural).resource, namespace, name)
        return copy.deepcopy(obj) if obj is not None else None

    def add_object(self, plural: str, obj: Mapping[str, Any]) -> JSON:
        """Create an object directly (as a POST would: events, resourceVersion, validation)."""
        rtype = self._resolve(plural)
        namespace = (obj.get("metadata") or {}).get("namespace") if rtype.namespaced else None
        return copy.deepcopy(self._store.create(rtype, namespace, dict(obj)))

    def compact(self) -> None:
        """Forget the event log: watches and list continuations from any older version get 410."""
        self._store.compact()

    async def drop_watches(self) -> None:
        """Abruptly close every open watch stream and wait until their handlers have finished."""
        streams = list(self._streams)
        for stream in streams:
            stream.drop()
        for stream in streams:
            await stream.done.wait()

    def _resolve(self, plural: str) -> ResourceType:
        types = self._served_types().values()
        found = {t.resource: t for t in types if t.stored and plural in (t.plural, t.resource)}
        if len(found) != 1:
            raise ValueError(f"{'ambiguous' if found else 'unknown'} resource {plural!r}")
        return next(iter(found.values()))

    def _served_types(self) -> dict[tuple[str, str, str], ResourceType]:
        """Built-in types and every stored CRD's, recomputed only after a CRD changed."""
        changed = self._store.changes.get(CRDS, 0)
        if changed != self._types_at:
            types = dict(self._builtin)
            for crd in self._store.objects_of(CRDS):
                for rtype in resource_types_from_crd(crd):
                    types[(rtype.group, rtype.version, rtype.plural)] = rtype
            self._types, self._types_at = types, changed
        return self._types

    def _timestamp(self) -> str:
        return self._now().strftime("%Y-%m-%dT%H:%M:%SZ")

    def _now(self) -> datetime.datetime:
        """The wall clock read once, then advanced by the running loop's clock."""
        try:
            loop_time = asyncio.get_running_loop().time()
        except RuntimeError:
            return datetime.datetime.now(datetime.UTC)
        if self._anchor is None:
            self._anchor = (datetime.datetime.now(datetime.UTC), loop_time)
        wall, start = self._anchor
        return wall + datetime.timedelta(seconds=loop_time - start)

    # -- HTTP ----------------------------------------------------------------------------------

    def _authenticate(self, request: web.Request) -> User:
        header = request.headers.get("Authorization", "")
        who = (
            self._tokens.get(header.removeprefix("Bearer ").strip()) if header.startswith("Bearer ") else None
        )
        if isinstance(who, tuple):
            namespace, name = who
            if self._store.find("serviceaccounts", namespace, name) is None:
                who = None
            else:
                who = service_account_user(namespace, name)
        if who is None:
            who = self._pod_token_user(header.removeprefix("Bearer ").strip())
        if who is None:
            raise StatusError(401, "Unauthorized")
        return who

    def _pod_token_user(self, token: str) -> User | None:
        """The user of a token bound to a Pod, with the claims admission reads; None once its
        account or pod is gone."""
        if token not in self._pod_tokens:
            return None
        namespace, account, pod_name, pod_uid = self._pod_tokens[token]
        pod = self._store.find("pods", namespace, pod_name)
        if self._store.find("serviceaccounts", namespace, account) is None or pod is None:
            return None
        if pod["metadata"]["uid"] != pod_uid:
            return None
        extra = {
            "authentication.kubernetes.io/pod-name": (pod_name,),
            "authentication.kubernetes.io/pod-uid": (pod_uid,),
        }
        node_name = (pod.get("spec") or {}).get("nodeName")
        if node_name:
            extra["authentication.kubernetes.io/node-name"] = (node_name,)
            node = self._store.find("nodes", None, node_name)
            if node is not None:
                extra["authentication.kubernetes.io/node-uid"] = (node["metadata"]["uid"],)
        user = service_account_user(namespace, account)
        return dataclasses.replace(user, extra=tuple(sorted(extra.items())))

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        query = {k: v for k, v in request.query.items()}
        types = self._served_types()
        target: Target | None = None
        verb = request.method.lower()
        user: User | None = None

        def record(status: int) -> None:
            self.requests.append(
                RequestRecord(
                    verb=verb,
                    plural=target.rtype.plural if target else "",
                    namespace=target.namespace if target else None,
                    name=target.name if target else None,
                    subresource=target.subresource if target else None,
                    status=status,
                    group=target.rtype.group if target else "",
                    method=request.method,
                    path=request.path,
                    params=query,
                    user=user.name if user else "",
                    impersonator=user.impersonator if user else "",
                )
            )

        try:
            user = self._authenticate(request)
            user = impersonate(user, request.headers, self._authorizer)
            REQUESTER.set(user)  # (each request runs in its own task, so its own context)
            segments = [s for s in request.path.split("/") if s]
            resource_path = (segments[:1] == ["api"] and len(segments) > 2) or (
                segments[:1] == ["apis"] and len(segments) > 3
            )
            if not resource_path:
                verb = "get" if request.method in ("GET", "HEAD") else verb
                self._authorize(user, Attributes(verb=verb, path=request.path))
                if request.method != "GET":
                    raise StatusError(405, "the server does not allow this method on the requested resource")
                answer = self._non_resource(request, segments, types)
            else:
                target = parse_path(request.path, types)
                if target is None:
                    raise StatusError(404, "the server could not find the requested resource")
                verb = _verb(request.method, target, query)
                name = target.name or (
                    _name_from_selector(query, target.rtype) if verb in ("list", "watch") else ""
                )
                attributes = Attributes(
                    verb=verb,
                    path=request.path,
                    group=target.rtype.group,
                    version=target.rtype.version,
                    resource=target.rtype.plural,
                    subresource=target.subresource or "",
                    namespace=target.namespace or "",
                    name=name or "",
                )
                self._authorize(user, attributes)
                await self._inject_fault(verb, target)
                if verb == "watch":
                    return await self._watch(request, target, query, record)
                answer = await self._dispatch(verb, request, target, query, user)
        except web.HTTPRequestEntityTooLarge:  # the body is over client_max_size
            too_large = StatusError(413, f"Request entity too large: limit is {MAX_REQUEST_BODY}")
            record(too_large.code)
            return _error_response(too_large)
        except StatusError as error:
            record(error.code)
            return _error_response(error)
        record(answer.status)
        return _json_response(
            answer.status, answer.body, content_type=answer.content_type, warnings=answer.warnings
        )

    def _authorize(self, user: User, attributes: Attributes) -> None:
        allowed, reason = self._authorizer.authorize(user, attributes)
        if not allowed:
            raise forbidden(user, attributes, reason)

    async def _inject_fault(self, verb: str, target: Target) -> None:
        fault = next((f for f in self.faults if f.matches(verb, target)), None)
        if fault is None:
            return
        fault.times -= 1
        if fault.times <= 0:
            self.faults.remove(fault)
        if fault.delay > 0:
            await asyncio.sleep(fault.delay)
        if fault.status is not None:
            message = fault.message or f"fault injected: {verb} {target.rtype.resource} failed"
            raise StatusError(fault.status, message, retry_after=fault.retry_after)

    # -- non-resource paths ----------------------------------------------------------------------

    def _non_resource(
        self, request: web.Request, segments: list[str], types: Mapping[tuple[str, str, str], ResourceType]
    ) -> _Answer:
        served = list(types.values())
        accept = request.headers.get("Accept", "")
        not_found = StatusError(404, "the server could not find the requested resource")
        head = segments[0] if segments else ""
        if segments in (["version"], ["version", ""]):
            return _Answer(200, discovery.version_info())
        if head in ("healthz", "livez", "readyz"):
            return _Answer(200, {"status": "ok"})
        if head == "api":
            if len(segments) == 1:
                if discovery.accepts_aggregated(accept):
                    body = discovery.aggregated(served, legacy=True)
                    return _Answer(200, body, discovery.AGGREGATED_CONTENT_TYPE)
                return _Answer(200, discovery.api_versions(f"127.0.0.1:{self._port}"))
            found = discovery.resource_list("", segments[1], served)
        elif head == "apis":
            if len(segments) == 1:
                if discovery.accepts_aggregated(accept):
                    body = discovery.aggregated(served, legacy=False)
                    return _Answer(200, body, discovery.AGGREGATED_CONTENT_TYPE)
                return _Answer(200, discovery.api_group_list(served))
            if len(segments) == 2:
                found = discovery.group_document(segments[1], served)
            else:
                found = discovery.resource_list(segments[1], segments[2], served)
        elif head == "openapi":
            return self._openapi(segments[1:], accept, served)
        else:
            raise not_found
        if found is None:
            raise not_found
        return _Answer(200, found)

    def _openapi(self, rest: list[str], accept: str, served: list[ResourceType]) -> _Answer:
        kinds = [_media_type(a) for a in accept.split(",") if a.strip()]
        if kinds and not any(k in ("application/json", "*/*", "application/*") for k in kinds):
            raise StatusError(406, "only the following media types are accepted: application/json")
        stamp = self._types_at
        if rest == ["v2"]:
            return _Answer(200, json.loads(self._cached(("v2", stamp), lambda: openapi.v2_document(served))))
        if rest == ["v3"]:
            paths = {}
            for group, version in sorted({(t.group, t.version) for t in served}):
                key = openapi.group_version_path(group, version)
                body = self._v3(group, version, served)
                url = f"/openapi/v3/{key}?hash={openapi.content_hash(body)}"
                paths[key] = {"serverRelativeURL": url}
            return _Answer(200, {"paths": paths})
        if len(rest) in (3, 4) and rest[0] == "v3":
            group, version = (rest[2], rest[3]) if rest[1] == "apis" and len(rest) == 4 else ("", rest[2])
            if rest[1] not in ("api", "apis") or (rest[1] == "api" and len(rest) != 3):
                raise StatusError(404, "the server could not find the requested resource")
            if not any((t.group, t.version) == (group, version) for t in served):
                raise StatusError(404, "the server could not find the requested resource")
            return _Answer(200, json.loads(self._v3(group, version, served)))
        raise StatusError(404, "the server could not find the requested resource")

    def _v3(self, group: str, version: str, served: list[ResourceType]) -> bytes:
        members = [t for t in served if (t.group, t.version) == (group, version)]
        custom = any(t.custom for t in members)
        key = ("v3", group, version, self._types_at if custom else 0)
        return self._cached(key, lambda: openapi.v3_document(members))

    def _cached(self, key: tuple[Any, ...], build: Callable[[], JSON]) -> bytes:
        if key not in self._openapi_cache:
            self._openapi_cache[key] = json.dumps(build(), sort_keys=True).encode()
        return self._openapi_cache[key]

    # -- resources -------------------------------------------------------------------------------

    async def _dispatch(
        self, verb: str, request: web.Request, target: Target, query: Mapping[str, str], user: User
    ) -> _Answer:
        rtype, namespace, name, subresource = target.rtype, target.namespace, target.name, target.subresource
        writing = verb in ("create", "update", "patch", "delete", "deletecollection")
        options = _write_options(query) if writing else WriteOptions()
        if writing:
            options.manager, options.user = _field_manager(request, query), user
        if writing and rtype.namespaced and namespace is None:
            raise StatusError(405, "the server does not allow this method on the requested resource")
        if verb in ("create", "update", "delete"):
            _check_body_type(request, rtype)
        if not rtype.stored:
            if verb != "create":
                raise StatusError(405, "the server does not allow this method on the requested resource")
            body = await _read_body(request, rtype)
            if rtype.plural == "selfsubjectrulesreviews":
                return _Answer(201, rules_review(body, user, self._authorizer))
            if rtype.plural == "selfsubjectreviews":
                return _Answer(201, self_subject_review(user))
            return _Answer(201, self._access_review(body, user))
        table = verb in ("get", "list") and tables.accepts_table(request.headers.get("Accept", ""))
        if verb == "get" and name is not None:
            obj = render(self._store.get(rtype, namespace, name), rtype)
            return _Answer(200, self._table(rtype, [obj], query, {}) if table else obj)
        if verb == "list":
            check_list_options(query, watch=False)
            check_list_version(query, self._store.rv)
            body = self._list(rtype, Filter.from_query(query, rtype, namespace), query)
            if table:
                items = [
                    render({**o, "apiVersion": rtype.api_version, "kind": rtype.kind}, rtype)
                    for o in body["items"]
                ]
                body = self._table(rtype, items, query, body["metadata"])
            return _Answer(200, body)
        if verb == "create" and name is not None and subresource == "token":
            # A TokenRequest's fields are all optional: one that is not JSON (kubectl sends Protobuf,
            # which is decoded here for a few kinds only) is read as the defaults.
            protobuf_body = _media_type(request.headers.get("Content-Type", "")) == PROTOBUF
            body = {} if protobuf_body else await _read_body(request, rtype)
            return _Answer(201, self._token_request(namespace or "", name, body))
        if verb == "create" and name is None:
            obj = self._store.create(rtype, namespace, await _read_body(request, rtype), options)
            return _Answer(201, render(obj, rtype), warnings=options.warnings)
        if verb == "update" and name is not None:
            body = await _read_body(request, rtype)
            obj = self._store.update(rtype, namespace, name, body, subresource, options)
            return _Answer(200, render(obj, rtype), warnings=options.warnings)
        if verb == "patch" and name is not None:
            content_type = _media_type(request.headers.get("Content-Type", ""))
            accepted = _CUSTOM_PATCH_TYPES if rtype.custom else PATCH_TYPES
            if content_type not in accepted:
                raise StatusError(
                    415,
                    "the body of the request was in an unknown format - accepted media types include: "
                    + ", ".join(accepted),
                )
            if content_type == APPLY and not query.get("fieldManager"):
                raise StatusError(400, _APPLY_NEEDS_MANAGER)
            options.force = bool_param(query, "force")
            if options.force and content_type != APPLY:
                error = not_supported("force", Printed("true"), [])
                error = dataclasses.replace(error, detail="may not be specified for non-apply patch")
                raise invalid_error("PatchOptions.meta.k8s.io", "", "meta.k8s.io", "PatchOptions", [error])
            raw = await request.read()
            obj, created = self._store.patch(rtype, namespace, name, content_type, raw, subresource, options)
            return _Answer(201 if created else 200, render(obj, rtype), warnings=options.warnings)
        if verb == "delete" and name is not None:
            delete = await _read_body(request, rtype) if request.can_read_body else {}
            if not isinstance(delete, dict):
                raise StatusError(400, "the DeleteOptions body must be an object")
            if "propagationPolicy" in query:
                delete["propagationPolicy"] = query["propagationPolicy"]
            return _Answer(200, render(self._store.delete(rtype, namespace, name, delete, options), rtype))
        if verb == "deletecollection":
            where = Filter.from_query(query, rtype, namespace)
            items, _, _ = self._store.list_page(rtype, where, None, None)
            deleted = [
                self._store.delete(
                    rtype, o["metadata"].get("namespace"), o["metadata"]["name"], dict(query), options
                )
                for o in items
            ]
            body = self._list_body(rtype, [render(o, rtype) for o in deleted], self._store.rv, None)
            return _Answer(200, body)
        raise StatusError(405, "the server does not allow this method on the requested resource")

    def _table(
        self, rtype: ResourceType, items: list[JSON], query: Mapping[str, str], metadata: JSON
    ) -> JSON:
        include = query.get("includeObject") or "Metadata"
        return tables.table(rtype, items, self._now(), include_object=include, list_metadata=metadata)

    def _access_review(self, body: Any, user: User) -> JSON:
        """A SelfSubjectAccessReview answered by the authorizer (what ``kubectl auth can-i`` sends)."""
        if not isinstance(body, dict):
            raise StatusError(400, "the request body must be a JSON object")
        spec = body.get("spec") or {}
        resource, non_resource = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
        if isinstance(resource, dict):
            attributes = Attributes(
                verb=resource.get("verb", ""),
                path="",
                group=resource.get("group", ""),
                version=resource.get("version", ""),
                resource=resource.get("resource", ""),
                subresource=resource.get("subresource", ""),
                namespace=resource.get("namespace", ""),
                name=resource.get("name", ""),
            )
        elif isinstance(non_resource, dict):
            attributes = Attributes(verb=non_resource.get("verb", ""), path=non_resource.get("path", ""))
        else:
            message = "spec.resourceAttributes: Invalid value: null: exactly one of nonResourceAttributes or "
            raise StatusError(422, message + "resourceAttributes must be specified")
        allowed, reason = self._authorizer.authorize(user, attributes)
        status: JSON = {"allowed": allowed}
        if reason:
            status["reason"] = reason
        return {
            "kind": "SelfSubjectAccessReview",
            "apiVersion": "authorization.k8s.io/v1",
            "metadata": {"creationTimestamp": None},
            "spec": spec,
            "status": status,
        }

    def _list(self, rtype: ResourceType, where: Filter, query: Mapping[str, str]) -> JSON:
        limit = int_param(query, "limit")
        limit = limit if limit and limit > 0 else None
        items, rv, token = self._store.list_page(rtype, where, limit, query.get("continue"))
        # Items of built-in lists carry no apiVersion/kind (the list's kind says it); custom ones do.
        if not rtype.custom:
            items = [{k: v for k, v in o.items() if k not in ("apiVersion", "kind")} for o in items]
        else:
            items = [render(o, rtype) for o in items]
        return self._list_body(rtype, items, rv, token)

    @staticmethod
    def _list_body(rtype: ResourceType, items: list[JSON], rv: int, token: str | None) -> JSON:
        metadata: JSON = {"resourceVersion": str(rv)}
        if token:
            metadata["continue"] = token
        return {
            "kind": rtype.list_kind,
            "apiVersion": rtype.api_version,
            "metadata": metadata,
            "items": items,
        }

    async def _watch(
        self, request: web.Request, target: Target, query: Mapping[str, str], record: Callable[[int], None]
    ) -> web.StreamResponse:
        transform: Callable[[JSON], JSON] | None = None
        if tables.accepts_table(request.headers.get("Accept", "")):
            include = query.get("includeObject") or "Metadata"

            def transform(obj: JSON) -> JSON:
                return tables.table(target.rtype, [obj], self._now(), include_object=include)

        stream = WatchStream.for_request(
            request, target, query, self._store, lambda: self.bookmark_interval, transform=transform
        )
        record(200)
        self._streams.add(stream)
        try:
            return await stream.serve()
        finally:
            self._streams.discard(stream)


def _body_types(rtype: ResourceType) -> tuple[str, ...]:
    """What the real server decodes for a type: no Protobuf for custom resources."""
    if rtype.custom:
        return ("application/json", "application/yaml")
    return ("application/json", "application/yaml", PROTOBUF)


def _unreadable(rtype: ResourceType) -> StatusError:
    accepted = ", ".join(_body_types(rtype))
    message = f"the body of the request was in an unknown format - accepted media types include: {accepted}"
    return StatusError(415, message)


def _check_body_type(request: web.Request, rtype: ResourceType) -> None:
    media = _media_type(request.headers.get("Content-Type", ""))
    if media and media not in _body_types(rtype):
        raise _unreadable(rtype)


async def _read_body(request: web.Request, rtype: ResourceType) -> Any:
    media = _media_type(request.headers.get("Content-Type", ""))
    if media == PROTOBUF:
        try:
            return protobuf.decode(await request.read())
        except (protobuf.Undecodable, UnicodeDecodeError):
            raise _unreadable(rtype) from None
    if media == "application/yaml":
        raw = await request.read()
        try:
            return yaml.safe_load(raw.decode() or "null")
        except (ValueError, yaml.YAMLError) as e:
            raise StatusError(400, f"error decoding the request body: {e}") from None
    return await _read_json(request)


async def _read_json(request: web.Request) -> Any:
    raw = await request.read()
    try:
        return json.loads(raw or b"null")
    except (ValueError, RecursionError) as e:
        raise StatusError(400, f"error decoding the request body: {e}") from None
