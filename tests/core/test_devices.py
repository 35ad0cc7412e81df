"""MAC addresses, network cards and interface kinds: one written form, nothing no device can have,
one int an interface, a cloud's bad value dropped with a warning rather than trusted or raised, and
an interface type not known to be plain never filled."""

from __future__ import annotations

import re
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st
from structlog.testing import capture_logs

from eni_ipam.core import devices
from eni_ipam.core.model import Interface

# Device MACs: the group bit (lowest of the first octet) clear, not all zeros.
device_macs = st.integers(1, 2**48 - 1).filter(lambda v: not v & 1 << 40)


@given(device_macs, st.integers(0, devices.MAX_NETWORK_CARD), st.sampled_from(devices.Kind))
def test_a_mac_a_card_and_a_kind_read_back_from_one_int(value: int, card: int, kind: devices.Kind) -> None:
    text = devices.mac_text(value)
    assert re.fullmatch(devices.MAC_PATTERN, text), text
    link = devices.pack(text, card, kind)
    assert (devices.mac_of(link), devices.card_of(link), devices.kind_of(link)) == (text, card, kind)
    assert devices.fillable(link) == (kind in devices.FILLABLE)
    assert (link <= devices.MAX_PLAIN_LINK) == (card == 0 and kind is devices.Kind.PLAIN)
    assert 0 <= link <= devices.MAX_LINK
    assert sys.getsizeof(link) <= 32  # at most two 30-bit digits, whatever the kind
    link = devices.pack(text, card)
    # Written by ARM: upper case, dashes.
    assert devices.pack(text.upper().replace(":", "-"), card) == link


@pytest.mark.parametrize(
    "text",
    [
        "0a:1b:2c:3d:4e",  # five octets
        "0a:1b:2c:3d:4e:5f:60",
        "0a1b2c3d4e5f",  # no separators
        "0a:1b-2c:3d:4e:5f",  # two separators
        "0a:1b:2c:3d:4e:5g",
        " 0a:1b:2c:3d:4e:5f",
        "0a:1b:2c:3d:4e:5f\n",
        "0a.1b.2c.3d.4e.5f",
        "01:00:5e:00:00:01",  # multicast
        "ff:ff:ff:ff:ff:ff",  # broadcast
        "00:00:00:00:00:00",
    ],
)
def test_what_no_device_has_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        devices.mac_value(text)
    with pytest.raises(ValueError):
        devices.pack(text)


@pytest.mark.parametrize("card", [-1, devices.MAX_NETWORK_CARD + 1, True, 1.0])
def test_a_card_out_of_bounds_is_refused(card: object) -> None:
    with pytest.raises(ValueError, match="network card"):
        devices.pack("", card)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("interface_type", "kind"),
    [
        ("interface", devices.Kind.PLAIN),
        (None, devices.Kind.PLAIN),  # an answer without the field: every interface was plain
        ("", devices.Kind.PLAIN),
        ("efa", devices.Kind.EFA),
        ("efa-only", devices.Kind.EFA_ONLY),
        ("trunk", devices.Kind.TRUNK),
        ("branch", devices.Kind.BRANCH),
        ("network_load_balancer", devices.Kind.OTHER),
        ("a-type-ec2-adds-next-year", devices.Kind.OTHER),
        ("EFA", devices.Kind.OTHER),  # EC2 writes lower case: anything else is not proven plain
        (3, devices.Kind.OTHER),
    ],
)
def test_an_interface_type_reads_as_its_kind_and_an_unknown_one_is_never_filled(
    interface_type: object, kind: devices.Kind
) -> None:
    assert devices.kind_named(interface_type) is kind
    link = devices.reported("0a:1b:2c:3d:4e:5f", 1, interface_id="eni-1", interface_type=interface_type)
    assert devices.kind_of(link) is kind and devices.card_of(link) == 1
    assert devices.fillable(link) == (kind in {devices.Kind.PLAIN, devices.Kind.EFA})


def test_every_kind_has_its_status_value() -> None:
    from typing import get_args

    from eni_ipam.core.pool_status import InterfaceType

    assert sorted(k.label for k in devices.Kind) == sorted(get_args(InterfaceType))


def test_no_mac_and_card_0_is_the_small_int_0() -> None:
    assert devices.pack() == 0 and devices.mac_of(0) == "" and devices.card_of(0) == 0
    assert devices.normal_mac("") == "" and devices.normal_mac("0A-1B-2C-3D-4E-5F") == "0a:1b:2c:3d:4e:5f"


def test_a_clouds_bad_values_are_dropped_with_a_warning_naming_the_interface() -> None:
    with capture_logs() as logs:
        assert devices.reported("0A:1B:2C:3D:4E:5F", 2, interface_id="eni-1") == devices.pack(
            "0a:1b:2c:3d:4e:5f", 2
        )
        assert devices.reported(None, 0, interface_id="eni-2") == 0  # no MAC yet: silent
        assert devices.reported("", 3, interface_id="eni-3") == devices.pack("", 3)
        assert logs == []
        assert devices.reported("01:00:5e:00:00:01", 1, interface_id="eni-4") == devices.pack("", 1)
        assert devices.reported(42, 0, interface_id="eni-5") == 0
        assert devices.reported("0a:1b:2c:3d:4e:5f", 999, interface_id="eni-6") == devices.pack(
            "0a:1b:2c:3d:4e:5f"
        )
    assert [(e["event"], e["interface"]) for e in logs] == [
        ("interface_mac_refused", "eni-4"),
        ("interface_mac_refused", "eni-5"),
        ("interface_network_card_refused", "eni-6"),
    ]
    assert all(e["log_level"] == "warning" for e in logs)


def test_an_interface_reads_its_mac_and_card_and_refuses_a_link_out_of_bounds() -> None:
    def make(link: int) -> Interface:
        return Interface(id="eni-1", device_index=0, subnet_id="s", primary_ip="10.0.0.4", link=link)

    iface = make(devices.pack("02:00:00:00:00:01", 3))
    assert (iface.mac_address, iface.network_card) == ("02:00:00:00:00:01", 3)
    assert (make(0).mac_address, make(0).network_card) == ("", 0)
    for bad in (-1, devices.MAX_LINK + 1):
        with pytest.raises(ValueError, match="eni-1"):
            make(bad)


def test_an_interface_pays_32_bytes_for_its_mac_and_card() -> None:
    """What the representation saves (docs/PERFORMANCE.md §3): one int object in one slot, not an
    80-byte string and a second slot."""
    link = devices.pack("0a:1b:2c:3d:4e:5f", 31)
    assert sys.getsizeof(link) == 32
    assert sys.getsizeof(devices.pack()) == sys.getsizeof(0)  # the shared small int: nothing
