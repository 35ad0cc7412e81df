"""Cluster API address claims: ``IPAddressClaim`` → ``IPAddress``, served from this node's pool.

A claim whose ``spec.poolRef`` is ``{apiGroup: eni-ipam.io, kind: ENIPool, name: <this node>}``
gets an address from the node's allocator (the default pool, or the static pool named by the
claim's ``eni-ipam.io/pool`` annotation), with Cluster API's lifecycle (its ClaimReconciler):

* the claim carries the **release finalizer** (``ipam.cluster.x-k8s.io/ReleaseAddress``) from its
  first reconcile, so the address is returned to the pool before the claim goes;
* the ``IPAddress`` (named after the claim, owned by it as controller) carries the **protect
  finalizer** (``ipam.cluster.x-k8s.io/ProtectAddress``): deleting it while its claim exists leaves
  it in place; only the claim's deletion removes it;
* a **paused** claim (annotation ``cluster.x-k8s.io/paused``) is left as it is;
* the claim's ``status.addressRef`` names the IPAddress and its ``Ready`` condition says why not.

Allocations are owned by ``claim:<namespace>/<name>``: a reconcile is idempotent, and a restart
finds the same address for the same claim (the allocator's state file).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import functools
import random
from typing import Any

import structlog

from eni_ipam._infra.metrics import MetricSet
from eni_ipam.agent.allocator import Allocator
from eni_ipam.agent.errors import AllocatorError
from eni_ipam.agent.types import DEFAULT_POOL, Allocation
from eni_ipam.core.backoff import Backoff
from eni_ipam.core.clock import Clock
from eni_ipam.kube import errors
from eni_ipam.kube.api import IPADDRESSCLAIMS, IPADDRESSES, KubeApi, Obj
from eni_ipam.kube.informer import Informer, object_key
from eni_ipam.kube.permissions import CLAIMS_GROUP, GROUP, KIND

log = structlog.get_logger("eni_ipam.agent.claims")

RELEASE_FINALIZER = "ipam.cluster.x-k8s.io/ReleaseAddress"
PROTECT_FINALIZER = "ipam.cluster.x-k8s.io/ProtectAddress"
PAUSED_ANNOTATION = "cluster.x-k8s.io/paused"
POOL_ANNOTATION = "eni-ipam.io/pool"
NODE_LABEL = "eni-ipam.io/node"
"""On every IPAddress an agent creates: its node. The chart's admission policy lets an agent change or
delete only IPAddresses labelled with the node its token is bound to (docs/node.md)."""
CRD_CHECK_INTERVAL = 600.0
"""Seconds between checks for Cluster API's CRDs when they are not installed."""
RETRY_INTERVAL = 10.0
"""Seconds before a claim that could not be served (pool exhausted, API error) is tried again."""


def claim_owner(namespace: str, name: str) -> str:
    return f"claim:{namespace}/{name}"


