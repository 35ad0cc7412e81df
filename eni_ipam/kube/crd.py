"""The ENIPool CRD in the cluster, checked against the one this controller was built with.

Helm installs a chart's ``crds/`` once and never upgrades them, so a cluster may serve an ENIPool
schema older than the controller's. The API server then prunes, without an error, every status
field the old schema lacks (``status.subnets`` from a CRD of the first release): the node agent
finds no subnet for its addresses and hands none out, while the pool looks ready.

The controller carries its CRD (``enipools.eni-ipam.io.yaml`` beside this module, equal to the
chart's ``crds/`` file), whose annotation ``eni-ipam.io/crd-revision`` moves with every change of
it. Every replica watches the cluster's CRD (by name, the only one its RBAC lets it read) and judges
it at every change:

* **revision** lower than its own (no annotation counts as revision 1, the first release's): the
  replica replaces the CRD's spec with its own, when ``kubernetes.update_crd`` allows it (the chart's
  ClusterRole then grants ``update`` on this one CRD by name). Never a higher revision: during a
  rollout, the replicas of the older release leave the newer CRD alone.
* **fields lost**: the spec and status fields this controller writes that the cluster's schema does
  not keep (:func:`lost_fields`). While any is lost, or the CRD cannot be read or is not there, the
  CRD is *not current*: the leader writes no pool status but a ``Ready`` condition saying why (the
  status would be pruned), ``/readyz`` answers 503 with the reason and the command that fixes it,
  ``eni_ipam_crd_state`` says which state, and each change of state is logged (an error while not
  current) and told as an Event on the CRD. The next change of the CRD is seen without a restart.

A lower revision that loses no field (a hand-made schema that keeps unknown fields) is current: it
is updated when allowed, and otherwise only said once.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import functools
import importlib.resources
from collections.abc import Callable, Mapping
from typing import Any

import structlog
import yaml

from eni_ipam.adapters.metrics.controller import Metrics
from eni_ipam.core.clock import Clock
from eni_ipam.kube import errors, permissions
from eni_ipam.kube.api import CRDS, ENIPOOLS, EVENTS, KubeApi, Obj
from eni_ipam.kube.informer import Informer

log = structlog.get_logger("eni_ipam.kube.crd")

CRD_NAME = f"{permissions.PLURAL}.{permissions.GROUP}"
REVISION_ANNOTATION = "eni-ipam.io/crd-revision"
FIRST_REVISION = 1
"""The revision of a CRD without the annotation: the first release's."""
CRD_FILE = "enipools.eni-ipam.io.yaml"
APPLY_COMMAND = "kubectl apply --server-side --force-conflicts -f deploy/helm/eni-ipam/crds/"
"""What an operator runs when the controller may not update the CRD itself (docs/deploy.md §8)."""

STATES = ("unknown", "current", "outdated", "missing", "unreadable")
"""``eni_ipam_crd_state``'s values: not judged yet; current; fields this controller writes are
lost; no such CRD (or the version is not served); the CRD cannot be read (RBAC)."""


@functools.cache
def bundled() -> Obj:
    """The CRD this controller was built with (read-only: copy before changing it)."""
    text = importlib.resources.files(__package__).joinpath(CRD_FILE).read_text()
    crd: Obj = yaml.safe_load(text)
    return crd


def revision(crd: Mapping[str, Any]) -> int:
    """The CRD's ``eni-ipam.io/crd-revision`` (:data:`FIRST_REVISION` without one; 0 if unreadable)."""
    raw = ((crd.get("metadata") or {}).get("annotations") or {}).get(REVISION_ANNOTATION)
    if raw is None:
        return FIRST_REVISION
    try:
        return int(str(raw))
    except ValueError:
        return 0


def _version_schema(crd: Mapping[str, Any], version: str) -> Mapping[str, Any] | None:
    for entry in (crd.get("spec") or {}).get("versions") or ():
        if isinstance(entry, Mapping) and entry.get("name") == version and entry.get("served"):
            schema = (entry.get("schema") or {}).get("openAPIV3Schema")
            return schema if isinstance(schema, Mapping) else {}
    return None


def _lost(want: Mapping[str, Any], have: Mapping[str, Any], path: str, out: list[str]) -> None:
    if have.get("x-kubernetes-preserve-unknown-fields"):
        return  # whatever is below is kept
    properties: Mapping[str, Any] = have.get("properties") or {}
    for name, sub in (want.get("properties") or {}).items():
        if name in properties:
            _lost(sub, properties[name], f"{path}.{name}", out)
        else:
            out.append(f"{path}.{name}")
    items = want.get("items")
    if isinstance(items, Mapping):
        _lost(items, have.get("items") or {}, f"{path}[]", out)
    values = want.get("additionalProperties")
    if isinstance(values, Mapping):
        kept = have.get("additionalProperties")
        if kept is True:
            return
        if not isinstance(kept, Mapping):
            out.append(f"{path}.*")
        else:
            _lost(values, kept, f"{path}.*", out)


