"""The container runtime's view of which addresses are in use, for rebuilding a lost state file.

libcni (what containerd, CRI-O and podman's CNI backend use to run CNI plugins) caches every ADD result
in ``<cache>/results/<network>-<containerID>-<ifname>``: the result, the network configuration it was
made with (base64 JSON), the CNI_ARGS and, from libcni 1.2 on, the network namespace. Those files say,
without asking the runtime, which container holds which address; the agent's owner for a CNI
allocation is ``cni:<containerID>:<ifname>``, so an allocation can be rebuilt exactly as the plugin
made it. But libcni keeps the file of a DEL that failed, so an entry is evidence, not proof: whether
its owner is alive is judged as the sweep judges it (:func:`owner_alive`):

* with a network namespace: alive while it exists, gone once it does not (when its directory is
  visible from here; a ``/proc/<pid>`` path says nothing, /proc here may not be the host's);
* without one (libcni before 1.2, as podman 4 uses, records none): alive while an OCI runtime knows
  the container — ``<dir>/<containerID>`` in one of ``oci_state_dirs``, where runc and crun keep each
  container they created until it is deleted — gone when none does; unknown when none of those
  directories is visible.

Invariants:

* Only results of network configurations that use this plugin are read: another IPAM's addresses
  (``host-local``'s, say) are none of the agent's business, and importing them would withhold them
  from pods for nothing.
* An entry whose owner is proven gone is never rebuilt, and its file is removed
  (:func:`remove_stale`, logged as ``cni_cache_entry_removed``): otherwise every later rebuild would
  resurrect it, and hand its address to a dead container while a live one may hold it.
* Two entries claiming one address resolve by which owner is proven alive; when that does not
  decide, the newer file wins, and the choice is logged.
* Unreadable or foreign files are skipped (and logged): a partial view is still better than none.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import structlog

from eni_ipam.agent.files import open_regular
from eni_ipam.agent.types import Attachment, RuntimeEntry

log = structlog.get_logger("eni_ipam.agent.runtime")

PLUGIN_TYPE = "eni-ipam-cni"
"""The ``ipam.type`` (or plugin ``type``) of network configurations this agent serves."""
CNI_PREFIX = "cni:"
"""Every CNI allocation's owner starts with it."""
MAX_CACHE_ENTRY = 1 << 20
"""Bytes read of one cache file at most (a result is a few hundred; anything larger is not one)."""


def cni_owner(container_id: str, ifname: str) -> str:
    """The allocator owner of a CNI attachment (the plugin and the rebuild must agree)."""
    return f"{CNI_PREFIX}{container_id}:{ifname}"


def parse_cni_owner(owner: str) -> tuple[str, str] | None:
    """``(containerID, ifname)`` of a CNI owner; None for another kind of owner."""
    if not owner.startswith(CNI_PREFIX):
        return None
    container_id, sep, ifname = owner.removeprefix(CNI_PREFIX).rpartition(":")
    return (container_id, ifname) if sep and container_id and ifname else None


@dataclasses.dataclass(frozen=True, slots=True)
class CachedAttachment:
    """One libcni cache entry of a network configuration that uses this plugin."""

    path: Path
    owner: str
    addresses: tuple[str, ...]
    attachment: Attachment
    mtime: float


def uses_this_plugin(config: Any) -> bool:
    """Whether a network configuration (a list with ``plugins``, or one plugin's) delegates to this plugin."""
    plugins = config.get("plugins") if isinstance(config, dict) else None
    candidates = plugins if isinstance(plugins, list) else [config]
    for plugin in candidates:
        if not isinstance(plugin, dict):
            continue
        ipam = plugin.get("ipam")
        if plugin.get("type") == PLUGIN_TYPE or (isinstance(ipam, dict) and ipam.get("type") == PLUGIN_TYPE):
            return True
    return False


