"""ENIPool objects: the CRD's schema, enforced by the fake API server, refuses a bad create or patch with a
422 naming the field and leaves the stored pool as it was; and the pure conversion to the core model
(``resource_from_pool``) refuses an object that bypassed the schema with a ``ConfigError`` naming the field.
"""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import yaml

from eni_ipam.core.spec import NodeResource
from eni_ipam.errors import ConfigError
from eni_ipam.kube.resources import resource_from_pool
from eni_ipam_testkit.fake_kube import FakeKube
from tests.bad_input import corpus
from tests.conftest import CRD

pytestmark = pytest.mark.timeout(30)

ENIPOOLS = "/apis/eni-ipam.io/v1alpha1/enipools"
MERGE_PATCH = "application/merge-patch+json"
API_VERSION, KIND = "eni-ipam.io/v1alpha1", "ENIPool"

BASE = {
    "metadata": {"name": "p1"},
    "spec": {"instanceID": "i-1", "minAllocate": 2, "subnetIDs": ["subnet-1"]},
}
"""The valid pool a patch case starts from."""
BASE_STATUS = {
    "pool": {"10.0.0.5": {"interface": "eni-1", "subnet": "subnet-1"}},
    "subnets": {"subnet-1": {"cidr": "10.0.0.0/24"}},
    "used": ["10.0.0.5"],
    "release": {},
}
"""The valid status a status-patch case starts from."""

API_KEYS = frozenset({"code", "field", "message_contains", "pruned", "xfail"})
CONVERT_KEYS = frozenset({"field", "message_contains", "accepted", "xfail"})


def _write(case: corpus.Case) -> str:
    write = str(case.data.get("write", "create"))
    assert write in ("create", "patch", "status"), f"{case.path}: write is create, patch or status"
    return write


def _part(case: corpus.Case, part: str) -> dict[str, Any]:
    expect = dict(case.expect.get(part) or {})
    known = API_KEYS if part == "api" else CONVERT_KEYS
    assert set(expect) <= known, f"{case.path}: expect.{part} keys are {sorted(known)}"
    return expect


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (what the API server applies for ``application/merge-patch+json``)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def converted_object(case: corpus.Case) -> dict[str, Any]:
    """The ENIPool as the controller would read it had the write bypassed the schema."""
    write = _write(case)
    if write == "create":
        obj: dict[str, Any] = {"metadata": {"name": "p1"}, **copy.deepcopy(case.data["input"])}
        return obj
    base = {**copy.deepcopy(BASE), "status": copy.deepcopy(BASE_STATUS)}
    result: dict[str, Any] = merge_patch(base, case.data["input"])
    return result


class PoolApi:
    """Raw HTTP to the fake API server's ENIPool endpoints (bodies exactly as the case gives them)."""

    def __init__(self, kube: FakeKube, session: aiohttp.ClientSession) -> None:
        self.kube = kube
        self.session = session

    async def send(self, method: str, path: str, body: bytes, content_type: str) -> tuple[int, Any]:
        async with self.session.request(
            method, self.kube.url + path, data=body, headers={"Content-Type": content_type}
        ) as response:
            text = await response.text()
            try:
                return response.status, json.loads(text)
            except ValueError:
                return response.status, text

    async def create(self, obj: dict[str, Any]) -> None:
        status, body = await self.send("POST", ENIPOOLS, json.dumps(obj).encode(), "application/json")
        assert status == 201, body

    async def write(self, case: corpus.Case) -> tuple[int, Any]:
        write = _write(case)
        if case.has("text"):
            body = case.text("text").encode()
        elif write == "create":
            obj = {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": "p1"}}
            body = json.dumps({**obj, **case.data["input"]}).encode()
        else:
            body = json.dumps(case.data["input"]).encode()
        if write == "create":
            return await self.send("POST", ENIPOOLS, body, "application/json")
        suffix = "/status" if write == "status" else ""
        return await self.send("PATCH", f"{ENIPOOLS}/p1{suffix}", body, MERGE_PATCH)


@pytest.fixture
async def pools() -> AsyncIterator[PoolApi]:
    async with FakeKube() as kube:
        await kube.apply_manifest(yaml.safe_load(CRD.read_text()))
        token = kube.kubeconfig()["users"][0]["user"]["token"]
        connector = aiohttp.TCPConnector(ssl=kube.ssl_context())
        async with aiohttp.ClientSession(
            headers={"Authorization": f"Bearer {token}"}, connector=connector
        ) as session:
            yield PoolApi(kube, session)


def _lookup(obj: Any, dotted: str) -> Any:
    for key in dotted.split("."):
        if not isinstance(obj, dict) or key not in obj:
            return None
        obj = obj[key]
    return obj


@pytest.mark.parametrize(
    "case",
    corpus.params(
        "enipool", lambda case: "api" in case.expect, xfail=lambda case: _part(case, "api").get("xfail", "")
    ),
)
async def test_a_bad_enipool_write_is_refused_naming_the_field_and_the_stored_pool_is_unchanged(
    case: corpus.Case, pools: PoolApi
) -> None:
    expect = _part(case, "api")
    if _write(case) != "create":
        await pools.create({"apiVersion": API_VERSION, "kind": KIND, **BASE})
        status, body = await pools.send(
            "PATCH", f"{ENIPOOLS}/p1/status", json.dumps({"status": BASE_STATUS}).encode(), MERGE_PATCH
        )
        assert status == 200, body
    stored, version = pools.kube.objects("enipools"), pools.kube.resource_version

    status, body = await pools.write(case)

    assert status == expect["code"], body
    if status >= 400:
        assert isinstance(body, dict) and body["kind"] == "Status" and body["code"] == status, body
        if "field" in expect:
            fields = [cause["field"] for cause in body["details"]["causes"]]
            assert str(expect["field"]) in fields, body["message"]
        corpus.contains_all(body["message"], expect.get("message_contains"))
        assert pools.kube.objects("enipools") == stored
        assert pools.kube.resource_version == version
    else:
        saved = pools.kube.get_object("enipools", "p1")
        assert saved is not None
        for dotted in corpus.as_list(expect.get("pruned")):
            assert _lookup(saved, dotted) is None, f"{dotted} was kept: {saved}"


@pytest.mark.parametrize(
    "case",
    corpus.params(
        "enipool",
        lambda case: "convert" in case.expect,
        xfail=lambda case: _part(case, "convert").get("xfail", ""),
    ),
)
def test_an_enipool_that_bypassed_the_schema_is_refused_by_the_conversion_naming_the_field(
    case: corpus.Case,
) -> None:
    expect = _part(case, "convert")
    obj = converted_object(case)
    before = repr(obj)
    if expect.get("accepted"):
        assert isinstance(resource_from_pool(obj), NodeResource)
    else:
        with pytest.raises(ConfigError) as caught:
            resource_from_pool(obj)
        corpus.check_named(
            caught.value.field, str(caught.value), expect, key="field", contains="message_contains"
        )
    assert repr(obj) == before


def test_the_patch_cases_start_from_a_pool_the_conversion_accepts() -> None:
    resource = resource_from_pool({**BASE, "status": BASE_STATUS})
    assert resource.instance_id == "i-1" and resource.used == 1