def lost_fields(cluster: Mapping[str, Any], wanted: Mapping[str, Any] | None = None) -> list[str]:
    """The fields under ``spec`` and ``status`` of ``wanted`` (this controller's CRD) that the
    ``cluster``'s schema of the same version would prune, as paths (``status.subnets``,
    ``status.interfaces[].macAddress``); ``["v1alpha1"]`` when that version is not served."""
    wanted = bundled() if wanted is None else wanted
    version = permissions.VERSION
    want, have = _version_schema(wanted, version), _version_schema(cluster, version)
    if have is None:
        return [version]
    out: list[str] = []
    if have.get("x-kubernetes-preserve-unknown-fields"):
        return out
    root: Mapping[str, Any] = (want or {}).get("properties") or {}
    kept: Mapping[str, Any] = have.get("properties") or {}
    for top in ("spec", "status"):
        if top not in root:
            continue
        if top in kept:
            _lost(root[top], kept[top], top, out)
        else:
            out.append(top)
    return out


@dataclasses.dataclass(frozen=True)
class CrdState:
    """What the cluster's CRD is to this controller."""

    state: str = "unknown"
    revision: int = 0
    lost: tuple[str, ...] = ()
    detail: str = ""

    @property
    def current(self) -> bool:
        return self.state == "current"

    def problem(self) -> str:
        """Why the CRD is not current, with what fixes it (empty when it is current)."""
        if self.state == "current":
            return ""
        if self.state == "unknown":
            return f"the ENIPool CRD {CRD_NAME} has not been read yet"
        if self.state == "unreadable":
            return f"cannot read the ENIPool CRD {CRD_NAME} ({self.detail}): check the ClusterRole"
        if self.state == "missing" and not self.lost:
            return f"the ENIPool CRD {CRD_NAME} is not installed: {ENIPOOLS.install}"
        if self.state == "missing":
            return f"the ENIPool CRD {CRD_NAME} does not serve {self.lost[0]}: run {APPLY_COMMAND}"
        shown = ", ".join(self.lost[:4]) + (f" and {len(self.lost) - 4} more" if len(self.lost) > 4 else "")
        return (
            f"the ENIPool CRD in the cluster (revision {self.revision}) is older than this controller's "
            f"(revision {revision(bundled())}) and would prune {shown}: run {APPLY_COMMAND}"
        )


def judge(crd: Mapping[str, Any] | None) -> CrdState:
    """The state of the cluster's CRD ``crd`` (None: there is none)."""
    if crd is None:
        return CrdState("missing")
    lost = tuple(lost_fields(crd))
    rev = revision(crd)
    if lost == (permissions.VERSION,):
        return CrdState("missing", rev, lost)
    return CrdState("outdated" if lost else "current", rev, lost)


def updated(cluster: Mapping[str, Any], wanted: Mapping[str, Any] | None = None) -> Obj:
    """``cluster`` with this controller's spec, labels and annotations: the body of the update (its
    resourceVersion makes it conditional)."""
    wanted = bundled() if wanted is None else wanted
    body = copy.deepcopy(dict(cluster))
    body.pop("status", None)
    meta = body.setdefault("metadata", {})
    meta.pop("managedFields", None)
    for key in ("labels", "annotations"):
        mine = (wanted.get("metadata") or {}).get(key) or {}
        if mine:
            meta[key] = {**(meta.get(key) or {}), **mine}
    body["spec"] = copy.deepcopy(wanted["spec"])
    return body


UPDATE_RETRY = 10.0
"""Seconds before a CRD update that failed for want of an answer (a 5xx, a 429, a dropped
connection) is tried again."""


