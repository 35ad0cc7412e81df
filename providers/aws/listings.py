"""EC2's two heavy listings read straight into the model: a botocore response parser for
``DescribeNetworkInterfaces`` and ``DescribeInstances`` (docs/aws.md, decision 0020).

Why: at 100,000 nodes a resync reads 400,000 interfaces in each of the two listings (EC2 nests
every instance's interfaces in ``DescribeInstances``), over a gigabyte of XML. botocore makes an
ElementTree of every page, then a dict of every element, and the provider's dict readers make the
model of those: about 300 ms of CPU for a page of 1,000 interfaces, two minutes a resync, in the
executor's threads but holding the GIL. Its expat pass over a page is one C call of about 40 ms, and
the millions of objects it allocates set off the garbage collector: the event loop stalls for 40 to
70 ms at a time.

How it plugs in: :class:`ListingParserFactory` is botocore's public ``response_parser_factory``
session component (:func:`install`). Its parser for protocol ``ec2`` reads a successful (200)
answer of one of the two listings itself, and only when the call asked for the model
(:func:`model_answers`: :class:`~providers.aws.client.Ec2Client` sets it around its own listings, in
the worker thread that runs each call). Every other answer (errors, other operations, the same
operations called by anyone else on the same client) goes to botocore's own ``EC2QueryParser``
unchanged, so retries, error codes, throttling counts and the request path stay botocore's.

How it parses: the answers are machine-written, so the parser cuts a page into its items with
``bytes.find`` and reads only the elements the model needs, with a regular expression per group of
leaf elements, decoding only the text it keeps. It assumes no element order, no whitespace and no
optional element. One walk over an item (:func:`_walk`) finds its end and the spans of its nested
lists (``groupSet``, ``tagSet``, ``privateIpAddressesSet``, an instance's ``networkInterfaceSet``…);
fields are read outside those spans, so an instance's ``subnetId`` is never one of its
interfaces'. Which names are unique outside the lists is taken from botocore's EC2 model (a test
checks it, so a botocore upgrade that changes it fails). An item holding an entity, a character
reference, CDATA, a comment or a carriage return is read element by element through ElementTree,
which decodes text exactly as botocore does.

Invariants:

* Same values as botocore: an :class:`~eni_ipam.core.model.Interface` equals ``parse_interface``
  of botocore's parse of the same bytes, an :class:`~providers.ec2.provider.InstanceInfo` equals
  ``parse_instance`` (tests/providers/aws/test_fast_parse.py, on moto's answers and variations).
* Loud, never lossy: a layout it does not read (a truncated page, text or another element among
  items, a list twice in an item, an empty item, a missing id, an address that is not one) raises
  :class:`ListingParseError`, which the client translates into a
  :class:`~eni_ipam.core.errors.ProviderError` (code ``ResponseParserError``). A page is read whole or
  not at all.
* Loop-friendly: every C call works on one item or less (a few KB), never on a page, and every
  table is split in :data:`SHARDS` dicts (growing one dict of 400,000 entries holds the GIL for
  20 ms), so the worker thread gives the GIL up within the switch interval.
* Shared values: equal strings (subnets, types, zones, tag keys and values), security group
  tuples and tag maps are one object each, from bounded tables; instance ids are interned
  (``sys.intern``), so the manager's pools, which name them too, hold the same objects; addresses
  and prefixes are packed (:mod:`eni_ipam.core.packed`).
* Reuse is an optimisation only: a :class:`ReuseCache` hands back the previous listing's object for
  an item of the same bytes and the same id. A miss, or no cache, is a parse like any other.
"""

from __future__ import annotations

import contextlib
import re
import socket
import sys
import threading
import xml.etree.ElementTree as ETree
from collections.abc import Callable, Iterator
from typing import Any, cast

import botocore.parsers
from botocore.utils import lowercase_dict

from eni_ipam.core.devices import MAX_NETWORK_CARD, reported
from eni_ipam.core.model import DETACHED_INDEX, EMPTY_TAGS, Interface, Tags, address_key, ipv6_prefix_key
from eni_ipam.core.packed import EMPTY_ADDRESSES, EMPTY_PREFIXES, Addresses, Prefixes
from providers.ec2.provider import InstanceInfo, InstanceState

