"""The ``eni-ipam-cni`` plugin's stdin and environment: every bad input prints the CNI spec's error object
(``cniVersion``, ``code``, ``msg``, ``details``) on stdout with the documented code, exits non-zero, logs
one line on stderr, and leaves the agent's allocations as they were.

The plugin runs in-process (:func:`eni_ipam.agent.cni.run` in a worker thread, as it is synchronous)
against the agent API served on a unix socket by the test's event loop over a real Allocator.
"""

from __future__ import annotations

import asyncio
import dataclasses
import io
import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eni_ipam.agent import api, cni
from eni_ipam.agent.allocator import Allocator
from tests.agent import unix_server
from tests.agent.test_cni import make_allocator
from tests.bad_input import corpus
from tests.bad_input.mutations import SPECIAL_STRINGS, mutated, truncated

pytestmark = pytest.mark.timeout(30)

SOCKET = "$SOCKET"
"""Stands for the agent's socket path in corpus files and seeds."""

ENVIRONMENT = {
    "CNI_COMMAND": "ADD",
    "CNI_CONTAINERID": "c3",
    "CNI_IFNAME": "eth0",
    "CNI_NETNS": "/var/run/netns/c3",
    "CNI_PATH": "/opt/cni/bin",
}
"""A valid ADD for container c3, which holds nothing yet: a bad input that got through would allocate."""

HELD = {"10.99.0.10": "cni:c1:eth0", "10.99.0.11": "cni:c2:eth0"}
"""What the agent holds before every call."""

CONF: dict[str, Any] = {
    "cniVersion": "1.0.0",
    "name": "podnet",
    "type": "ptp",
    "ipam": {"type": "eni-ipam-cni", "socket": SOCKET},
}
ERROR_CODES = frozenset({1, 2, 3, 4, 5, 6, 7, 11, 100, 101, 102, 103, 104, 105, 106})
"""Every code the plugin documents (docs/node.md)."""

FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@dataclasses.dataclass(frozen=True)
class Outcome:
    rc: int
    stdout: str
    stderr: str

    def error(self, *, one_log_line: bool = True) -> dict[str, Any]:
        """The error object printed on stdout, checked against the spec's shape; stderr carries the
        log line (exactly one line with ``one_log_line``)."""
        assert self.rc == 1, (self.rc, self.stdout)
        assert self.stdout.endswith("\n") and self.stdout.count("\n") == 1, self.stdout
        error = json.loads(self.stdout)
        assert isinstance(error, dict) and set(error) <= {"cniVersion", "code", "msg", "details"}, error
        assert error["code"] in ERROR_CODES, error
        assert isinstance(error["msg"], str) and error["msg"], error
        assert isinstance(error.get("details", ""), str), error
        assert error["cniVersion"] in cni.SUPPORTED_VERSIONS, error
        assert f"error {error['code']}: " in self.stderr, self.stderr
        if one_log_line:
            assert len(self.stderr.splitlines()) == 1, self.stderr
        return error


class Agent:
    """The agent API over an Allocator holding :data:`HELD`, and the plugin run in-process against it."""

    def __init__(self, allocator: Allocator, socket: str) -> None:
        self.allocator = allocator
        self.socket = socket
        self.reset()

    def reset(self) -> None:
        for allocation in self.allocator.allocations():
            self.allocator.release(allocation.address, allocation.pool)
        for address, owner in HELD.items():
            self.allocator.allocate(address, owner)

    def state(self) -> tuple[Any, ...]:
        held = [(a.address, a.owner, a.pool, str(a.family)) for a in self.allocator.allocations()]
        return tuple(held), self.allocator.dump()

    def stdin(self, doc: Any) -> bytes:
        return json.dumps(_replace(doc, SOCKET, self.socket)).encode()

    async def run(self, environ: Mapping[str, str], stdin: bytes) -> Outcome:
        out, err = io.StringIO(), io.StringIO()
        reader = io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8")
        rc = await asyncio.to_thread(cni.run, dict(environ), reader, out, err)
        return Outcome(rc, out.getvalue(), err.getvalue())


