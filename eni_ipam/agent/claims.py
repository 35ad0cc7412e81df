"""Cluster API address claims: ``IPAddressClaim`` → ``IPAddress``, served from this node's pool.

A claim whose ``spec.poolRef`` is ``{apiGroup: eni-ipam.io, kind: ENIPool, name: <this node>}``
gets an address from the node's allocator (the default pool, or the static pool named by the
claim's ``eni-ipam.io/pool`` annotation), with Cluster API's lifecycle (its ClaimReconciler):

* the claim carries the **release finalizer** (``ipam.cluster.x-k8s.io/ReleaseAddress``) from its
  first reconcile, so the address is returned to the pool before the claim goes;
* the ``IPAddress`` (named after the claim and the node, :func:`address_name`; owned by the claim
  as controller) carries the **protect finalizer** (``ipam.cluster.x-k8s.io/ProtectAddress``):
  deleting it while its claim exists leaves it in place; only the claim's deletion removes it;
* a **paused** claim (annotation ``cluster.x-k8s.io/paused``) is left as it is;
* the claim's ``status.addressRef`` names the IPAddress and its ``Ready`` condition says why not.

Allocations are owned by ``claim:<namespace>/<name>``: a reconcile is idempotent, and a restart
finds the same address for the same claim (the allocator's state file).

**No other agent can take a claim's name** (decision 0044). The IPAddress of claim ``c`` made by the
agent of node ``n`` is named ``c.n.<length of n>``: the chart's admission policy lets each agent
create only names that end with its own node and that node's length, so another node's agent cannot
create this one's (the length makes the split unambiguous, whatever dots the names hold). An
IPAddress of the claim's own name, as agents named them before, is this node's only when it passes
the checks below; one that does not is ignored, and no longer holds the claim up.

**Only its own IPAddress serves a claim.** It is this claim's only when it is labelled with this node
(or, made before the label, names this node's ENIPool), names this node's ENIPool, carries the claim's
pool label (when it has one), names the claim in ``claimRef`` and, when it has a controller, is
controlled by this claim's uid — and advertises what the allocator holds for the claim. One under this
node's name for the claim that is not (an administrator's) is not adopted, not taken back into the
allocator, never written or deleted: the claim is ``Ready=False`` (``AddressConflict``), which is
logged and counted once, and retried. Deleting such a claim releases its own allocation and lifts its
finalizer; the foreign IPAddress stays, for whoever made it.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import functools
import hashlib
import ipaddress
import random
import re
from typing import Any

import structlog

from eni_ipam.agent.allocator import Allocator
from eni_ipam.agent.errors import AllocatorError
from eni_ipam.agent.metrics import AgentMetrics
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
"""On every IPAddress an agent creates: its node. The chart's admission policy lets an agent create,
change or delete only IPAddresses labelled with the node its token is bound to (docs/node.md), so an
IPAddress labelled with this node was made by this node's agent (or an administrator)."""
POOL_LABEL = "eni-ipam.io/pool"
"""On every IPAddress an agent creates: the allocator pool its address came from
(:func:`pool_label`), so an IPAddress of the static pool ``lab`` is not taken for a claim of the
default pool."""
CONFLICT_REASON = "AddressConflict"
"""The claim's Ready reason while an IPAddress that is not its own holds its name."""
NAME_REASON = "NameTooLong"
"""The claim's Ready reason when its name and the node's make an IPAddress name over 253 characters."""
MAX_NAME = 253
"""The longest object name Kubernetes accepts (a DNS subdomain)."""
REFUSED_REASON = "IPAddressRefused"
"""The claim's Ready reason while the API server refuses to create its IPAddress (e.g. a full quota)."""
_LABEL_VALUE = re.compile(r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)")
CRD_CHECK_INTERVAL = 600.0
"""Seconds between checks for Cluster API's CRDs when they are not installed."""
RETRY_INTERVAL = 10.0
"""Seconds before a claim that could not be served (pool exhausted, API error) is tried again."""


def claim_owner(namespace: str, name: str) -> str:
    return f"claim:{namespace}/{name}"


def address_name(claim: str, node: str) -> str:
    """The name of the IPAddress the agent of ``node`` makes for ``claim`` (in its namespace):
    ``<claim>.<node>.<length of node>``, what the chart's admission policy lets only that node's
    agent create. The length ends the name so that no other node's name can produce it: two nodes
    whose names end alike (``a.b`` and ``b``) differ in it."""
    return f"{claim}.{node}.{len(node)}"