OPERATIONS = ("DescribeNetworkInterfaces", "DescribeInstances")
"""The operations whose successful answers the parser reads."""

MODEL_KEY = "EniIpamModel"
"""Key of the parsed answer holding the page's model objects (``Interface`` or ``InstanceInfo``);
botocore's own key (``NetworkInterfaces``, ``Reservations``) is then absent."""

ATTACHED = frozenset({"attaching", "attached"})
"""Attachment states in which an interface counts as attached (with an instance, on any card)."""

SHARDS = 64
"""Every table here is split in this many dicts by hash: growing a dict copies it whole while
holding the GIL (about 20 ms at 400,000 entries), a shard is a sixty-fourth of that."""
_MASK = SHARDS - 1

SHARED_LIMIT = 1 << 18
"""Distinct tag maps (and security-group tuples) the sharing caches hold; a full shard starts
afresh. A cluster of 100,000 nodes has about 100,000 tag maps (each node's interfaces carry its name)."""

STRINGS_LIMIT = 1 << 20
"""Distinct strings (instance ids, subnets, tag keys and values…) shared at most; a full shard
starts afresh (the strings already handed out stay shared)."""

REUSE_LIMIT = 1 << 20
"""Interfaces one generation of a :class:`ReuseCache` holds at most (about 75 bytes each)."""


def _shards() -> list[dict[Any, Any]]:
    return [{} for _ in range(SHARDS)]


Parsed = Interface | InstanceInfo
"""What the parser makes of an item."""


# botocore has no type information: its classes are Any to mypy.
class ListingParseError(botocore.parsers.ResponseParserError):  # type: ignore[misc]
    """A 200 answer to a listing that is not laid out as EC2 lays it out; nothing of the page is used."""


# -- plugging into botocore -------------------------------------------------------------------------

_local = threading.local()


class Listing:
    """One paged listing in progress: whether its answers are wanted in the model, and the reuse
    cache it reads (``None``: parse every item)."""

    __slots__ = ("_found", "cache", "full")

    def __init__(self, cache: ReuseCache | None = None, *, full: bool = False) -> None:
        self.cache = cache
        self.full = full
        """A listing of everything in scope: its end turns the cache's generations over."""
        self._found: list[dict[int, Parsed]] = _shards()

    def finish(self) -> None:
        """The last page was read: hand what the listing parsed to the cache."""
        if self.cache is not None:
            self.cache.keep(self._found, full=self.full)
        self._found = _shards()


@contextlib.contextmanager
def model_answers(listing: Listing) -> Iterator[None]:
    """Within the block, in this thread, the two listings' answers come in the model (the key
    :data:`MODEL_KEY`) when the client's session has the :class:`ListingParserFactory`."""
    previous = getattr(_local, "listing", None)
    _local.listing = listing
    try:
        yield
    finally:
        _local.listing = previous


class ListingParserFactory(botocore.parsers.ResponseParserFactory):  # type: ignore[misc]
    """botocore's ``response_parser_factory`` component: botocore's parsers, with the EC2 one
    wrapped in :class:`ListingParser`."""

    def create_parser(self, protocol_name: str) -> Any:
        parser = super().create_parser(protocol_name)
        return ListingParser(parser) if protocol_name == "ec2" else parser


def install(session: Any) -> None:
    """Make clients created from ``session`` (a botocore session) use the listing parser."""
    session.register_component("response_parser_factory", ListingParserFactory())


