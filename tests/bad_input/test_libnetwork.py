"""libnetwork remote IPAM requests: every bad body is refused with ``{"Err": ...}`` naming what is wrong, a
non-200 status and the plugin content type, and neither the allocations nor the pool registry (in memory
and on disk) change.

Each case runs against a fresh node (tests/agent/libnetwork's ``Node``: the real Allocator and
driver, the registry in a state file, served on a unix socket) holding one pool of the default subnet
(``$POOL``) with one address handed out (``$USED``).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eni_ipam.agent.libnetwork.protocol import GATEWAY, REQUEST_ADDRESS_TYPE, SERIAL
from tests.agent.libnetwork import DEFAULT_V4, DEFAULT_V6, Node
from tests.bad_input import corpus
from tests.bad_input.mutations import mutated, truncated

pytestmark = pytest.mark.timeout(30)

USED = "10.0.0.10"


class Prepared:
    """A node with one pool and one address, and a snapshot of everything a refusal must not change."""

    def __init__(self, node: Node, pool_id: str) -> None:
        self.node = node
        self.pool_id = pool_id
        self.before = self.state()

    def state(self) -> tuple[Any, ...]:
        registry = self.node.registry.read_bytes() if self.node.registry.exists() else b""
        return self.node.owners(), self.node.driver.pools(), registry

    def fill(self, text: str) -> str:
        return text.replace("$POOL", self.pool_id).replace("$USED", USED)

    def body(self, doc: Any) -> bytes:
        return self.fill(json.dumps(doc)).encode()


@contextlib.asynccontextmanager
async def prepared_node() -> AsyncIterator[Prepared]:
    # A short directory: a unix socket's path is limited to 107 bytes.
    directory = Path(tempfile.mkdtemp(prefix="eni-bad-", dir="/tmp"))
    node = Node(directory, DEFAULT_V4 + DEFAULT_V6)
    await node.start()
    try:
        pool_id = (await node.pool())["PoolID"]
        assert await node.address(pool_id, USED) == f"{USED}/24"
        yield Prepared(node, pool_id)
    finally:
        await node.stop()
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
async def prepared() -> AsyncIterator[Prepared]:
    async with prepared_node() as ready:
        yield ready


def _refused(status: int, reply: Any) -> str:
    assert status != 200, reply
    assert isinstance(reply, dict) and set(reply) == {"Err"}, reply
    err = reply["Err"]
    assert isinstance(err, str) and err.strip(), reply
    return err


@pytest.mark.parametrize("case", corpus.params("libnetwork"))
async def test_a_bad_libnetwork_request_is_refused_with_err_naming_it_and_changes_nothing(
    case: corpus.Case, prepared: Prepared
) -> None:
    if case.has("bytes"):
        raw = bytes(case.data["bytes"])
    elif case.has("text"):
        raw = prepared.fill(case.text("text")).encode()
    else:
        raw = prepared.body(case.data["body"])

    status, reply = await prepared.node.call(str(case.data["method"]), raw=raw)

    err = _refused(status, reply)
    assert status == case.expect["status"], reply
    corpus.contains_all(err, case.expect.get("err_contains"))
    assert prepared.state() == prepared.before


async def test_the_unchanged_state_check_would_see_a_request_that_got_through(prepared: Prepared) -> None:
    body = prepared.body({"PoolID": "$POOL", "Address": "10.0.0.12"})
    status, reply = await prepared.node.call("IpamDriver.RequestAddress", raw=body)
    assert (status, reply) == (200, {"Address": "10.0.0.12/24", "Data": {}})
    assert prepared.state() != prepared.before


# -- fuzzing --------------------------------------------------------------------------------------

SEEDS: list[tuple[str, dict[str, Any]]] = [
    ("IpamDriver.RequestPool", {"AddressSpace": "eni-ipam-local", "Pool": "", "SubPool": "", "V6": True}),
    (
        "IpamDriver.RequestPool",
        {
            "AddressSpace": "eni-ipam-global",
            "Pool": "10.99.0.0/24",
            "SubPool": "10.99.0.16/28",
            "Options": {SERIAL: "true"},
            "V6": False,
        },
    ),
    ("IpamDriver.RequestAddress", {"PoolID": "$POOL", "Address": "", "Options": {}}),
    ("IpamDriver.RequestAddress", {"PoolID": "$POOL", "Address": "10.0.0.12", "Options": {SERIAL: "true"}}),
    ("IpamDriver.RequestAddress", {"PoolID": "$POOL", "Options": {REQUEST_ADDRESS_TYPE: GATEWAY}}),
    ("IpamDriver.ReleaseAddress", {"PoolID": "$POOL", "Address": "$USED"}),
    ("IpamDriver.ReleasePool", {"PoolID": "$POOL"}),
    ("IpamDriver.GetCapabilities", {}),
]
"""Valid requests, each accepted by a freshly prepared node."""

FUZZ = settings(max_examples=100, deadline=None)
METHODS = st.sampled_from(sorted({method for method, _ in SEEDS}))


async def _answer_or_refusal(method: str, text: str) -> None:
    async with prepared_node() as ready:
        status, reply = await ready.node.call(method, raw=ready.fill(text).encode())
        if status == 200:
            assert isinstance(reply, dict) and "Err" not in reply, reply
        else:
            _refused(status, reply)
            assert ready.state() == ready.before


async def test_every_fuzzing_seed_is_accepted_by_a_prepared_node() -> None:
    for method, body in SEEDS:
        async with prepared_node() as ready:
            status, reply = await ready.node.call(method, raw=ready.body(body))
            assert status == 200 and "Err" not in reply, (method, reply)


@FUZZ
@given(request=st.sampled_from(SEEDS).flatmap(lambda seed: st.tuples(st.just(seed[0]), mutated([seed[1]]))))
async def test_a_mutated_request_is_answered_or_refused_with_err_and_changes_nothing(
    request: tuple[str, Any],
) -> None:
    method, doc = request
    await _answer_or_refusal(method, json.dumps(doc))


@FUZZ
@given(method=METHODS, text=truncated([json.dumps(body) for _, body in SEEDS]))
async def test_a_truncated_request_is_answered_or_refused_with_err_and_changes_nothing(
    method: str, text: str
) -> None:
    await _answer_or_refusal(method, text)