def pool_label(pool: str) -> str:
    """``pool`` as the value of :data:`POOL_LABEL`: itself when it is a label value (63 characters of
    letters, digits, ``-_.``, alphanumeric at both ends), otherwise ``sha256-`` and 40 hex digits of its
    digest. Static pool names are free-form in the agent's configuration; a label value is not."""
    if _LABEL_VALUE.fullmatch(pool):
        return pool
    return "sha256-" + hashlib.sha256(pool.encode()).hexdigest()[:40]


def _same_ip(a: object, b: str) -> bool:
    try:
        return ipaddress.ip_address(str(a)) == ipaddress.ip_address(b)
    except ValueError:
        return a == b


class ClaimReconciler:
    def __init__(
        self, api: KubeApi, allocator: Allocator, *, node: str, clock: Clock, metrics: AgentMetrics
    ) -> None:
        self.api = api
        self.allocator = allocator
        self.node = node
        self.clock = clock
        self.metrics = metrics
        self.claims = Informer(api, IPADDRESSCLAIMS, clock=clock, metrics=metrics)
        self.addresses = Informer(api, IPADDRESSES, clock=clock, metrics=metrics)
        self.claims.add_handler(lambda _e, obj, _o: self._queue(object_key(obj)))
        self.addresses.add_handler(self._on_address)
        self._todo: set[str] = set()
        self._wake = asyncio.Event()
        self._said_absent = False
        self._retrying: set[str] = set()
        self._conflicts: dict[str, tuple[str, str]] = {}
        """Claim key → (foreign IPAddress's uid, reason) already logged and counted."""

    def _mine(self, claim: Obj) -> bool:
        return self._names_this_pool((claim.get("spec") or {}).get("poolRef"))

    def _names_this_pool(self, ref: object) -> bool:
        """Whether ``ref`` (a poolRef) is this node's ENIPool."""
        if not isinstance(ref, dict):
            return False
        return bool(ref.get("apiGroup") == GROUP and ref.get("kind") == KIND and ref.get("name") == self.node)

    def _queue(self, key: str) -> None:
        self._todo.add(key)
        self._wake.set()

    def _retry(self, key: str) -> None:
        """Reconcile ``key`` again in RETRY_INTERVAL (one pending retry per claim)."""
        if key not in self._retrying:
            self._retrying.add(key)
            self.clock.call_later(RETRY_INTERVAL, functools.partial(self._retried, key))

    def _retried(self, key: str) -> None:
        self._retrying.discard(key)
        self._queue(key)

    def _on_address(self, event: str, obj: Obj, old: Obj | None) -> None:
        # The claim it names, and the claim its name is this node's for (a foreign IPAddress there
        # holds that claim up) or, an IPAddress of a claim's own name, that claim.
        namespace = obj["metadata"].get("namespace", "")
        claim = ((obj.get("spec") or {}).get("claimRef") or {}).get("name")
        name = str(obj["metadata"].get("name", ""))
        suffix = address_name("", self.node)
        named = name.removesuffix(suffix) if name.endswith(suffix) else name
        for key in {claim, named}:
            if key:
                self._queue(f"{namespace}/{key}")

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
                        self._conflicts.pop(key, None)
                        continue
                    try:
                        await self.reconcile(claim)
                    except (errors.KubeError, AllocatorError) as exc:
                        log.warning("claim_reconcile_failed", claim=key, error=str(exc))
                        self._retry(key)

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
        own_name = address_name(name, self.node)
        if len(own_name) > MAX_NAME:
            longest = MAX_NAME - len(own_name) + len(name)
            message = (
                f"the IPAddress of this claim would be named {own_name[:60]}… ({len(own_name)} "
                f"characters, over {MAX_NAME}): shorten the claim's name to at most {longest}"
            )
            await self._condition(claim, ready=False, reason=NAME_REASON, message=message)
            return
        published = self._published(claim, pool)
        if published is not None and (why := self._foreign(claim, published, pool)):
            # Not this claim's: neither adopted nor taken back into the allocator, and no new address
            # is allocated while it holds the name.
            await self._conflict(claim, published, *why)
            return
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
        if published is not None and (why := _disagrees(published, allocation)):
            await self._conflict(claim, published, *why)
            return
        if published is None:
            try:
                created = await self._create_address(claim, allocation, pool, own_name)
            except errors.KubeError as exc:  # refused (a full ResourceQuota, the policy): say why
                await self._condition(claim, ready=False, reason=REFUSED_REASON, message=str(exc))
                raise
            if not created:
                return
        self._conflicts.pop(f"{namespace}/{name}", None)
        ref = published["metadata"]["name"] if published is not None else own_name
        await self._condition(
            claim, ready=True, reason="AddressAllocated", message=allocation.address, ref=ref
        )

    def _published(self, claim: Obj, pool: str) -> Obj | None:
        """The IPAddress under this node's name for the claim (whoever made it: judged by the
        caller), else one under the claim's own name that is this claim's (made before the names
        carried the node); None when there is neither."""
        meta = claim["metadata"]
        namespace, name = meta.get("namespace", ""), meta["name"]
        found = self.addresses.store.get(f"{namespace}/{address_name(name, self.node)}")
        if found is not None:
            return found
        legacy = self.addresses.store.get(f"{namespace}/{name}")
        if legacy is not None and self._foreign(claim, legacy, pool) is None:
            return legacy
        return None

    def _foreign(self, claim: Obj, address: Obj, pool: str) -> tuple[str, str] | None:
        """Why ``address``, found under the claim's name, is not this claim's IPAddress, as
        ``(reason, what)``; None when it is (its address is compared apart: :func:`_disagrees`)."""
        meta, spec = address["metadata"], address.get("spec") or {}
        labels = meta.get("labels") or {}
        node = labels.get(NODE_LABEL)
        pool_ref = spec.get("poolRef") or {}
        if node is None and not self._names_this_pool(pool_ref):
            return "node", f"it is labelled with no node and its poolRef is {_ref(pool_ref)}"
        if node is not None and node != self.node:
            return "node", f"it is labelled {NODE_LABEL}={node}"
        # A label is what the policy checks at its creation; the poolRef is what consumers read.
        if not self._names_this_pool(pool_ref):
            return "pool", f"its poolRef is {_ref(pool_ref)}"
        # Without a pool label (made before it), the comparison of its address with the allocator's decides.
        if POOL_LABEL in labels and labels[POOL_LABEL] != pool_label(pool):
            return "pool", f"it is labelled {POOL_LABEL}={labels[POOL_LABEL]}, and the claim's pool is {pool}"
        claim_meta = claim["metadata"]
        named = (spec.get("claimRef") or {}).get("name")
        if named != claim_meta["name"]:
            return "claim", f"its claimRef names {named!r}"
        controller = next((r for r in meta.get("ownerReferences") or () if r.get("controller")), None)
        if controller is not None and (
            controller.get("kind") != IPADDRESSCLAIMS.kind or controller.get("uid") != claim_meta.get("uid")
        ):
            return "owner", f"its controller is {controller.get('kind')} {controller.get('uid')}"
        return None

    async def _conflict(self, claim: Obj, address: Obj, reason: str, what: str) -> None:
        """An IPAddress that is not this claim's holds its name: say so on the claim, once in the log
        and the metric, and look again later (its deletion also wakes the claim)."""
        meta = claim["metadata"]
        key = f"{meta.get('namespace', '')}/{meta['name']}"
        where = f"{address['metadata'].get('namespace', '')}/{address['metadata']['name']}"
        seen = (str(address["metadata"].get("uid", "")), reason)
        if self._conflicts.get(key) != seen:
            self._conflicts[key] = seen
            self.metrics.agent_claim_conflicts.labels(reason).inc()
            log.warning("claim_address_conflict", claim=key, ip_address=where, reason=reason, detail=what)
        message = f"IPAddress {where} exists and is not this node's: {what}"
        await self._condition(claim, ready=False, reason=CONFLICT_REASON, message=message, unref=True)
        self._retry(key)

    def _allocate(self, owner: str, pool: str) -> Allocation:
        ipv4, ipv6 = self.allocator.allocate_next(owner, pool)
        allocation = ipv4 or ipv6
        assert allocation is not None
        if ipv4 is not None and ipv6 is not None:  # a claim is for one address: keep the IPv4 one
            self.allocator.release(ipv6.address, ipv6.pool, quarantine=False)  # never handed over
        log.info("claim_allocated", owner=owner, address=allocation.address, pool=pool)
        return allocation

    async def _create_address(self, claim: Obj, allocation: Allocation, pool: str, name: str) -> bool:
        """Create the claim's IPAddress, ``name``; False when one of that name exists already (not yet
        seen)."""
        meta = claim["metadata"]
        key = f"{meta.get('namespace', '')}/{meta['name']}"
        body = ip_address(claim, allocation, node=self.node, pool=pool)
        assert body["metadata"]["name"] == name
        try:
            await self.api.create(IPADDRESSES, body)
        except errors.KubeConflict:
            # Made meanwhile, by this agent or by another: the claim is Ready only once it is judged
            # (its event, or the retry should the event be lost).
            self._retry(key)
            return False
        log.info("ip_address_created", claim=key, ip_address=name, address=allocation.address)
        return True

    async def _release(self, claim: Obj) -> None:
        meta = claim["metadata"]
        namespace, name = meta.get("namespace", ""), meta["name"]
        if RELEASE_FINALIZER not in (meta.get("finalizers") or ()):
            return
        # The IPAddress goes first, then the allocation: an address is never free while its own
        # IPAddress still advertises it. One that is not the claim's is left alone (the admission
        # policy would refuse this agent anyway), and does not hold the claim's deletion up.
        pool = (meta.get("annotations") or {}).get(POOL_ANNOTATION, DEFAULT_POOL)
        address = self._published(claim, pool)
        if address is not None and (why := self._foreign(claim, address, pool)):
            log.warning(
                "claim_released_past_foreign_address",
                claim=f"{namespace}/{name}",
                ip_address=f"{namespace}/{address['metadata']['name']}",
                reason=why[0],
                detail=why[1],
            )
            address = None
        if address is not None:
            labels = address["metadata"].get("labels") or {}
            if PROTECT_FINALIZER in (address["metadata"].get("finalizers") or ()) or NODE_LABEL not in labels:
                # An IPAddress made before the node label existed is labelled in the same write: the
                # admission policy then lets this node's agent delete it.
                address = await self._finalizers(
                    IPADDRESSES,
                    address,
                    remove=PROTECT_FINALIZER,
                    labels={NODE_LABEL: self.node, POOL_LABEL: pool_label(pool)},
                )
            if not address["metadata"].get("deletionTimestamp"):
                with contextlib.suppress(errors.KubeNotFound):
                    await self.api.delete(IPADDRESSES, address["metadata"]["name"], namespace=namespace)
        released = self.allocator.release_owner(claim_owner(namespace, name))
        await self._finalizers(IPADDRESSCLAIMS, claim, remove=RELEASE_FINALIZER)
        self._conflicts.pop(f"{namespace}/{name}", None)
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

    async def _condition(
        self, claim: Obj, *, ready: bool, reason: str, message: str, ref: str = "", unref: bool = False
    ) -> None:
        """Set the claim's Ready condition; ``ref``: and its addressRef; ``unref``: remove its addressRef
        (it must not name an IPAddress that is not the claim's)."""
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
            and (not unref or not status.get("addressRef"))
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
        elif unref and "addressRef" in status:
            patch["status"]["addressRef"] = None
        with contextlib.suppress(errors.KubeNotFound):
            await self.api.patch(
                IPADDRESSCLAIMS, meta["name"], patch, namespace=meta.get("namespace"), status=True
            )


