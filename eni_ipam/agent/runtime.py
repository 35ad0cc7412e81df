"""The container runtime's view of which addresses are in use, for rebuilding a lost state file.

libcni (what containerd and CRI-O use to run CNI plugins) caches every ADD result in
``/var/lib/cni/results/<network>-<containerID>-<ifname>``. Those files say, without asking the
runtime, which container holds which address; the agent's owner for a CNI allocation is
``cni:<containerID>:<ifname>``, so an allocation can be rebuilt exactly as the plugin made it.
Unreadable or foreign files are skipped (and logged): a partial view is still better than none.
"""

from __future__ import annotations

import json
from pathlib import Path

import structlog

log = structlog.get_logger("eni_ipam.agent.runtime")


def cni_owner(container_id: str, ifname: str) -> str:
    """The allocator owner of a CNI attachment (the plugin and the rebuild must agree)."""
    return f"cni:{container_id}:{ifname}"


def cni_cache_view(directory: str | Path) -> dict[str, str]:
    """address → owner for every cached CNI result in ``directory`` (empty when it does not exist)."""
    view: dict[str, str] = {}
    root = Path(directory)
    if not root.is_dir():
        return view
    for path in sorted(root.iterdir()):
        try:
            cached = json.loads(path.read_text())
            container, ifname = cached["containerId"], cached["ifName"]
            ips = cached["result"].get("ips") or ()
            for ip in ips:
                view[str(ip["address"]).split("/")[0]] = cni_owner(container, ifname)
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            log.warning("cni_cache_entry_skipped", path=str(path), error=str(exc))
    return view