class ListingParser:
    """botocore's EC2 parser, except for the successful answers of the two listings when the call
    asked for the model (see the module docstring)."""

    def __init__(self, botocore_parser: Any) -> None:
        self._botocore = botocore_parser

    def parse(self, response: dict[str, Any], shape: Any) -> Any:
        listing: Listing | None = getattr(_local, "listing", None)
        page = _PAGES.get(getattr(shape, "name", "")) if listing is not None else None
        if page is None or listing is None or response.get("status_code") != 200:
            return self._botocore.parse(response, shape)
        body = response["body"]
        try:
            items, token, request_id = page(body, listing)
        except ListingParseError:
            raise
        except Exception as exc:  # bad UTF-8, numbers, addresses, XML in a text: the answer is wrong
            raise ListingParseError(f"{shape.name}: {type(exc).__name__}: {exc}") from exc
        parsed: dict[str, Any] = {MODEL_KEY: items}
        if token is not None:
            parsed["NextToken"] = token
        # The metadata botocore's parser gives a successful answer.
        metadata: dict[str, Any] = {} if request_id is None else {"RequestId": request_id}
        metadata["HTTPStatusCode"] = response["status_code"]
        metadata["HTTPHeaders"] = lowercase_dict(response["headers"])
        algorithm = (response.get("context") or {}).get("checksum", {}).get("response_algorithm")
        if algorithm:
            metadata["ChecksumAlgorithm"] = algorithm
        parsed["ResponseMetadata"] = metadata
        return parsed

    def __getattr__(self, name: str) -> Any:
        return getattr(self._botocore, name)


# -- the reuse cache --------------------------------------------------------------------------------


class ReuseCache:
    """One listing's previous items by their bytes: an unchanged item is not parsed again.

    Two generations of ``hash(item bytes) → Interface`` (or ``InstanceInfo``), each in
    :data:`SHARDS` dicts. Every listing reads both; what a listing parsed (or reused) goes into the
    current one when the listing ends. The end of a full listing (everything in scope) keeps
    exactly what it saw, so an item that is gone is forgotten then; a current generation that
    partial listings grew past :data:`REUSE_LIMIT` becomes the previous one. A hit must name the same id, so a
    wrong reuse would need the same interface (or instance) and a 64-bit collision of Python's
    keyed hash.

    Thread-safe: several listings run at once in the client's threads. Readers take one reference to
    the generations (``dict.get`` is atomic) and a listing's end swaps them under a lock.
    """

    def __init__(self, limit: int = REUSE_LIMIT) -> None:
        self.limit = limit
        self._generations: tuple[list[dict[int, Parsed]], list[dict[int, Parsed]]] = (
            _shards(),
            _shards(),
        )
        self._lock = threading.Lock()

    def get(self, key: int) -> Parsed | None:
        current, previous = self._generations
        found = current[key & _MASK].get(key)
        return previous[key & _MASK].get(key) if found is None else found

    def keep(self, found: list[dict[int, Parsed]], *, full: bool) -> None:
        with self._lock:  # two listings ending at once must not lose one's entries
            current = self._generations[0]
            if full:
                # What this listing did not see is gone (or changed): only its items are kept. At
                # 100,000 nodes a second generation was 400,000 more entries, for items no one asks for.
                self._generations = (found, _shards())
                return
            for shard, more in zip(current, found, strict=True):
                shard.update(more)
            if sum(map(len, current)) > self.limit:
                self._generations = (_shards(), current)

    def __len__(self) -> int:
        current, previous = self._generations
        return sum(map(len, current)) + sum(map(len, previous))


# -- structure ------------------------------------------------------------------------------------

Span = tuple[int, int]
Lists = dict[bytes, Span]
"""An item's nested lists: element name → content span."""


def _fail(why: str, at: int) -> ListingParseError:
    return ListingParseError(f"unexpected layout: {why} (byte {at})")


