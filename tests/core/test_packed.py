"""Packed addresses read like the tuples of strings they replace, and cost a fraction of them."""

from __future__ import annotations

import dataclasses
import pickle
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eni_ipam.core.model import Interface
from eni_ipam.core.packed import (
    ATTACHMENT_PREFIX,
    EMPTY_ADDRESSES,
    Addresses,
    AddressSet,
    Prefixes,
    address_int,
    detail_attachment,
    detail_ip,
    pack,
    pack_detail,
)
from eni_ipam.core.spec import NodeResource

ipv4 = st.integers(min_value=0, max_value=2**32 - 1).map(
    lambda n: ".".join(str((n >> s) & 255) for s in (24, 16, 8, 0))
)


@given(st.lists(ipv4, max_size=40))
def test_addresses_read_back_as_the_strings_given_in_order(items: list[str]) -> None:
    packed = Addresses.of(items)
    assert list(packed) == items and len(packed) == len(items)
    assert packed == tuple(items) and packed == items
    assert all(packed[i] == a for i, a in enumerate(items))
    assert all(a in packed for a in items)
    assert pickle.loads(pickle.dumps(packed)) == packed


def test_membership_only_matches_whole_addresses() -> None:
    # 1.2.3.4 followed by 5.6.7.8 contains the bytes of 2.3.4.5 at an odd offset.
    packed = Addresses.of(["1.2.3.4", "5.6.7.8"])
    assert "2.3.4.5" not in packed and "5.6.7.8" in packed
    assert "10.0.0" not in packed and 7 not in packed


@pytest.mark.parametrize("bad", ["10.0.0", "10.0.0.256", "a.b.c.d", "10.0.0.1/28"])
def test_a_string_that_is_not_a_dotted_quad_is_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        pack([bad])


def test_prefixes_keep_their_length() -> None:
    prefixes = Prefixes.of(["10.0.0.16/28", "10.0.1.0/24"])
    assert list(prefixes) == ["10.0.0.16/28", "10.0.1.0/24"] and prefixes[-1] == "10.0.1.0/24"
    with pytest.raises(ValueError):
        Prefixes.of(["10.0.0.16"])


@given(st.sets(ipv4, max_size=30), st.sets(ipv4, max_size=30))
def test_an_address_set_is_a_set(a: set[str], b: set[str]) -> None:
    packed = AddressSet(a)
    assert packed == a and len(packed) == len(a)
    assert (packed & b) == (a & b) and (packed - b) == (a - b)
    assert sorted(packed, key=address_int) == list(packed)


def test_an_interface_and_a_resource_pack_what_they_are_given() -> None:
    iface = Interface(
        id="eni-1", device_index=0, subnet_id="s", primary_ip="10.0.0.4", addresses=("10.0.0.5",)
    )
    assert isinstance(iface.addresses, Addresses) and iface.addresses == ("10.0.0.5",)
    assert Interface(id="eni-2", device_index=0, subnet_id="s", primary_ip="").addresses is EMPTY_ADDRESSES
    resource = NodeResource(name="n", instance_id="i", in_use=frozenset({"10.0.0.5"}))
    assert isinstance(resource.in_use, AddressSet) and "10.0.0.5" in resource.in_use


def test_ten_packed_addresses_cost_a_fifth_of_ten_strings() -> None:
    items = [f"10.1.{n}.{n + 7}" for n in range(10)]
    strings = sys.getsizeof(tuple(items)) + sum(sys.getsizeof(a) for a in items)
    packed = Addresses.of(items)
    assert (sys.getsizeof(packed) + sys.getsizeof(packed.packed)) * 5 < strings


hex_digits = st.text("0123456789abcdef", min_size=1, max_size=31)
any_text = st.text(max_size=40)


@given(
    st.one_of(ipv4, st.just(""), any_text),
    st.one_of(hex_digits.map(lambda d: ATTACHMENT_PREFIX + d), st.just(""), any_text),
)
def test_a_primary_address_and_an_attachment_read_back_as_given(ip: str, attachment: str) -> None:
    detail = pack_detail(ip, attachment)
    assert (detail_ip(detail), detail_attachment(detail)) == (ip, attachment)
    iface = Interface(id="eni-1", device_index=1, subnet_id="s", primary_ip=ip, attachment_id=attachment)
    assert (iface.primary_ip, iface.attachment_id) == (ip, attachment)
    copy = dataclasses.replace(iface, delete_on_termination=True)  # a copy keeps both
    assert (copy.primary_ip, copy.attachment_id) == (ip, attachment)
    assert dataclasses.replace(copy, delete_on_termination=False) == iface
    assert pickle.loads(pickle.dumps(iface)) == iface


def test_their_usual_forms_pack_into_one_int_and_others_stay_strings() -> None:
    usual = pack_detail("10.0.1.2", "eni-attach-0a1b2c3d4e5f60718")
    assert isinstance(usual, int)
    strings = sys.getsizeof("10.0.1.2") + sys.getsizeof("eni-attach-0a1b2c3d4e5f60718")
    assert sys.getsizeof(usual) * 3 < strings
    assert pack_detail("", "") == 0
    for ip, attachment in (("010.0.0.1", ""), ("10.1", ""), ("10.0.0.1", "eni-attach-0A"), ("", "attach-1")):
        assert pack_detail(ip, attachment) == (ip, attachment)
    iface = Interface(id="eni-1", device_index=1, subnet_id="s", primary_ip="10.0.0.4", attachment_id="x")
    moved = dataclasses.replace(iface, detail=pack_detail(iface.primary_ip, "eni-attach-01"))
    assert (moved.primary_ip, moved.attachment_id) == ("10.0.0.4", "eni-attach-01")
    assert "primary_ip='10.0.0.4'" in repr(moved) and "attachment_id='eni-attach-01'" in repr(moved)
