"""The shipped EC2 instance-type limits table (``instance_types.json``), loaded once.

The table is generated from EC2's ``DescribeInstanceTypes`` facts (its ``source`` field says from
where) and ships inside the package, so the simulated cloud and the reconciler's tests see real
limits without network access. Each entry becomes an :class:`~eni_ipam.model.InstanceLimits`:

* ``adapters`` — interfaces of the default network card;
* ``ipv4`` / ``ipv6`` — addresses per interface, the primary included;
* ``hypervisor`` — ``nitro``, ``xen``, or empty for bare metal (prefix delegation is keyed on it).

The file is read on first use and cached for the life of the process; the mapping returned is
read-only so no caller can alter another's view of the table.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from importlib import resources
from types import MappingProxyType
from typing import Any

from eni_ipam.model import InstanceLimits

TABLE = "instance_types.json"
"""Resource name of the table inside the ``providers`` package."""


def parse_table(document: Mapping[str, Any]) -> dict[str, InstanceLimits]:
    """Turn the table's JSON document into limits by instance type.

    Args:
        document: the parsed JSON, shaped ``{"source": str, "types": {type: {adapters, ipv4, ...}}}``.

    Returns:
        Limits by instance type name.

    Raises:
        ValueError: an entry is missing a field or has a value of the wrong kind (the error names it).
    """
    types = document.get("types")
    if not isinstance(types, Mapping):
        raise ValueError(f"{TABLE}: 'types' must be a mapping of instance type to limits")
    out: dict[str, InstanceLimits] = {}
    for name, entry in types.items():
        try:
            adapters, ipv4 = entry["adapters"], entry["ipv4"]
            ipv6 = entry.get("ipv6", 0)
            hypervisor = entry.get("hypervisor", "")
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"{TABLE}: types.{name}: missing or malformed field {exc}") from exc
        for field, value in (("adapters", adapters), ("ipv4", ipv4), ("ipv6", ipv6)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{TABLE}: types.{name}.{field}: expected a non-negative integer")
        if not isinstance(hypervisor, str):
            raise ValueError(f"{TABLE}: types.{name}.hypervisor: expected a string")
        out[name] = InstanceLimits(
            adapters=adapters, ipv4_per_interface=ipv4, ipv6_per_interface=ipv6, hypervisor=hypervisor
        )
    return out


@functools.cache
def load_limits() -> Mapping[str, InstanceLimits]:
    """The shipped table, read-only, by instance type.

    Raises:
        FileNotFoundError: the package was installed without its data file.
        ValueError: the table is malformed.
    """
    text = resources.files("providers").joinpath(TABLE).read_text(encoding="utf-8")
    return MappingProxyType(parse_table(json.loads(text)))


def instance_limits(instance_type: str) -> InstanceLimits | None:
    """Limits of ``instance_type`` from the shipped table, or ``None`` when the type is unknown."""
    return load_limits().get(instance_type)