def _walk(body: bytes, start: int, stop: int) -> tuple[int, Lists]:
    """The item opened just before ``start``: the index of its ``</item>`` and its nested lists
    (elements whose children are ``<item>``), in order.

    A nested list is skipped whole, whatever it holds (an instance's interfaces with their own
    lists), so the cost is a few ``find`` calls per nested list, not per element.
    """
    find = body.find
    lists: Lists = {}
    pos = start
    while True:
        at = find(b"item", pos, stop)  # the next <item> or </item>: one scan for both
        if at < 0:
            raise _fail("an item is not closed", start)
        before, after = body[at - 1], body[at + 4 : at + 5]
        if before != 60 and not (before == 47 and body[at - 2] == 60):  # neither "<item" nor "</item"
            pos = at + 4  # "item" in a text or in another name
            continue
        if after != b">":
            raise _fail("an empty or attributed item", at)
        if before == 47:
            return at - 2, lists
        nested = at - 1
        # The list holding the nested items: the last tag before the first of them.
        lt = body.rfind(b"<", pos, nested)
        gt = find(b">", lt, nested)
        name = body[lt + 1 : gt]
        if lt < 0 or not name or name[0] in b"/!?" or name == b"item" or b" " in name:
            raise _fail("an item among other elements", nested)
        end = find(b"</" + name + b">", nested, stop)
        if end < 0 or name in lists:
            raise _fail(f"list {name.decode(errors='replace')} not closed, or twice in an item", nested)
        lists[name] = (gt + 1, end)
        pos = end


def _items(body: bytes, lo: int, hi: int) -> Iterator[tuple[int, int, Lists]]:
    """The items of a list's content ``body[lo:hi]``: (content start, ``</item>`` index, nested
    lists). Anything but whitespace between the items fails."""
    find = body.find
    pos = lo
    while True:
        lt = find(b"<", pos, hi)
        if lt < 0:
            if pos < hi and not body[pos:hi].isspace():
                raise _fail("text after the last item", pos)
            return
        if (lt > pos and not body[pos:lt].isspace()) or not body.startswith(b"<item>", lt):
            raise _fail("something else than an item in a list", lt)
        end, lists = _walk(body, lt + 6, hi)
        yield lt + 6, end, lists
        pos = end + 7


def _plain(body: bytes, start: int, end: int) -> bool:
    """No entity, character reference, CDATA section, comment or carriage return in
    ``body[start:end]``: its text is its bytes, decoded (three ``memchr``)."""
    find = body.find
    return find(b"&", start, end) < 0 and find(b"!", start, end) < 0 and find(b"\r", start, end) < 0


def _find(body: bytes, needle: bytes, lo: int, hi: int, spans: list[Span]) -> int:
    """The first ``needle`` in ``body[lo:hi]`` outside ``spans`` (an item's nested lists)."""
    i = body.find(needle, lo, hi)
    while i >= 0:
        for a, b in spans:
            if a <= i < b:
                i = body.find(needle, b, hi)
                break
        else:
            return i
    return -1


class _Structure:
    """A structure element (``attachment``, ``placement``…): where its content is."""

    __slots__ = ("close", "name", "open")

    def __init__(self, name: str) -> None:
        self.name = name
        self.open = f"<{name}>".encode()
        self.close = f"</{name}>".encode()

    def span(self, body: bytes, lo: int, hi: int, spans: list[Span]) -> Span | None:
        """The content span of the first one in ``body[lo:hi]`` outside ``spans``; ``None`` when
        there is none or it is empty (``<name/>``), which botocore reads as an empty dict."""
        i = _find(body, self.open, lo, hi, spans)
        if i < 0:
            return None
        i += len(self.open)
        j = body.find(self.close, i, hi)
        if j < 0:
            raise _fail(f"<{self.name}> is not closed", i)
        return i, j


class _Leaves:
    """Leaf elements read together: their text by element name, as botocore reads it (an empty
    element is ``""``; an absent one is absent)."""

    __slots__ = ("names", "pattern")

    def __init__(self, *names: str) -> None:
        self.names = tuple(name.encode() for name in names)
        # Opened and closed around plain text, or empty: one C call finds every one of them.
        self.pattern = re.compile(f"<({'|'.join(names)})(?:>([^<]*)</\\1>|\\s*/>)".encode())

    def read(self, body: bytes, start: int, end: int, spans: list[Span], plain: bool) -> dict[bytes, str]:
        """The leaves in ``body[start:end]`` outside ``spans``; ``plain``: the item has no entity,
        CDATA, comment or carriage return (:func:`_plain`)."""
        if plain:
            raw: dict[bytes, bytes] = {}
            findall = self.pattern.findall
            every = len(self.names)
            for lo, hi in spans:
                if lo > start:
                    raw.update(findall(body, start, lo))
                    if len(raw) == every:  # each is once outside the lists (EC2's model says so)
                        break
                start = max(start, hi)
            else:
                raw.update(findall(body, start, end))
            return {name: value.decode() for name, value in raw.items()}
        # Entities, CDATA or comments somewhere in the item: element by element, as expat reads them.
        found = {}
        for name in self.names:
            text = _text(body, name, start, end, spans)
            if text is not None:
                found[name] = text
        return found


