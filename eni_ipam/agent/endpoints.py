"""Which of the node's addresses the cluster's EndpointSlices still list (the quarantine's second half).

kube-proxy (and every Service proxy) sends a Service's traffic to the addresses its EndpointSlices
list; a deleted pod's address stays listed until the endpoint controller has seen the pod go. The
agent watches EndpointSlices (discovery.k8s.io/v1, every namespace: what kube-proxy watches, so the
API server's cost per agent is one more such watcher) and hands out no address a slice lists
(:mod:`~eni_ipam.agent.quarantine`).

Invariants:

* Only the node's own addresses are kept (``mine``: a member of one of its pools, allocated or
  quarantined, judged when a slice is read): memory follows the node's addresses, not the cluster's.
  A slice listing none of them is not kept at all (:class:`~eni_ipam.kube.informer.Informer`'s
  ``keep``).
* Every endpoint counts, whatever its conditions: a terminating endpoint still receives traffic
  (kube-proxy's terminating-endpoint fallback), and a not-ready one may become ready.
* Until the first list completes, nothing is known: :meth:`EndpointAddresses.synced` is false, and the
  quarantine holds every quarantined address meanwhile.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable
from typing import Any

from .members import canonical_address


@dataclasses.dataclass(frozen=True, slots=True)
class SliceAddresses:
    """What is kept of one EndpointSlice: its resourceVersion and the node's addresses it lists."""

    version: str
    addresses: tuple[str, ...]


class EndpointAddresses:
    """The node's addresses the EndpointSlices list, fed by an informer's events (:meth:`on_slice`)."""

    def __init__(self, mine: Callable[[str], bool]) -> None:
        self.mine = mine
        self._listed: Counter[str] = Counter()
        """Address → how many kept slices list it (an address may be in several Services)."""
        self.informer: Any = None
        """The informer feeding this, once the daemon started it (``synced``)."""

    def listed(self, address: str) -> bool:
        return address in self._listed

    def synced(self) -> bool:
        return self.informer is not None and self.informer.synced.is_set()

    def addresses(self) -> list[str]:
        """Every listed address (for tests and the debug status)."""
        return sorted(self._listed)

    def project(self, obj: dict[str, Any]) -> SliceAddresses:
        """What to keep of a whole EndpointSlice: the node's addresses among its endpoints'."""
        found: list[str] = []
        for endpoint in obj.get("endpoints") or ():
            if not isinstance(endpoint, dict):
                continue
            for raw in endpoint.get("addresses") or ():
                address = canonical_address(raw) if isinstance(raw, str) else None
                if address is not None and address not in found and self.mine(address):
                    found.append(address)
        version = str((obj.get("metadata") or {}).get("resourceVersion", ""))
        return SliceAddresses(version, tuple(found))

    def on_slice(self, event: str, obj: SliceAddresses, previous: SliceAddresses | None) -> None:
        """An informer event: count the new addresses in, the previous ones out."""
        if previous is not None:
            self._listed.subtract(previous.addresses)
        if event != "DELETED":
            self._listed.update(obj.addresses)
        self._listed = +self._listed  # drops the addresses no slice lists any more


def slice_version(kept: SliceAddresses) -> str:
    return kept.version


def lists_any(kept: SliceAddresses) -> bool:
    """Whether a slice is worth keeping: it lists one of the node's addresses."""
    return bool(kept.addresses)