def ip_address(claim: Obj, allocation: Allocation, *, node: str, pool: str) -> Obj:
    """The IPAddress an agent creates for ``claim``: named after it and the node
    (:func:`address_name`) in its namespace, naming it in ``claimRef`` and as its controller,
    labelled with the node and the pool, from the claim's poolRef (this node's ENIPool) — what the
    chart's admission policy lets an agent create, and what :meth:`ClaimReconciler._foreign` trusts."""
    meta = claim["metadata"]
    return {
        "metadata": {
            "name": address_name(meta["name"], node),
            "namespace": meta.get("namespace", ""),
            "labels": {NODE_LABEL: node, POOL_LABEL: pool_label(pool)},
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


def _disagrees(address: Obj, allocation: Allocation) -> tuple[str, str] | None:
    """``("address", what)`` when the IPAddress advertises another address, prefix or gateway than
    the allocator holds for its claim; None when they agree."""
    spec = address.get("spec") or {}
    advertised = (spec.get("address"), spec.get("prefix"), spec.get("gateway") or "")
    if (
        _same_ip(advertised[0], allocation.address)
        and advertised[1] == allocation.prefix_length
        and _same_ip(advertised[2], allocation.gateway)
    ):
        return None
    held = f"{allocation.address}/{allocation.prefix_length} via {allocation.gateway or 'no gateway'}"
    return "address", (
        f"it advertises {advertised[0]}/{advertised[1]} via {advertised[2] or 'no gateway'}, and the "
        f"claim holds {held}"
    )


def _ref(ref: Any) -> str:
    ref = ref if isinstance(ref, dict) else {}
    return f"{ref.get('kind') or '?'} {ref.get('name') or '?'} ({ref.get('apiGroup') or 'no group'})"


__all__ = [
    "CLAIMS_GROUP",
    "CONFLICT_REASON",
    "NODE_LABEL",
    "POOL_LABEL",
    "PROTECT_FINALIZER",
    "RELEASE_FINALIZER",
    "ClaimReconciler",
    "address_name",
    "claim_owner",
    "ip_address",
    "pool_label",
]