class CrdWatch:
    """Follows the cluster's ENIPool CRD (every replica runs it, :meth:`run`) and keeps :attr:`state`;
    ``on_change`` is called with the new state at each change of state."""

    def __init__(
        self,
        api: KubeApi,
        *,
        clock: Clock,
        metrics: Metrics,
        update: bool = True,
        identity: str = "",
        on_change: Callable[[CrdState], None] | None = None,
        watch_timeout: float = 300.0,
    ) -> None:
        self.api = api
        self.clock = clock
        self.metrics = metrics
        self.update = update
        self.identity = identity
        self.on_change = on_change
        self.state = CrdState()
        self.mine = revision(bundled())
        self.informer = Informer(
            api,
            CRDS,
            clock=clock,
            metrics=metrics,
            fields={"metadata.name": CRD_NAME},
            watch_timeout=watch_timeout,
        )
        self.informer.add_handler(self._on_event)
        self._tried: str | None = None
        """The resourceVersion of the CRD this replica last tried to update (once each)."""
        self._said_kept = False
        self._updates: asyncio.Queue[Obj] = asyncio.Queue()
        self._events: set[asyncio.Task[None]] = set()
        self._show()

    async def run(self) -> None:
        """Judge the CRD now, then at every change of it, until cancelled."""
        try:
            self._judged(await self.api.get(CRDS, CRD_NAME))
        except errors.KubeNotFound:
            self._set(CrdState("missing"), None)
        except errors.KubeForbidden as exc:
            self._set(CrdState("unreadable", detail=str(exc)), None)
        except errors.KubeError as exc:
            log.warning("crd_read_failed", crd=CRD_NAME, error=str(exc))
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self.informer.run(), name="eni-ipam-informer-crd")
            tg.create_task(self._updater(), name="eni-ipam-crd-update")

    def _on_event(self, event: str, obj: Obj, old: Obj | None) -> None:
        if event == "DELETED":
            self._set(CrdState("missing"), None)
        else:
            self._judged(obj)

    def _judged(self, crd: Obj) -> None:
        state = judge(crd)
        self._set(state, crd)
        if state.revision < self.mine:
            version = str((crd.get("metadata") or {}).get("resourceVersion", ""))
            if self.update and self._tried != version:
                self._tried = version
                self._updates.put_nowait(crd)
            elif not self.update and state.current and not self._said_kept:
                self._said_kept = True
                log.info(
                    "crd_older_kept",
                    crd=CRD_NAME,
                    revision=state.revision,
                    wanted=self.mine,
                    reason="kubernetes.update_crd is false; the cluster's schema keeps every field",
                )

    async def _updater(self) -> None:
        while True:
            crd = await self._updates.get()
            if revision(crd) >= self.mine:
                continue
            try:
                await self.api.replace(CRDS, updated(crd))
            except errors.KubeConflict:
                continue  # changed meanwhile: its next event is judged again
            except errors.KubeError as exc:
                log.error(
                    "crd_update_failed",
                    crd=CRD_NAME,
                    revision=revision(crd),
                    wanted=self.mine,
                    error=str(exc),
                    fix=APPLY_COMMAND,
                )
                if exc.code not in (403, 422):  # refused for good: a person must act (APPLY_COMMAND)
                    # A blip (a 5xx, a 429, no answer): the same CRD is tried again, or it would
                    # stay outdated, and every status held, until a restart.
                    version = str((crd.get("metadata") or {}).get("resourceVersion", ""))
                    await self.clock.sleep(max(UPDATE_RETRY, exc.retry_after or 0.0))
                    if self._tried == version:  # nothing newer seen meanwhile (that one is queued)
                        self._tried = ""
                        self._judged(crd)
                continue
            log.info("crd_updated", crd=CRD_NAME, revision=revision(crd), to=self.mine)
            said = f"updated from revision {revision(crd)} to {self.mine}"
            await self._event(crd, "Normal", "CRDUpdated", said)

    def _set(self, state: CrdState, crd: Obj | None) -> None:
        before, self.state = self.state, state
        self._show()
        if before.state == state.state and before.lost == state.lost:
            return
        if state.current:
            log.info("crd_current", crd=CRD_NAME, revision=state.revision, was=before.state)
        else:
            log.error("crd_not_current", crd=CRD_NAME, state=state.state, problem=state.problem())
            if crd is not None:
                reason = "CRDOutdated" if state.state == "outdated" else "CRDNotServed"
                task = asyncio.get_running_loop().create_task(
                    self._event(crd, "Warning", reason, state.problem()), name="eni-ipam-crd-event"
                )
                self._events.add(task)
                task.add_done_callback(self._events.discard)
        if self.on_change is not None:
            self.on_change(state)

    def _show(self) -> None:
        for name in STATES:
            self.metrics.crd_state.labels(state=name).set(1 if name == self.state.state else 0)

    async def _event(self, crd: Obj, kind: str, reason: str, message: str) -> None:
        """Say it on the CRD (``kubectl describe crd enipools.eni-ipam.io``), as this replica."""
        meta = crd.get("metadata") or {}
        now = self.clock.now_utc().strftime("%Y-%m-%dT%H:%M:%SZ")
        who = f" ({self.identity})" if self.identity else ""
        event = {
            "metadata": {"generateName": f"{CRD_NAME}-", "namespace": "default"},
            "involvedObject": {
                "apiVersion": CRDS.api_version,
                "kind": CRDS.kind,
                "name": CRD_NAME,
                "uid": meta.get("uid", ""),
            },
            "reason": reason,
            "message": f"eni-ipam{who}: {message}",
            "type": kind,
            "source": {"component": "eni-ipam", **({"host": self.identity} if self.identity else {})},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            await self.api.create(EVENTS, event)
        except errors.KubeError as exc:
            log.warning("event_failed", crd=CRD_NAME, error=str(exc))