def _replace(doc: Any, old: str, new: str) -> Any:
    if doc == old:
        return new
    if isinstance(doc, dict):
        return {k: _replace(v, old, new) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_replace(v, old, new) for v in doc]
    return doc


def _spoken(stdin: bytes) -> str:
    """The version an error must speak: the configuration's when supported, else the newest."""
    try:
        stated = json.loads(stdin.decode("utf-8")).get("cniVersion")
    except (ValueError, AttributeError, RecursionError):
        stated = None
    return stated if stated in ("0.4.0", "1.0.0", "1.1.0") else "1.1.0"


@pytest.fixture
async def agent() -> AsyncIterator[Agent]:
    allocator = make_allocator()
    app = web.Application()
    api.add_routes(app, allocator)
    async with unix_server(app, prefix="eni-bad-") as socket:
        yield Agent(allocator, socket)


def _environ(overrides: Mapping[str, Any]) -> dict[str, str]:
    environ = dict(ENVIRONMENT)
    for name, value in overrides.items():
        if value is None:
            environ.pop(name, None)
        else:
            environ[name] = corpus.expand(value)
    return environ


@pytest.mark.parametrize("case", corpus.params("cni"))
async def test_bad_stdin_or_environment_is_the_spec_error_with_its_code_and_changes_nothing(
    case: corpus.Case, agent: Agent
) -> None:
    if case.has("stdin_bytes"):
        stdin = bytes(case.data["stdin_bytes"])
    elif case.has("stdin_text"):
        stdin = case.text("stdin_text").replace(SOCKET, agent.socket).encode()
    else:
        stdin = agent.stdin(case.data.get("stdin", CONF))
    before = agent.state()

    outcome = await agent.run(_environ(case.data.get("env") or {}), stdin)

    error = outcome.error()
    assert error["code"] == case.expect["code"], error
    assert error["cniVersion"] == str(case.expect.get("version", _spoken(stdin)))
    corpus.contains_all(error["msg"] + " " + error.get("details", ""), case.expect.get("msg_contains"))
    assert agent.state() == before


async def test_the_unchanged_agent_check_would_see_an_add_that_got_through(agent: Agent) -> None:
    before = agent.state()
    outcome = await agent.run(ENVIRONMENT, agent.stdin(CONF))
    assert outcome.rc == 0 and json.loads(outcome.stdout)["ips"][0]["address"] == "10.99.0.12/24"
    assert agent.state() != before


@pytest.mark.parametrize(
    ("body", "field"),
    [
        pytest.param(b'{"containerID": "c3", ', "", id="truncated"),
        pytest.param(b'["c3", "eth0"]', "", id="list"),
        pytest.param(b'{"containerID": "c3", "ifname": "eth0", "pool": 5}', "pool", id="pool-number"),
        pytest.param(b'{"containerID": "c3", "ifname": "eth0", "family": "ipv5"}', "family", id="family"),
        pytest.param(b'{"containerID": "c3\\n", "ifname": "eth0"}', "containerID", id="container-newline"),
        pytest.param(b'{"containerID": "c3", "ifname": "eth0", "netns": 7}', "netns", id="netns-number"),
        pytest.param(
            b'{"containerID": "c3", "ifname": "eth0", "pool": ' + b"[" * 100_000,
            "",
            id="deep-nesting",
        ),
    ],
)
async def test_the_agent_api_refuses_a_bad_add_body_with_400_naming_the_field_and_changes_nothing(
    agent: Agent, body: bytes, field: str
) -> None:
    before = agent.state()
    connector = aiohttp.UnixConnector(path=agent.socket)
    async with (
        aiohttp.ClientSession(connector=connector) as session,
        session.post("http://agent/v1/cni/add", data=body) as response,
    ):
        assert response.content_type == "application/json", await response.text()
        status, reply = response.status, await response.json()
    assert status == 400, reply
    assert reply["error"]["code"] == "bad_request" and reply["error"]["field"] == field, reply
    assert reply["error"]["msg"]
    assert agent.state() == before


# -- fuzzing --------------------------------------------------------------------------------------

