"""The container runtime's view of which addresses are in use, for rebuilding a lost state file.

libcni (what containerd, CRI-O and podman's CNI backend use to run CNI plugins) caches every ADD result
in ``<cache>/results/<network>-<containerID>-<ifname>``: the result, the network configuration it was
made with (base64 JSON), the network namespace and the CNI_ARGS. Those files say, without asking the
runtime, which container holds which address; the agent's owner for a CNI allocation is
``cni:<containerID>:<ifname>``, so an allocation can be rebuilt exactly as the plugin made it.

Invariants:

* Only results of network configurations that use this plugin are read: another IPAM's addresses
  (``host-local``'s, say) are none of the agent's business, and importing them would withhold them
  from pods for nothing.
* Two entries claiming one address (a stale one left by a failed DEL, and a live one) resolve by
  which owner is alive — its network namespace still exists; when that does not decide, the newer
  file wins, and the choice is logged.
* Unreadable or foreign files are skipped (and logged): a partial view is still better than none.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import structlog

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
    Raises ValueError (or OSError) for a file that is not a libcni cache entry."""
    with path.open("rb") as file:
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


def namespace_exists(netns: str) -> bool | None:
    """Whether the network namespace at ``netns`` exists: None when that cannot be told from here
    (no path given, or its directory is not visible, as from inside a container)."""
    if not netns:
        return None
    if os.path.exists(netns):
        return True
    return False if os.path.isdir(os.path.dirname(netns)) else None


def cni_cache_view(
    directory: str | Path, *, alive: Callable[[str], bool | None] = namespace_exists
) -> dict[str, RuntimeEntry]:
    """address → what is in use, from the cache entries of this plugin's configurations in
    ``directory``; an address claimed twice goes to the owner whose namespace is alive (``alive``),
    else to the newer entry."""
    chosen: dict[str, CachedAttachment] = {}
    for entry in cache_entries(directory):
        for address in entry.addresses:
            other = chosen.get(address)
            if other is None or other.owner == entry.owner:
                chosen[address] = entry
                continue
            winner = _liveliest(other, entry, alive)
            loser = entry if winner is other else other
            log.warning(
                "cni_cache_duplicate_address",
                address=address,
                kept=winner.owner,
                dropped=loser.owner,
                dropped_path=str(loser.path),
            )
            chosen[address] = winner
    return {
        address: RuntimeEntry(owner=entry.owner, attachment=entry.attachment)
        for address, entry in chosen.items()
    }


def _liveliest(
    a: CachedAttachment, b: CachedAttachment, alive: Callable[[str], bool | None]
) -> CachedAttachment:
    a_alive, b_alive = alive(a.attachment.netns), alive(b.attachment.netns)
    if a_alive and not b_alive:
        return a
    if b_alive and not a_alive:
        return b
    return b if b.mtime > a.mtime else a


def cached(directory: str | Path) -> Mapping[str, CachedAttachment]:
    """owner → its cache entry (the newer one when there are several)."""
    out: dict[str, CachedAttachment] = {}
    for entry in cache_entries(directory):
        if entry.owner not in out or entry.mtime > out[entry.owner].mtime:
            out[entry.owner] = entry
    return out