def _text(body: bytes, name: bytes, lo: int, hi: int, spans: list[Span]) -> str | None:
    """The text of the first element ``name`` in ``body[lo:hi]`` outside ``spans`` (``None``: no
    such element), decoded as expat decodes it."""
    opened = b"<" + name + b">"
    i = _find(body, opened, lo, hi, spans)
    if i < 0:
        empty = _find(body, b"<" + name + b"/>", lo, hi, spans) >= 0
        return "" if empty or _find(body, b"<" + name + b" />", lo, hi, spans) >= 0 else None
    i += len(opened)
    j = body.find(b"</" + name + b">", i, hi)
    if j < 0:
        raise _fail(f"<{name.decode()}> is not closed", i)
    raw = body[i:j]
    if b"&" in raw or b"<" in raw or b"\r" in raw:
        # ElementTree reads it as botocore does: entities and character references decoded, CDATA
        # kept, comments dropped, line ends normalised; the text before any child element.
        return ETree.fromstring(b"<t>" + raw + b"</t>").text or ""
    return raw.decode()


def _root(body: bytes, name: bytes) -> Span:
    """The content span of the root element ``name``: the document's first element, closed at the
    very end (a truncated page fails here)."""
    i = body.find(b"<" + name, 0, 512)
    head = body[:i].strip()
    if i < 0 or (head and not (head.startswith(b"<?xml") and head.endswith(b"?>"))):
        raise _fail(f"the root element is not {name.decode()}", 0)
    gt = body.find(b">", i)
    if gt < 0 or body[i + 1 + len(name)] not in b" \t\r\n>":
        raise _fail(f"the root element is not {name.decode()}", i)
    end = body.rfind(b"</" + name + b">")
    tail = body[end + len(name) + 3 :]
    if end < gt or (tail and not tail.isspace()):
        raise _fail(f"{name.decode()} is not closed at the end (truncated?)", len(body))
    return gt + 1, end


_PAGE_LEAVES = _Leaves("nextToken", "requestId")


def _page(body: bytes, root: bytes, name: bytes) -> tuple[int, int, str | None, str | None]:
    """The content span of the root's list ``name`` (``lo == hi`` when empty or absent), and the
    page's ``nextToken`` and ``requestId`` (root elements outside the list)."""
    lo, hi = _root(body, root)
    start = body.find(b"<" + name + b">", lo, hi)
    if start < 0:
        if body.find(b"<item>", lo, hi) >= 0:
            raise _fail(f"items outside <{name.decode()}>", lo)
        content = end = lo
    else:
        end = body.rfind(b"</" + name + b">", start, hi)
        if end < 0:
            raise _fail(f"<{name.decode()}> is not closed", start)
        content = start + len(name) + 2
    spans = [(content, end)]
    keys = _PAGE_LEAVES.read(body, lo, hi, spans, _plain(body, lo, content) and _plain(body, end, hi))
    return content, end, keys.get(b"nextToken"), keys.get(b"requestId")


# -- shared values --------------------------------------------------------------------------------

_aton = socket.inet_aton
_strings: list[dict[str, str]] = _shards()
_tags_shared: list[dict[bytes, Tags]] = _shards()
_groups_shared: list[dict[bytes, tuple[str, ...]]] = _shards()


def forget_shared() -> None:
    """Empty the tables of shared strings, tag maps and security-group tuples (a measurement
    starting cold)."""
    for table in (_strings, _tags_shared, _groups_shared):
        for shard in table:
            shard.clear()


def _one(text: str) -> str:
    """``text``, as the one string object of its value (``sys.intern`` without its single dict)."""
    shard = _strings[hash(text) & _MASK]
    if len(shard) >= STRINGS_LIMIT // SHARDS:
        shard.clear()  # bounded: start afresh (the strings already handed out stay shared)
    return shard.setdefault(text, text)


