"""FakeKube watches through the real lightkube client: replay, 410, selectors, bookmarks, timeouts, drops."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterable, Callable
from typing import Any

import httpx2
import pytest
from lightkube import AsyncClient, KubeConfig
from lightkube.core.exceptions import ApiError
from lightkube.models.core_v1 import Container, PodSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Node, Pod
from lightkube.types import on_error_retry

from eni_ipam_testkit.fake_kube import FakeKube, Fault
from tests.waiting import until

Seen = tuple[str, str | None, str | None]
Versions = Callable[[int], str]


async def take(stream: AsyncIterable[tuple[str, Any]], count: int, within: float = 5) -> list[Seen]:
    """The first ``count`` events as ``(type, name, resourceVersion)``, closing the stream after."""
    events: list[Seen] = []
    async with asyncio.timeout(within), contextlib.aclosing(stream) as events_in:  # type: ignore[type-var]
        async for kind, obj in events_in:
            events.append((kind, obj.metadata.name, obj.metadata.resourceVersion))
            if len(events) == count:
                break
    return events


def node(name: str, **labels: str) -> Node:
    return Node(metadata=ObjectMeta(name=name, labels=labels))


async def test_watch_from_a_version_replays_later_events_in_order(
    kube: FakeKube, client: AsyncClient, rv: Versions
) -> None:
    await client.create(node("n1"))
    since = kube.resource_version
    await client.create(
        Pod(metadata=ObjectMeta(name="p1"), spec=PodSpec(containers=[Container(name="c", image="busybox:1")]))
    )  # another resource
    await client.patch(Node, "n1", {"metadata": {"labels": {"a": "b"}}})
    await client.create(node("n2"))
    await client.delete(Node, "n1")
    events = await take(client.watch(Node, resource_version=since), 3)
    assert events == [("MODIFIED", "n1", rv(3)), ("ADDED", "n2", rv(4)), ("DELETED", "n1", rv(5))]


async def test_watch_without_a_version_starts_with_current_objects_then_follows(
    kube: FakeKube, client: AsyncClient, rv: Versions
) -> None:
    await client.create(node("n1"))
    await client.create(node("n2"))
    stream = client.watch(Node)

    async def change_once_watching() -> None:
        await until(lambda: kube.open_watches == 1, limit=5)
        await client.create(node("n3"))

    writer = asyncio.create_task(change_once_watching())
    events = await take(stream, 3)
    await writer
    assert events == [("ADDED", "n1", rv(1)), ("ADDED", "n2", rv(2)), ("ADDED", "n3", rv(3))]


async def test_watch_from_compacted_version_gets_410(
    kube: FakeKube, client: AsyncClient, rv: Versions
) -> None:
    await client.create(node("n1"))
    await client.create(node("n2"))
    kube.compact()
    with pytest.raises(ApiError) as caught:
        await take(client.watch(Node, resource_version=rv(1)), 1)
    assert caught.value.status.code == 410
    assert caught.value.status.reason == "Expired"
    # The current version is still watchable after a compaction.
    await client.create(node("n3"))
    assert await take(client.watch(Node, resource_version=rv(2)), 1) == [("ADDED", "n3", rv(3))]


async def test_watch_older_than_the_bounded_history_gets_410() -> None:
    async with FakeKube(history=3) as kube:
        client = AsyncClient(KubeConfig.from_dict(kube.kubeconfig()))
        try:
            base = int(kube.resource_version)  # the system namespaces took the first versions
            for i in range(6):
                await client.create(node(f"n{i}"))
            assert await take(client.watch(Node, resource_version=str(base + 3)), 1) == [
                ("ADDED", "n3", str(base + 4))
            ]
            with pytest.raises(ApiError) as caught:
                await take(client.watch(Node, resource_version=str(base + 2)), 1)
            assert caught.value.status.code == 410
        finally:
            await client.close()


async def test_objects_leaving_and_entering_a_selector_arrive_as_deleted_and_added(
    kube: FakeKube, client: AsyncClient, rv: Versions
) -> None:
    await client.create(node("n1", pool="on"))
    await client.create(node("n2"))
    since = kube.resource_version
    await client.patch(Node, "n1", {"metadata": {"labels": {"pool": None}}})  # leaves
    await client.patch(Node, "n2", {"metadata": {"labels": {"pool": "on"}}})  # enters
    await client.patch(Node, "n2", {"metadata": {"labels": {"x": "y"}}})  # stays
    await client.patch(Node, "n1", {"metadata": {"labels": {"x": "y"}}})  # stays out: nothing
    await client.delete(Node, "n2")
    events = await take(client.watch(Node, labels={"pool": "on"}, resource_version=since), 4)
    assert events == [
        ("DELETED", "n1", rv(3)),
        ("ADDED", "n2", rv(4)),
        ("MODIFIED", "n2", rv(5)),
        ("DELETED", "n2", rv(7)),
    ]


async def test_pod_field_selector_transitions_follow_binding_to_a_node(
    kube: FakeKube, client: AsyncClient, rv: Versions
) -> None:
    await client.create(
        Pod(metadata=ObjectMeta(name="p1"), spec=PodSpec(containers=[Container(name="c", image="busybox:1")]))
    )
    since = kube.resource_version
    await client.patch(Pod, "p1", {"spec": {"nodeName": "n1"}})
    await client.patch(Pod, "p1", {"spec": {"nodeName": "n2"}})
    events = await take(client.watch(Pod, fields={"spec.nodeName": "n1"}, resource_version=since), 2)
    assert events == [("ADDED", "p1", rv(2)), ("DELETED", "p1", rv(3))]


async def test_watch_in_a_namespace_sees_only_that_namespace(kube: FakeKube, client: AsyncClient) -> None:
    for namespace in ("a", "b"):
        kube.add_object("namespaces", {"metadata": {"name": namespace}})
    for name, namespace in (("a1", "a"), ("b1", "b"), ("a2", "a")):
        await client.create(
            Pod(
                metadata=ObjectMeta(name=name, namespace=namespace),
                spec=PodSpec(containers=[Container(name="c", image="busybox:1")]),
            )
        )
    assert [e[1] for e in await take(client.watch(Pod, namespace="a", resource_version="0"), 2)] == [
        "a1",
        "a2",
    ]
    assert [e[1] for e in await take(client.watch(Pod, namespace="*", resource_version="0"), 3)] == [
        "a1",
        "a2",
        "b1",
    ]


async def test_bookmarks_carry_the_latest_version_through_lightkube(
    kube: FakeKube, client: AsyncClient, rv: Versions
) -> None:
    # lightkube's public watch() cannot ask for bookmarks; its request layer can, and decodes them.
    kube.bookmark_interval = 0.05
    await client.create(node("n1"))
    await client.create(
        Pod(metadata=ObjectMeta(name="p1"), spec=PodSpec(containers=[Container(name="c", image="busybox:1")]))
    )
    request = client._client.prepare_request(
        "list", res=Node, watch=True, params={"allowWatchBookmarks": "true", "resourceVersion": rv(1)}
    )
    stream = client._client.watch(request)
    events = await take(stream, 1)
    assert events == [("BOOKMARK", None, rv(2))]  # the pod's version: nothing for nodes is pending
    started = kube.requests[-1]
    assert (started.verb, started.params["allowWatchBookmarks"]) == ("watch", "true")


async def test_no_bookmarks_unless_the_watch_allows_them(
    kube: FakeKube, client: AsyncClient, rv: Versions
) -> None:
    kube.bookmark_interval = 0.01
    stream = client.watch(Node)
    consumer = asyncio.create_task(take(stream, 1))
    await until(lambda: kube.open_watches == 1, limit=5)
    await asyncio.sleep(0.1)
    await client.create(node("n1"))
    assert await consumer == [("ADDED", "n1", rv(1))]


@pytest.mark.looptime
async def test_long_watch_timeout_and_bookmarks_run_on_virtual_time(kube: FakeKube, rv: Versions) -> None:
    kube.bookmark_interval = 40
    loop = asyncio.get_running_loop()
    started_virtual, started_real = loop.time(), time.perf_counter()
    params = {"watch": "true", "timeoutSeconds": "300", "allowWatchBookmarks": "true"}
    headers = {"Authorization": f"Bearer {kube.admin_token}"}
    http = httpx2.AsyncClient(base_url=kube.url, headers=headers, timeout=None, verify=kube.ssl_context())
    async with http, http.stream("GET", "/api/v1/nodes", params=params) as response:
        lines = [json.loads(line) async for line in response.aiter_lines() if line]
    assert [e["type"] for e in lines] == ["BOOKMARK"] * 7  # at 40, 80, ..., 280 s; the stream ends at 300 s
    assert lines[0]["object"] == {"apiVersion": "v1", "kind": "Node", "metadata": {"resourceVersion": rv(0)}}
    assert loop.time() - started_virtual == pytest.approx(300, abs=1)
    assert time.perf_counter() - started_real < 0.5
    assert kube.open_watches == 0


@pytest.mark.looptime
async def test_lightkube_rewatches_from_the_last_version_after_a_server_timeout(
    kube: FakeKube, client: AsyncClient, rv: Versions
) -> None:
    loop = asyncio.get_running_loop()
    start = loop.time()
    await client.create(node("n1"))
    stream = client.watch(Node, server_timeout=300)
    consumer = asyncio.create_task(take(stream, 2, within=600))
    await until(lambda: kube.open_watches == 1, limit=5)
    await asyncio.sleep(450)  # one timeout has passed: lightkube reconnected on its own
    await client.create(node("n2"))
    assert await consumer == [("ADDED", "n1", rv(1)), ("ADDED", "n2", rv(2))]
    watches = [r for r in kube.requests if r.verb == "watch"]
    assert [w.params.get("resourceVersion") for w in watches] == [None, rv(1)]
    assert watches[0].params["timeoutSeconds"] == "300"
    assert 450 <= loop.time() - start < 460


async def test_dropped_watch_surfaces_as_a_remote_protocol_error(kube: FakeKube, client: AsyncClient) -> None:
    await client.create(node("n1"))
    consumer = asyncio.create_task(take(client.watch(Node), 2))
    await until(lambda: kube.open_watches == 1, limit=5)
    await kube.drop_watches()
    assert kube.open_watches == 0
    with pytest.raises(httpx2.RemoteProtocolError, match="incomplete chunked read"):
        await consumer


async def test_retrying_after_a_dropped_watch_resumes_without_losing_events(
    kube: FakeKube, client: AsyncClient, rv: Versions
) -> None:
    await client.create(node("n1"))
    consumer = asyncio.create_task(take(client.watch(Node, on_error=on_error_retry), 3))
    await until(lambda: kube.open_watches == 1, limit=5)
    await kube.drop_watches()
    await client.create(node("n2"))  # while no watch is open
    await until(lambda: kube.open_watches == 1, limit=5)
    await client.create(node("n3"))
    assert await consumer == [("ADDED", "n1", rv(1)), ("ADDED", "n2", rv(2)), ("ADDED", "n3", rv(3))]
    assert [r.params.get("resourceVersion") for r in kube.requests if r.verb == "watch"] == [None, rv(1)]


async def test_watch_fault_is_a_plain_http_error_response(kube: FakeKube, client: AsyncClient) -> None:
    kube.faults.append(Fault(verb="watch", plural="nodes", status=429, retry_after=3))
    with pytest.raises(httpx2.HTTPStatusError) as caught:
        await take(client.watch(Node), 1)
    assert not isinstance(caught.value, ApiError)  # lightkube does not decode non-200 watch responses
    assert caught.value.response.status_code == 429
    assert caught.value.response.headers["Retry-After"] == "3"
    assert kube.faults == []
    assert kube.requests[-1].status == 429


async def test_client_closing_a_watch_ends_it_on_the_server(
    kube: FakeKube, client: AsyncClient, rv: Versions
) -> None:
    await client.create(node("n1"))
    assert await take(client.watch(Node), 1) == [("ADDED", "n1", rv(1))]  # take() closes the stream
    await until(lambda: kube.open_watches == 0, limit=5)
    await client.create(node("n2"))  # no stream is left to write to
    assert kube.open_watches == 0