class ClaimReconciler:
    def __init__(
        self, api: KubeApi, allocator: Allocator, *, node: str, clock: Clock, metrics: MetricSet
    ) -> None:
        self.api = api
        self.allocator = allocator
        self.node = node
        self.clock = clock
        self.claims = Informer(api, IPADDRESSCLAIMS, clock=clock, metrics=metrics)
        self.addresses = Informer(api, IPADDRESSES, clock=clock, metrics=metrics)
        self.claims.add_handler(lambda _e, obj, _o: self._queue(object_key(obj)))
        self.addresses.add_handler(self._on_address)
        self._todo: set[str] = set()
        self._wake = asyncio.Event()
        self._said_absent = False

    def _mine(self, claim: Obj) -> bool:
        ref = (claim.get("spec") or {}).get("poolRef") or {}
        return ref.get("apiGroup") == GROUP and ref.get("kind") == KIND and ref.get("name") == self.node

    def _queue(self, key: str) -> None:
        self._todo.add(key)
        self._wake.set()

    def _on_address(self, event: str, obj: Obj, old: Obj | None) -> None:
        claim = ((obj.get("spec") or {}).get("claimRef") or {}).get("name")
        if claim:
            self._queue(f"{obj['metadata'].get('namespace', '')}/{claim}")

    async def run(self) -> None:
        """Serve claims until cancelled; without Cluster API's CRDs, wait quietly for them."""
        backoff = Backoff(initial=1.0, maximum=RETRY_INTERVAL, rng=random.Random())
        while True:
            try:
                await self.api.list(IPADDRESSCLAIMS)
                break
            except errors.KubeNotFound:
                if not self._said_absent:
                    log.info("claims_idle", reason="Cluster API's IPAddressClaim CRD is not installed")
                    self._said_absent = True
                await self.clock.sleep(CRD_CHECK_INTERVAL)
            except errors.KubeError as exc:  # the API server is unreachable for now: ask again soon
                log.debug("claims_probe_failed", error=str(exc))
                await self.clock.sleep(backoff.next_delay())
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self.claims.run(), name="eni-ipam-claims-informer")
            tg.create_task(self.addresses.run(), name="eni-ipam-addresses-informer")
            await self.claims.synced.wait()
            await self.addresses.synced.wait()
            for key in list(self.claims.store):
                self._queue(key)
            while True:
                await self._wake.wait()
                self._wake.clear()
                todo, self._todo = self._todo, set()
                for key in sorted(todo):
                    claim = self.claims.store.get(key)
                    if claim is None or not self._mine(claim):
                        continue
                    try:
                        await self.reconcile(claim)
                    except (errors.KubeError, AllocatorError) as exc:
                        log.warning("claim_reconcile_failed", claim=key, error=str(exc))
                        self.clock.call_later(RETRY_INTERVAL, functools.partial(self._queue, key))

    # -- one claim --------------------------------------------------------------------------------

    async def reconcile(self, claim: Obj) -> None:
        meta = claim["metadata"]
        namespace, name = meta.get("namespace", ""), meta["name"]
        if (meta.get("annotations") or {}).get(PAUSED_ANNOTATION) is not None:
            log.debug("claim_paused", claim=f"{namespace}/{name}")
            return
        if meta.get("deletionTimestamp"):
            await self._release(claim)
            return
        if RELEASE_FINALIZER not in (meta.get("finalizers") or ()):
            claim = await self._finalizers(IPADDRESSCLAIMS, claim, add=RELEASE_FINALIZER)
        pool = (meta.get("annotations") or {}).get(POOL_ANNOTATION, DEFAULT_POOL)
        owner = claim_owner(namespace, name)
        mine = self.allocator.allocations(owner=owner)
        published = self.addresses.store.get(f"{namespace}/{name}")
        try:
            if mine:
                allocation = mine[0]
            elif published is not None:
                # The IPAddress says which address the claim has: take that one back (after a lost
                # state file), never a second one while the first is still advertised.
                advertised = (published.get("spec") or {}).get("address", "")
                allocation = self.allocator.allocate(advertised, owner, pool)
                log.warning("claim_address_retaken", claim=f"{namespace}/{name}", address=advertised)
            else:
                allocation = self._allocate(owner, pool)
        except AllocatorError as exc:
            await self._condition(claim, ready=False, reason=type(exc).__name__, message=str(exc))
            raise
        await self._ensure_address(claim, allocation)
        await self._condition(
            claim, ready=True, reason="AddressAllocated", message=allocation.address, ref=name
        )

    def _allocate(self, owner: str, pool: str) -> Allocation:
        ipv4, ipv6 = self.allocator.allocate_next(owner, pool)
        allocation = ipv4 or ipv6
        assert allocation is not None
        if ipv4 is not None and ipv6 is not None:  # a claim is for one address: keep the IPv4 one
            self.allocator.release(ipv6.address, ipv6.pool)
        log.info("claim_allocated", owner=owner, address=allocation.address, pool=pool)
        return allocation

    async def _ensure_address(self, claim: Obj, allocation: Allocation) -> None:
        meta = claim["metadata"]
        key = f"{meta.get('namespace', '')}/{meta['name']}"
        if key in self.addresses.store:
            return
        body = {
            "metadata": {
                "name": meta["name"],
                "namespace": meta.get("namespace", ""),
                "labels": {NODE_LABEL: self.node},
                "finalizers": [PROTECT_FINALIZER],
                "ownerReferences": [
                    {
                        "apiVersion": IPADDRESSCLAIMS.api_version,
                        "kind": IPADDRESSCLAIMS.kind,
                        "name": meta["name"],
                        "uid": meta.get("uid", ""),
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": {
                "claimRef": {"name": meta["name"]},
                "poolRef": dict((claim.get("spec") or {}).get("poolRef") or {}),
                "address": allocation.address,
                "prefix": allocation.prefix_length,
                "gateway": allocation.gateway,
            },
        }
        try:
            await self.api.create(IPADDRESSES, body)
        except errors.KubeConflict:
            return  # made meanwhile; its event follows
        log.info("ip_address_created", claim=key, address=allocation.address)

    async def _release(self, claim: Obj) -> None:
        meta = claim["metadata"]
        namespace, name = meta.get("namespace", ""), meta["name"]
        if RELEASE_FINALIZER not in (meta.get("finalizers") or ()):
            return
        # The IPAddress goes first, then the allocation: an address is never free while an
        # IPAddress still advertises it.
        address = self.addresses.store.get(f"{namespace}/{name}")
        if address is not None:
            labels = address["metadata"].get("labels") or {}
            if PROTECT_FINALIZER in (address["metadata"].get("finalizers") or ()) or NODE_LABEL not in labels:
                # An IPAddress made before the node label existed is labelled in the same write: the
                # admission policy then lets this node's agent delete it.
                address = await self._finalizers(
                    IPADDRESSES, address, remove=PROTECT_FINALIZER, labels={NODE_LABEL: self.node}
                )
            if not address["metadata"].get("deletionTimestamp"):
                with contextlib.suppress(errors.KubeNotFound):
                    await self.api.delete(IPADDRESSES, name, namespace=namespace)
        released = self.allocator.release_owner(claim_owner(namespace, name))
        await self._finalizers(IPADDRESSCLAIMS, claim, remove=RELEASE_FINALIZER)
        log.info("claim_released", claim=f"{namespace}/{name}", addresses=[a.address for a in released])

    # -- writes -----------------------------------------------------------------------------------

    async def _finalizers(
        self, kind: Any, obj: Obj, *, add: str = "", remove: str = "", labels: dict[str, str] | None = None
    ) -> Obj:
        meta = obj["metadata"]
        finalizers = [f for f in meta.get("finalizers") or () if f != remove]
        if add and add not in finalizers:
            finalizers.append(add)
        patch: dict[str, Any] = {
            "metadata": {"finalizers": finalizers, "resourceVersion": meta.get("resourceVersion")}
        }
        if labels:
            patch["metadata"]["labels"] = labels
        try:
            return await self.api.patch(kind, meta["name"], patch, namespace=meta.get("namespace"))
        except errors.KubeNotFound:
            return obj

    async def _condition(self, claim: Obj, *, ready: bool, reason: str, message: str, ref: str = "") -> None:
        meta = claim["metadata"]
        status = claim.get("status") or {}
        text = "True" if ready else "False"
        old: dict[str, Any] = next(
            (c for c in status.get("conditions") or () if c.get("type") == "Ready"), {}
        )
        if (
            old.get("status") == text
            and old.get("reason") == reason
            and (not ref or status.get("addressRef"))
        ):
            return
        now = self.clock.now_utc().astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        condition = {
            "type": "Ready",
            "status": text,
            "reason": reason,
            "message": message,
            "lastTransitionTime": old.get("lastTransitionTime", now) if old.get("status") == text else now,
        }
        others = [c for c in status.get("conditions") or () if c.get("type") != "Ready"]
        patch: dict[str, Any] = {"status": {"conditions": [*others, condition]}}
        if ref:
            patch["status"]["addressRef"] = {"name": ref}
        with contextlib.suppress(errors.KubeNotFound):
            await self.api.patch(
                IPADDRESSCLAIMS, meta["name"], patch, namespace=meta.get("namespace"), status=True
            )


__all__ = [
    "CLAIMS_GROUP",
    "NODE_LABEL",
    "PROTECT_FINALIZER",
    "RELEASE_FINALIZER",
    "ClaimReconciler",
    "claim_owner",
]