def _share(table: list[dict[bytes, Any]], key: bytes, value: Any) -> Any:
    shard = table[hash(key) & _MASK]
    if len(shard) >= SHARED_LIMIT // SHARDS:
        shard.clear()
    return shard.setdefault(key, value)


def _groups(body: bytes, span: Span | None) -> tuple[str, ...]:
    """The ``groupId`` of every item of a ``groupSet``, in order (every item must have one); one
    tuple for every equal list."""
    if span is None:
        return ()
    raw = body[span[0] : span[1]]
    found = _groups_shared[hash(raw) & _MASK].get(raw)
    if found is not None:
        return found
    groups = []
    for lo, hi, _ in _items(raw, 0, len(raw)):
        group = _text(raw, b"groupId", lo, hi, [])
        if group is None:
            raise _fail("a security group without groupId", span[0] + lo)
        groups.append(_one(group))
    return cast(tuple[str, ...], _share(_groups_shared, raw, tuple(groups)))


_TAG_ITEMS = re.compile(rb"<item>\s*<key>([^<]*)</key>\s*(?:<value>([^<]*)</value>|<value\s*/>)?\s*</item>")


def _tags(body: bytes, span: Span | None, plain: bool) -> Tags:
    """A ``tagSet`` as :func:`~providers.aws.api.parse_interface` reads it (a tag without a value
    reads ``""``, a later key wins); one :class:`Tags` for every equal list."""
    if span is None:
        return EMPTY_TAGS
    raw = body[span[0] : span[1]]
    found = _tags_shared[hash(raw) & _MASK].get(raw)
    if found is not None:
        return found
    tags: dict[str, str] = {}
    # EC2's layout, in one C call: every item a key, then a value (or none).
    pairs = _TAG_ITEMS.findall(raw) if plain and b"<item/" not in raw and b"<item " not in raw else None
    if pairs is not None and len(pairs) == raw.count(b"<item>"):
        for key, value in pairs:
            tags[_one(key.decode())] = _one(value.decode())
    else:
        for lo, hi, _ in _items(raw, 0, len(raw)):
            key_text = _text(raw, b"key", lo, hi, [])
            if key_text is None:
                raise _fail("a tag without key", span[0] + lo)
            tags[_one(key_text)] = _one(_text(raw, b"value", lo, hi, []) or "")
    return cast(Tags, _share(_tags_shared, raw, Tags(tags) if tags else EMPTY_TAGS))


# -- DescribeNetworkInterfaces --------------------------------------------------------------------

_INTERFACE = _Leaves("networkInterfaceId", "subnetId", "privateIpAddress", "macAddress", "interfaceType")
_ATTACHMENT_STRUCTURE = _Structure("attachment")
_ATTACHMENT = _Leaves(
    "status", "instanceId", "networkCardIndex", "deviceIndex", "attachmentId", "deleteOnTermination"
)
_PRIMARY_TRUE = b"<primary>true</primary>"
_ADDRESSES = re.compile(rb"<privateIpAddress>([^<]*)</privateIpAddress>")
_OCTET = rb"(?:0|[1-9][0-9]{0,2})"
_QUAD = rb"\.".join([_OCTET] * 4)
_QUADS = re.compile(_QUAD + rb"(?:," + _QUAD + rb")*")
"""Dotted quads without leading zeros, comma-separated: packed, they sort as ``address_key`` sorts
them (an octet above 255 fails to pack, as ``Addresses.of`` fails on it)."""


def _interface_page(body: bytes, listing: Listing) -> tuple[list[Any], str | None, str | None]:
    lo, hi, token, request_id = _page(body, b"DescribeNetworkInterfacesResponse", b"networkInterfaceSet")
    interfaces: list[Any] = []
    _read(body, lo, hi, listing, _interface, b"<networkInterfaceId>", interfaces)
    return interfaces, token, request_id