def read_cache_entry(path: Path) -> CachedAttachment | None:
    """The entry at ``path`` if it is a result of a configuration using this plugin; None otherwise.
    Raises ValueError (or OSError) for a file that is not a libcni cache entry: anything but a
    regular file is refused as it is opened (:func:`~eni_ipam.agent.files.open_regular`: a link is
    not followed, a FIFO never waited on), so a name planted in the cache cannot hold the caller."""
    with os.fdopen(open_regular(path), "rb") as file:
        raw = file.read(MAX_CACHE_ENTRY + 1)
    if len(raw) > MAX_CACHE_ENTRY:
        raise ValueError(f"larger than {MAX_CACHE_ENTRY} bytes")
    cached = json.loads(raw)
    if not isinstance(cached, dict):
        raise ValueError("not a JSON object")
    try:
        config = json.loads(base64.b64decode(cached["config"], validate=True))
    except (KeyError, TypeError, binascii.Error) as exc:
        raise ValueError(f"no network configuration: {exc}") from None
    if not uses_this_plugin(config):
        return None
    container, ifname = cached["containerId"], cached["ifName"]
    if not (isinstance(container, str) and container and isinstance(ifname, str) and ifname):
        raise ValueError("containerId and ifName must be non-empty strings")
    ips = (cached.get("result") or {}).get("ips") or ()
    addresses = tuple(str(ip["address"]).split("/")[0] for ip in ips)
    args = {
        str(pair[0]): str(pair[1])
        for pair in cached.get("cniArgs") or ()
        if isinstance(pair, list | tuple) and len(pair) == 2
    }
    namespace, name = args.get("K8S_POD_NAMESPACE"), args.get("K8S_POD_NAME")
    pod = f"{namespace}/{name}" if namespace and name else ""  # podman: a name, no namespace
    attachment = Attachment(
        network=str(cached.get("networkName") or config.get("name") or ""),
        netns=str(cached.get("netns") or ""),
        pod_uid=str(args.get("K8S_POD_UID", "")),
        pod=pod,
    )
    return CachedAttachment(path, cni_owner(container, ifname), addresses, attachment, path.stat().st_mtime)


def cache_entries(directory: str | Path) -> list[CachedAttachment]:
    """Every entry of this plugin's configurations in ``directory`` (libcni's ``results``; empty when
    it does not exist)."""
    root = Path(directory)
    if not root.is_dir():
        return []
    entries: list[CachedAttachment] = []
    for path in sorted(root.iterdir()):
        try:
            if not path.is_file():  # a FIFO or a directory is nobody's result (and must not block us)
                raise ValueError("not a regular file")
            entry = read_cache_entry(path)
        except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
            log.warning("cni_cache_entry_skipped", path=str(path), error=str(exc))
            continue
        if entry is not None:
            entries.append(entry)
    return entries


Liveness = Callable[[str], bool | None]
"""A runtime's answer for a network namespace path, or a container ID: alive, gone, or None (cannot tell)."""


def namespace_exists(netns: str) -> bool | None:
    """Whether the network namespace at ``netns`` exists: None when that cannot be told from here
    (no path given, or its directory is not visible, as from inside a container)."""
    if not netns:
        return None
    if os.path.exists(netns):
        return True
    return False if os.path.isdir(os.path.dirname(netns)) else None


def namespace_alive(netns: str) -> bool | None:
    """:func:`namespace_exists`, except that a ``/proc/<pid>/ns/net`` path says nothing: /proc here may
    not be the host's, and a pid is reused."""
    return None if netns.startswith("/proc/") else namespace_exists(netns)


def container_known(container_id: str, state_dirs: Iterable[str | Path]) -> bool | None:
    """Whether an OCI runtime knows the container: ``<dir>/<container_id>`` exists in one of
    ``state_dirs`` (runc and crun keep a directory per container from its creation to its deletion).
    None when none of the directories is visible from here, or the ID cannot be a directory name."""
    visible = [Path(d) for d in state_dirs if Path(d).is_dir()]
    if not visible or not container_id or "/" in container_id or container_id in (".", ".."):
        return None
    return any((d / container_id).exists() for d in visible)


def owner_alive(
    netns: str, container_id: str, *, namespace: Liveness = namespace_alive, container: Liveness
) -> bool | None:
    """Whether the owner of a CNI attachment is alive: by its network namespace when one is recorded,
    else by its container (see the module's description). None: nothing here can tell."""
    return namespace(netns) if netns else container(container_id)


def gone_because(netns: str, container_id: str) -> str:
    """Why :func:`owner_alive` said gone."""
    if netns:
        return f"network namespace {netns} is gone"
    return f"no network namespace recorded, and no OCI runtime knows container {container_id}"


