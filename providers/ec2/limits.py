"""The shipped EC2 instance-type limits table (``instance_types.json``), loaded once.

The table is generated from EC2's ``DescribeInstanceTypes`` facts (its ``source`` field says from
where) and ships inside the package, so the simulated cloud and the reconciler's tests see real
limits without network access. Each entry becomes an :class:`~eni_ipam.core.model.InstanceLimits`:

* ``adapters`` — interfaces of the default network card;
* ``ipv4`` / ``ipv6`` — addresses per interface, the primary included;
* ``hypervisor`` — ``nitro``, ``xen``, or empty for bare metal (prefix delegation is keyed on it);
* ``cards`` — for a type of several network cards only: the interfaces of each card, by card index
  (``NetworkCards[].MaximumNetworkInterfaces``; 0 for an index the type does not list).

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

from eni_ipam.core.model import InstanceLimits

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
        cards = entry.get("cards", [])
        if not isinstance(cards, list) or not all(
            isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in cards
        ):
            raise ValueError(f"{TABLE}: types.{name}.cards: expected a list of non-negative integers")
        if cards and cards[0] != adapters:
            raise ValueError(f"{TABLE}: types.{name}.cards: card 0 holds {cards[0]}, adapters {adapters}")
        out[name] = limits_from_row(
            {"adapters": adapters, "ipv4": ipv4, "ipv6": ipv6, "hypervisor": hypervisor, "cards": cards}
        )
    return out


@functools.cache
def load_limits() -> Mapping[str, InstanceLimits]:
    """The shipped table, read-only, by instance type.

    Raises:
        FileNotFoundError: the package was installed without its data file.
        ValueError: the table is malformed.
    """
    text = resources.files("providers.ec2").joinpath(TABLE).read_text(encoding="utf-8")
    return MappingProxyType(parse_table(json.loads(text)))


def instance_limits(instance_type: str) -> InstanceLimits | None:
    """Limits of ``instance_type`` from the shipped table, or ``None`` when the type is unknown."""
    return load_limits().get(instance_type)


HYPERVISORS = ("nitro", "xen")
ROW_KEYS = ("adapters", "ipv4", "ipv6", "hypervisor", "bare_metal", "cards")
"""Fields of one table row, in the order the table file writes them (``cards`` only where the type
has several network cards)."""


class InstanceTypeError(ValueError):
    """A malformed DescribeInstanceTypes record; the message names the offending field."""


# -- DescribeInstanceTypes records ---------------------------------------------------------------


def _field(obj: dict[str, Any], key: str, path: str) -> Any:
    if key not in obj or obj[key] is None:
        raise InstanceTypeError(f"{path}.{key}: missing")
    return obj[key]


def _int(value: Any, path: str, minimum: int = 0) -> int:
    # bool is a subclass of int; reject it explicitly.
    if isinstance(value, bool) or not isinstance(value, int):
        raise InstanceTypeError(f"{path}: expected an integer, got {json.dumps(value)}")
    if value < minimum:
        raise InstanceTypeError(f"{path}: expected an integer >= {minimum}, got {value}")
    return value


def _bool(value: Any, path: str) -> bool:
    if not isinstance(value, bool):
        raise InstanceTypeError(f"{path}: expected true or false, got {json.dumps(value)}")
    return value


def _object(value: Any, path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InstanceTypeError(f"{path}: expected an object, got {json.dumps(value)[:60]}")
    return value


def convert_instance_type(record: Any, path: str) -> tuple[str, dict[str, Any]]:
    """Convert one DescribeInstanceTypes ``InstanceTypeInfo`` into a table row.

    ``path`` names the record in error messages, e.g. ``InstanceTypes[12]``.
    """
    record = _object(record, path)
    name = _field(record, "InstanceType", path)
    if not isinstance(name, str) or not name.strip():
        raise InstanceTypeError(f"{path}.InstanceType: expected a non-empty string, got {json.dumps(name)}")

    bare_metal = _bool(_field(record, "BareMetal", path), f"{path}.BareMetal")

    hypervisor = record.get("Hypervisor")
    if hypervisor is None:
        hypervisor = ""
    elif hypervisor not in HYPERVISORS:
        raise InstanceTypeError(
            f"{path}.Hypervisor: expected one of {', '.join(HYPERVISORS)}, got {json.dumps(hypervisor)}"
        )
    if bare_metal:
        hypervisor = ""

    net_path = f"{path}.NetworkInfo"
    net = _object(_field(record, "NetworkInfo", path), net_path)

    max_ifaces = _int(
        _field(net, "MaximumNetworkInterfaces", net_path),
        f"{net_path}.MaximumNetworkInterfaces",
        minimum=1,
    )
    ipv4 = _int(
        _field(net, "Ipv4AddressesPerInterface", net_path),
        f"{net_path}.Ipv4AddressesPerInterface",
        minimum=1,
    )

    ipv6_supported = net.get("Ipv6Supported", False)
    if ipv6_supported is None:
        ipv6_supported = False
    ipv6_supported = _bool(ipv6_supported, f"{net_path}.Ipv6Supported")
    if net.get("Ipv6AddressesPerInterface") is None:
        if ipv6_supported:
            raise InstanceTypeError(f"{net_path}.Ipv6AddressesPerInterface: missing (Ipv6Supported is true)")
        ipv6 = 0
    else:
        ipv6 = _int(net["Ipv6AddressesPerInterface"], f"{net_path}.Ipv6AddressesPerInterface")

    adapters = max_ifaces
    cards = net.get("NetworkCards")
    default_index = net.get("DefaultNetworkCardIndex")
    if default_index is None:
        default_index = 0
    default_index = _int(default_index, f"{net_path}.DefaultNetworkCardIndex")
    if cards is not None:
        if not isinstance(cards, list):
            raise InstanceTypeError(f"{net_path}.NetworkCards: expected a list, got {json.dumps(cards)[:60]}")
        by_index: dict[int, int] = {}
        for i, card in enumerate(cards):
            card_path = f"{net_path}.NetworkCards[{i}]"
            card = _object(card, card_path)
            index = _int(_field(card, "NetworkCardIndex", card_path), f"{card_path}.NetworkCardIndex")
            limit = _int(
                _field(card, "MaximumNetworkInterfaces", card_path),
                f"{card_path}.MaximumNetworkInterfaces",
                minimum=1,
            )
            if index in by_index:
                raise InstanceTypeError(f"{card_path}.NetworkCardIndex: duplicate index {index}")
            by_index[index] = limit
        if by_index:
            if default_index not in by_index:
                raise InstanceTypeError(
                    f"{net_path}.DefaultNetworkCardIndex: no NetworkCards entry with index {default_index}"
                )
            adapters = by_index[default_index]

    row: dict[str, Any] = {
        "adapters": adapters,
        "ipv4": ipv4,
        "ipv6": ipv6,
        "hypervisor": hypervisor,
        "bare_metal": bare_metal,
    }
    # The primary interface is on card 0 (AttachNetworkInterface: "The primary network interface
    # must be assigned to network card index 0"); a type whose default card is another keeps only
    # that card's interfaces, as before cards were read.
    if cards is not None and len(by_index) > 1 and default_index == 0:
        row["cards"] = [by_index.get(i, 0) for i in range(max(by_index) + 1)]
    return name, row


def limits_from_row(row: Mapping[str, Any]) -> InstanceLimits:
    """The :class:`~eni_ipam.core.model.InstanceLimits` of one table row."""
    return InstanceLimits(
        adapters=row["adapters"],
        ipv4_per_interface=row["ipv4"],
        ipv6_per_interface=row["ipv6"],
        hypervisor=row["hypervisor"],
        cards=tuple(row.get("cards") or ()),
        # IPv6 /80 prefixes, as /28s, on Nitro only ("Network interfaces with prefixes are supported
        # with instances built on the Nitro System"), and only where the type has IPv6 at all.
        ipv6_prefixes=row["hypervisor"] == "nitro" and row["ipv6"] > 0,
    )