def _read(
    body: bytes,
    lo: int,
    hi: int,
    listing: Listing,
    parse: Callable[[bytes, int, int, Lists], Parsed],
    id_element: bytes,
    out: list[Any],
) -> None:
    """Every item of the list ``body[lo:hi]`` parsed into ``out``, or reused from the listing's
    cache when its bytes are those of an item parsed before (and name the same id)."""
    cache = listing.cache
    if cache is None:
        out.extend(parse(body, start, end, lists) for start, end, lists in _items(body, lo, hi))
        return
    found = listing._found
    for start, end, lists in _items(body, lo, hi):
        key = hash(body[start:end])
        item = cache.get(key)
        if item is None or body.find(id_element + item.id.encode() + b"</", start, end) < 0:
            item = parse(body, start, end, lists)
        found[key & _MASK][key] = item
        out.append(item)


def _interface(body: bytes, start: int, end: int, lists: Lists) -> Interface:
    """One ``networkInterfaceSet`` item as :func:`~providers.aws.api.parse_interface` reads it."""
    spans = list(lists.values())
    plain = _plain(body, start, end)
    top = _INTERFACE.read(body, start, end, spans, plain)
    iid = top.get(b"networkInterfaceId")
    if iid is None:
        raise _fail("an interface without networkInterfaceId", start)
    primary = top.get(b"privateIpAddress", "")

    device_index, instance_id, attachment_id, delete_on_termination = DETACHED_INDEX, "", "", False
    card = 0
    span = _ATTACHMENT_STRUCTURE.span(body, start, end, spans)
    if span is not None:
        attachment = _ATTACHMENT.read(body, span[0], span[1], [], plain)
        instance = attachment.get(b"instanceId")
        if attachment.get(b"status") in ATTACHED and instance:
            card = int(attachment.get(b"networkCardIndex") or 0)
            if 0 <= card <= MAX_NETWORK_CARD:  # a slot it cannot name is no slot
                index = attachment.get(b"deviceIndex")
                device_index = DETACHED_INDEX if index is None else int(index)
                instance_id = sys.intern(instance)
                attachment_id = attachment.get(b"attachmentId", "")
                delete_on_termination = attachment.get(b"deleteOnTermination") == "true"

    return Interface(
        id=iid,
        device_index=device_index,
        subnet_id=_one(top.get(b"subnetId", "")),
        primary_ip=primary,
        addresses=_secondaries(body, lists.get(b"privateIpAddressesSet"), primary, plain),
        prefixes=_prefixes(body, lists.get(b"ipv4PrefixSet")),
        ipv6_prefixes=_ipv6_prefixes(body, lists.get(b"ipv6PrefixSet")),
        security_groups=_groups(body, lists.get(b"groupSet")),
        tags=_tags(body, lists.get(b"tagSet"), plain),
        instance_id=instance_id,
        attachment_id=attachment_id,
        delete_on_termination=delete_on_termination,
        link=reported(
            top.get(b"macAddress"), card, interface_id=iid, interface_type=top.get(b"interfaceType")
        ),
    )


def _secondaries(body: bytes, span: Span | None, primary: str, plain: bool) -> Addresses:
    """The secondary addresses of a ``privateIpAddressesSet``, packed in address order: neither the
    interface's primary nor an item marked ``primary``, each once (``parse_interface``'s rule)."""
    if span is None:
        return EMPTY_ADDRESSES
    lo, hi = span
    # EC2's layout, read with a few C calls over the list: plain text, at most one item marked
    # primary, addresses in canonical dotted quads. Anything else is read item by item below.
    if plain:
        addresses = _ADDRESSES.findall(body, lo, hi)
        at = body.find(_PRIMARY_TRUE, lo, hi)
        if at < 0 or body.find(_PRIMARY_TRUE, at + 1, hi) < 0:
            keep = set(addresses)
            keep.discard(primary.encode())
            keep.discard(b"")
            first = body.rfind(b"<item>", lo, at) if at >= 0 else -1
            if first >= 0:  # the item marked primary: its address goes, unless another item lists it too
                item = _ADDRESSES.search(body, first, body.find(b"</item>", at, hi))
                if item is not None and addresses.count(item.group(1)) == 1:
                    keep.discard(item.group(1))
            if not keep:
                return EMPTY_ADDRESSES
            joined = b",".join(keep)
            if _QUADS.fullmatch(joined):
                return Addresses(b"".join(sorted(map(_aton, joined.decode().split(",")))))
    found: set[str] = set()
    for a, b, _ in _items(body, lo, hi):
        address = _text(body, b"privateIpAddress", a, b, [])
        if address and address != primary and _text(body, b"primary", a, b, []) != "true":
            found.add(address)
    # parse_interface's own ordering and packing (Addresses.of refuses what is not a dotted quad).
    return Addresses.of(sorted(found, key=address_key))