def _no_container_view(_: str) -> bool | None:
    return None


@dataclasses.dataclass(frozen=True, slots=True)
class CacheView:
    """What libcni's cache says is in use, judged."""

    entries: dict[str, RuntimeEntry]
    """address → its owner, to rebuild."""
    alive: frozenset[str]
    """The addresses of ``entries`` whose owner is proven alive."""
    stale: tuple[tuple[CachedAttachment, str], ...]
    """Entries whose owner is proven gone, with why (for :func:`remove_stale`)."""


def read_cache(
    directory: str | Path, *, namespace: Liveness = namespace_alive, container: Liveness = _no_container_view
) -> CacheView:
    """The cache entries of this plugin's configurations in ``directory``, judged by
    :func:`owner_alive`: an entry whose owner is proven gone is stale; an address claimed twice goes
    to the owner proven alive, else to the newer entry (logged)."""
    verdicts: dict[Path, bool | None] = {}
    chosen: dict[str, CachedAttachment] = {}
    stale: list[tuple[CachedAttachment, str]] = []
    for entry in cache_entries(directory):
        container_id = (parse_cni_owner(entry.owner) or ("", ""))[0]
        verdict = verdicts[entry.path] = owner_alive(
            entry.attachment.netns, container_id, namespace=namespace, container=container
        )
        if verdict is False:
            stale.append((entry, gone_because(entry.attachment.netns, container_id)))
            continue
        for address in entry.addresses:
            other = chosen.get(address)
            if other is None or other.owner == entry.owner:
                chosen[address] = entry
                continue
            winner, loser = _liveliest(other, entry, verdicts)
            event = log.warning if verdicts[winner.path] == verdicts[loser.path] else log.info
            event(
                "cni_cache_duplicate_address",
                address=address,
                kept=winner.owner,
                dropped=loser.owner,
                dropped_path=str(loser.path),
                decided_by="the newer file" if verdicts[winner.path] == verdicts[loser.path] else "liveness",
            )
            chosen[address] = winner
    return CacheView(
        entries={
            address: RuntimeEntry(
                owner=entry.owner, attachment=entry.attachment, alive=True if verdicts[entry.path] else None
            )
            for address, entry in chosen.items()
        },
        alive=frozenset(a for a, e in chosen.items() if verdicts[e.path]),
        stale=tuple(stale),
    )


def cni_cache_view(
    directory: str | Path, *, namespace: Liveness = namespace_alive, container: Liveness = _no_container_view
) -> dict[str, RuntimeEntry]:
    """address → what is in use, from :func:`read_cache`."""
    return read_cache(directory, namespace=namespace, container=container).entries


def remove_stale(entry: CachedAttachment, why: str) -> bool:
    """Remove the cache file of ``entry``, whose owner was proven gone, if it is still the file that
    was judged (same owner, not rewritten since: a container restarted with the same ID rewrites it).
    Logged; False when it was not removed (changed meanwhile, or not removable: a read-only mount)."""
    try:
        current = read_cache_entry(entry.path)
        if current is None or current.owner != entry.owner or current.mtime != entry.mtime:
            return False
        entry.path.unlink()
    except FileNotFoundError:
        return False
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
        log.warning("cni_cache_entry_not_removed", path=str(entry.path), owner=entry.owner, error=str(exc))
        return False
    log.info("cni_cache_entry_removed", path=str(entry.path), owner=entry.owner, why=why)
    return True


def _liveliest(
    a: CachedAttachment, b: CachedAttachment, verdicts: Mapping[Path, bool | None]
) -> tuple[CachedAttachment, CachedAttachment]:
    """(winner, loser): the one proven alive, else the newer file."""
    if verdicts[a.path] and not verdicts[b.path]:
        return a, b
    if verdicts[b.path] and not verdicts[a.path]:
        return b, a
    return (b, a) if b.mtime > a.mtime else (a, b)


def cached(directory: str | Path) -> Mapping[str, CachedAttachment]:
    """owner → its cache entry (the newer one when there are several)."""
    out: dict[str, CachedAttachment] = {}
    for entry in cache_entries(directory):
        if entry.owner not in out or entry.mtime > out[entry.owner].mtime:
            out[entry.owner] = entry
    return out