SEEDS: list[dict[str, Any]] = [
    CONF,
    {
        "cniVersion": "0.4.0",
        "name": "podnet",
        "type": "bridge",
        "ipam": {
            "type": "eni-ipam-cni",
            "socket": SOCKET,
            "pool": "default",
            "family": "ipv4",
            "defaultRoute": False,
            "routes": [{"dst": "10.0.0.0/8"}, {"dst": "192.168.0.0/16", "gw": "10.99.0.2"}],
        },
    },
    {
        **CONF,
        "prevResult": {
            "cniVersion": "1.0.0",
            "ips": [{"address": "10.99.0.10/24", "gateway": "10.99.0.1"}],
            "routes": [{"dst": "0.0.0.0/0", "gw": "10.99.0.1"}],
        },
    },
]
"""Valid configurations for container c1, which already holds 10.99.0.10: an ADD or CHECK that gets
through answers from what c1 holds and changes nothing."""

SEED_ENVIRONMENT = {**ENVIRONMENT, "CNI_CONTAINERID": "c1", "CNI_NETNS": "/var/run/netns/c1"}
ENV_NAMES = st.sampled_from(("CNI_COMMAND", "CNI_CONTAINERID", "CNI_IFNAME", "CNI_NETNS", "CNI_PATH"))
ENV_VALUES = st.one_of(
    st.none(),
    st.sampled_from(("ADD", "DEL", "CHECK", "VERSION", "add", "c1", "eth0", "c1:eth0", "-c", "a" * 300)),
    st.sampled_from(SPECIAL_STRINGS).filter(lambda s: "\x00" not in s),
    st.text(max_size=10).filter(lambda s: "\x00" not in s),
)


@pytest.mark.parametrize("command", ["ADD", "CHECK"])
async def test_every_fuzzing_seed_succeeds_without_changing_anything(agent: Agent, command: str) -> None:
    before = agent.state()
    for seed in SEEDS:
        if command == "CHECK" and "prevResult" not in seed:
            continue
        outcome = await agent.run({**SEED_ENVIRONMENT, "CNI_COMMAND": command}, agent.stdin(seed))
        assert (outcome.rc, outcome.stderr) == (0, ""), outcome.stdout
    assert agent.state() == before


def _check_outcome(outcome: Outcome, environ: Mapping[str, str]) -> None:
    if outcome.rc != 0:
        outcome.error(one_log_line=False)  # raw values in the log line are corpus cases
        return
    assert outcome.stderr == ""
    if environ.get("CNI_COMMAND") in ("ADD", "VERSION"):
        result = json.loads(outcome.stdout)
        assert result["cniVersion"] in cni.SUPPORTED_VERSIONS
    else:
        assert outcome.stdout == ""


async def _fuzz_once(agent: Agent, environ: dict[str, str], stdin: bytes) -> None:
    before = agent.state()
    outcome = await agent.run(environ, stdin)
    _check_outcome(outcome, environ)
    if outcome.rc != 0:
        assert agent.state() == before
    agent.reset()


@FUZZ
@given(
    doc=mutated(SEEDS),
    command=st.sampled_from(("ADD", "CHECK")),
    overrides=st.dictionaries(ENV_NAMES, ENV_VALUES, max_size=2),
)
async def test_mutated_stdin_and_environment_succeed_or_print_a_spec_error_and_change_nothing(
    agent: Agent, doc: Any, command: str, overrides: dict[str, str | None]
) -> None:
    environ = {**SEED_ENVIRONMENT, "CNI_COMMAND": command}
    for name, value in overrides.items():
        if value is None:
            environ.pop(name, None)
        else:
            environ[name] = value
    await _fuzz_once(agent, environ, agent.stdin(doc))


@FUZZ
@given(text=truncated([json.dumps(seed) for seed in SEEDS]), command=st.sampled_from(("ADD", "CHECK", "DEL")))
async def test_truncated_stdin_succeeds_or_prints_a_spec_error_and_changes_nothing(
    agent: Agent, text: str, command: str
) -> None:
    stdin = text.replace(json.dumps(SOCKET), json.dumps(agent.socket)).encode()
    await _fuzz_once(agent, {**SEED_ENVIRONMENT, "CNI_COMMAND": command}, stdin)
