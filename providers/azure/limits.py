"""Network limits of Azure VM sizes: the shipped table (``vm_sizes.json``) plus configured overrides.

Azure has no API answering "how many NICs may this size have" cheaply (Resource SKUs lists every
SKU of a region, megabytes per call), so the table ships with the package, like EC2's. Each size
becomes ``InstanceLimits(adapters=<max NICs>, ipv4_per_interface=256, hot_attach=False)``:

* 256 IP configurations per NIC, the primary included, whatever the size (*Azure subscription and
  service limits*, Networking limits: "Private IP addresses per network interface");
* ``hot_attach=False``: a NIC can be added to or removed from a VM only while it is deallocated, so
  the planner fills the NICs a VM has and never plans a new one;
* no prefix delegation (``prefixes=False``, no hypervisor): Azure has no /28 prefixes on NICs.

Sizes are matched case-insensitively (ARM reports ``Standard_D8s_v5``; people write
``standard_d8s_v5``). A size in neither the table nor ``azure.vm_sizes`` is unknown:
:class:`~eni_ipam.core.errors.LimitsUnknown`, and its nodes are left alone.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from importlib import resources
from types import MappingProxyType
from typing import Any

from eni_ipam.core.errors import LimitsUnknown
from eni_ipam.core.model import InstanceLimits

TABLE = "vm_sizes.json"
"""Resource name of the table inside the ``providers.azure`` package."""

IP_CONFIGURATIONS_PER_NIC = 256
"""Private IP addresses (IP configurations) per NIC, the primary included."""


def limits_for(max_nics: int) -> InstanceLimits:
    return InstanceLimits(adapters=max_nics, ipv4_per_interface=IP_CONFIGURATIONS_PER_NIC, hot_attach=False)


def parse_table(document: Mapping[str, Any]) -> dict[str, int]:
    """Maximum NICs by size name from the table's JSON document (``{"max_nics": {size: n}}``).

    Raises:
        ValueError: the document is malformed (the message names the entry).
    """
    table = document.get("max_nics")
    if not isinstance(table, Mapping) or not table:
        raise ValueError(f"{TABLE}: 'max_nics' must be a non-empty mapping of VM size to NICs")
    out: dict[str, int] = {}
    for size, nics in table.items():
        if not isinstance(size, str) or not size.startswith("Standard_"):
            raise ValueError(f"{TABLE}: {size!r} is not a VM size name (Standard_…)")
        if isinstance(nics, bool) or not isinstance(nics, int) or not 1 <= nics <= 16:
            raise ValueError(f"{TABLE}: max_nics.{size}: expected an integer from 1 to 16, got {nics!r}")
        if size.lower() in (s.lower() for s in out):
            raise ValueError(f"{TABLE}: {size} is listed twice")
        out[size] = nics
    return out


@functools.cache
def load_table() -> Mapping[str, int]:
    """The shipped table, read once; a read-only mapping of size name to maximum NICs."""
    text = resources.files("providers.azure").joinpath(TABLE).read_text()
    return MappingProxyType(parse_table(json.loads(text)))


class VmSizes:
    """Limits by VM size: the shipped table with ``overrides`` (``azure.vm_sizes``) on top."""

    def __init__(self, overrides: Mapping[str, int] | None = None, *, table: Mapping[str, int] | None = None):
        merged = {**(load_table() if table is None else table), **(overrides or {})}
        self._by_key = {size.lower(): limits_for(nics) for size, nics in merged.items()}

    def get(self, size: str) -> InstanceLimits | None:
        return self._by_key.get(size.lower())

    def limits(self, size: str) -> InstanceLimits:
        """Raises:
        LimitsUnknown: the size is in neither the table nor the overrides.
        """
        found = self.get(size)
        if found is None:
            raise LimitsUnknown(size)
        return found