def _prefix_texts(body: bytes, span: Span, element: bytes) -> list[str]:
    """The ``element`` of every item of a prefix set (rare enough to be read item by item)."""
    found = []
    for a, b, _ in _items(body, *span):
        prefix = _text(body, element, a, b, [])
        if prefix is None:
            raise _fail(f"a prefix item without {element.decode()}", a)
        found.append(prefix)
    return found


def _prefixes(body: bytes, span: Span | None) -> Prefixes:
    """The ``ipv4PrefixSet``, in address order."""
    if span is None:
        return EMPTY_PREFIXES
    found = _prefix_texts(body, span, b"ipv4Prefix")
    return Prefixes.of(sorted(found, key=lambda p: address_key(p.split("/", 1)[0])))


def _ipv6_prefixes(body: bytes, span: Span | None) -> tuple[str, ...]:
    """The ``ipv6PrefixSet`` (a node's one /80, on one of its interfaces), in address order."""
    if span is None:
        return ()
    return tuple(sorted(_prefix_texts(body, span, b"ipv6Prefix"), key=ipv6_prefix_key))


# -- DescribeInstances ------------------------------------------------------------------------------

_INSTANCE = _Leaves("instanceId", "instanceType", "vpcId", "subnetId")
_INSTANCE_STATE = _Structure("instanceState")
_STATE = _Leaves("name")
_PLACEMENT = _Structure("placement")
_ZONE = _Leaves("availabilityZone")


def _instance_page(body: bytes, listing: Listing) -> tuple[list[Any], str | None, str | None]:
    lo, hi, token, request_id = _page(body, b"DescribeInstancesResponse", b"reservationSet")
    instances: list[Any] = []
    for _, _, reservation in _items(body, lo, hi):
        members = reservation.get(b"instancesSet")
        if members is not None:
            _read(body, members[0], members[1], listing, _instance, b"<instanceId>", instances)
    return instances, token, request_id


def _instance(body: bytes, start: int, end: int, lists: Lists) -> InstanceInfo:
    """One ``instancesSet`` item as :func:`~providers.aws.api.parse_instance` reads it: the
    instance's own fields, never those of its ``networkInterfaceSet`` (a nested list, skipped)."""
    spans = list(lists.values())
    plain = _plain(body, start, end)
    top = _INSTANCE.read(body, start, end, spans, plain)
    iid = top.get(b"instanceId")
    if iid is None:
        raise _fail("an instance without instanceId", start)
    state = "pending"
    span = _INSTANCE_STATE.span(body, start, end, spans)
    if span is not None:
        state = _STATE.read(body, span[0], span[1], [], plain).get(b"name", "pending")
    zone = ""
    span = _PLACEMENT.span(body, start, end, spans)
    if span is not None:
        zone = _ZONE.read(body, span[0], span[1], [], plain).get(b"availabilityZone", "")
    return InstanceInfo(
        id=sys.intern(iid),
        type=_one(top.get(b"instanceType", "")),
        state=cast(InstanceState, _one(state)),
        vpc_id=_one(top.get(b"vpcId", "")),
        subnet_id=_one(top.get(b"subnetId", "")),
        zone=_one(zone),
        security_groups=_groups(body, lists.get(b"groupSet")),
    )


_PAGES: dict[str, Callable[[bytes, Listing], tuple[list[Any], str | None, str | None]]] = {
    "DescribeNetworkInterfacesResult": _interface_page,
    "DescribeInstancesResult": _instance_page,
}
