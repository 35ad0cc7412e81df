"""Rebuilding from libcni's cache: only this plugin's results, duplicates resolved by who is alive."""

from __future__ import annotations

import base64
import functools
import json
import os
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from eni_ipam.agent.allocator import Allocator
from eni_ipam.agent.runtime import (
    cni_cache_view,
    container_known,
    namespace_exists,
    parse_cni_owner,
    read_cache,
    remove_stale,
    uses_this_plugin,
)
from eni_ipam.agent.types import Attachment, PoolAddress, RuntimeEntry
from eni_ipam.core.clock import LoopClock

OURS = {
    "cniVersion": "1.0.0",
    "name": "podnet",
    "plugins": [{"type": "bridge", "bridge": "cni0", "ipam": {"type": "eni-ipam-cni"}}],
}
HOST_LOCAL = {
    "cniVersion": "1.0.0",
    "name": "other",
    "plugins": [{"type": "bridge", "ipam": {"type": "host-local", "subnet": "10.88.0.0/16"}}],
}


def write_entry(
    directory: Path,
    container: str,
    address: str,
    *,
    config: dict[str, Any] = OURS,
    ifname: str = "eth0",
    netns: str = "",
    args: list[list[str]] | None = None,
    mtime: float | None = None,
) -> Path:
    """A cache file as libcni writes it (``results/<network>-<containerID>-<ifname>``)."""
    entry: dict[str, Any] = {
        "kind": "cniCacheV1",
        "containerId": container,
        "config": base64.b64encode(json.dumps(config).encode()).decode(),
        "ifName": ifname,
        "networkName": config["name"],
        "result": {"cniVersion": "1.0.0", "ips": [{"address": f"{address}/24", "gateway": "10.99.0.1"}]},
    }
    if netns:
        entry["netns"] = netns
    if args:
        entry["cniArgs"] = args
    path = directory / f"{config['name']}-{container}-{ifname}"
    path.write_text(json.dumps(entry))
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path


def test_only_results_of_networks_using_this_plugin_are_read(tmp_path: Path) -> None:
    write_entry(tmp_path, "c1", "10.99.0.10")
    write_entry(tmp_path, "c2", "10.88.0.2", config=HOST_LOCAL)
    single = {"cniVersion": "0.4.0", "name": "solo", "type": "ptp", "ipam": {"type": "eni-ipam-cni"}}
    write_entry(tmp_path, "c3", "10.99.0.11", config=single)
    assert {a: e.owner for a, e in cni_cache_view(tmp_path).items()} == {
        "10.99.0.10": "cni:c1:eth0",
        "10.99.0.11": "cni:c3:eth0",
    }


def test_the_entry_says_the_network_namespace_and_pod(tmp_path: Path) -> None:
    args = [
        ["K8S_POD_NAMESPACE", "ns"],
        ["K8S_POD_NAME", "web"],
        ["K8S_POD_UID", "u-1"],
        ["IgnoreUnknown", "1"],
    ]
    (tmp_path / "a").touch()
    write_entry(tmp_path, "c1", "10.99.0.10", netns=str(tmp_path / "a"), args=args)
    assert cni_cache_view(tmp_path)["10.99.0.10"] == RuntimeEntry(
        owner="cni:c1:eth0",
        attachment=Attachment(network="podnet", netns=str(tmp_path / "a"), pod_uid="u-1", pod="ns/web"),
        alive=True,  # its namespace exists
    )


def test_an_address_claimed_twice_goes_to_the_owner_whose_namespace_is_alive(tmp_path: Path) -> None:
    (tmp_path / "netns").mkdir()
    (tmp_path / "netns" / "live").touch()
    cache = tmp_path / "results"
    cache.mkdir()
    # The stale entry is the newer file: liveness decides, not file order or age.
    write_entry(cache, "live", "10.99.0.10", netns=str(tmp_path / "netns" / "live"), mtime=1000)
    write_entry(cache, "stale", "10.99.0.10", netns=str(tmp_path / "netns" / "gone"), mtime=2000)
    assert cni_cache_view(cache)["10.99.0.10"].owner == "cni:live:eth0"


def test_an_entry_whose_owner_is_proven_gone_is_not_rebuilt_and_its_file_is_removed(tmp_path: Path) -> None:
    netns, cache, oci = tmp_path / "netns", tmp_path / "results", tmp_path / "runc"
    for directory in (netns, cache, oci):
        directory.mkdir()
    (netns / "live").touch()
    (oci / "running").mkdir()  # runc's state of a container it runs
    write_entry(cache, "live", "10.99.0.10", netns=str(netns / "live"))
    gone = write_entry(cache, "gone", "10.99.0.11", netns=str(netns / "gone"))
    write_entry(cache, "hidden", "10.99.0.12", netns="/nowhere/visible/ns")  # cannot tell: kept
    write_entry(cache, "running", "10.99.0.13")  # libcni before 1.2 records no namespace
    removed = write_entry(cache, "removed", "10.99.0.14")  # a failed DEL's leftover
    view = read_cache(cache, container=functools.partial(container_known, state_dirs=[oci]))
    assert {a: e.owner for a, e in view.entries.items()} == {
        "10.99.0.10": "cni:live:eth0",
        "10.99.0.12": "cni:hidden:eth0",
        "10.99.0.13": "cni:running:eth0",
    }
    assert view.alive == {"10.99.0.10", "10.99.0.13"}
    assert [(e.path, why) for e, why in view.stale] == [
        (gone, f"network namespace {netns / 'gone'} is gone"),
        (removed, "no network namespace recorded, and no OCI runtime knows container removed"),
    ]
    with capture_logs() as logs:
        assert all(remove_stale(entry, why) for entry, why in view.stale)
    assert not gone.exists() and not removed.exists()
    assert [e["path"] for e in logs if e["event"] == "cni_cache_entry_removed"] == [str(gone), str(removed)]
    # Where no OCI runtime's directory is visible, nothing says an entry without a namespace is gone.
    assert sorted(cni_cache_view(cache, container=functools.partial(container_known, state_dirs=[]))) == [
        "10.99.0.10",
        "10.99.0.12",
        "10.99.0.13",
    ]


def test_without_a_namespace_an_entry_loses_to_one_proven_alive_and_is_not_removed(tmp_path: Path) -> None:
    (tmp_path / "netns").mkdir()
    (tmp_path / "netns" / "live").touch()
    cache = tmp_path / "results"
    cache.mkdir()
    write_entry(cache, "live", "10.99.0.10", netns=str(tmp_path / "netns" / "live"), mtime=1000)
    old = write_entry(cache, "old", "10.99.0.10", mtime=2000)  # newer file, but nothing says it is alive
    with capture_logs() as logs:
        view = read_cache(cache)
    assert view.entries["10.99.0.10"].owner == "cni:live:eth0" and view.stale == ()
    [duplicate] = [e for e in logs if e["event"] == "cni_cache_duplicate_address"]
    assert (duplicate["log_level"], duplicate["decided_by"]) == ("info", "liveness")
    assert old.exists()  # not proven gone: its file stays


def test_a_cache_file_rewritten_since_it_was_judged_is_not_removed(tmp_path: Path) -> None:
    write_entry(tmp_path, "c1", "10.99.0.10", netns=str(tmp_path / "gone"), mtime=1000)
    [(entry, why)] = read_cache(tmp_path).stale
    path = write_entry(tmp_path, "c1", "10.99.0.11", netns=str(tmp_path / "gone"), mtime=2000)  # ADD again
    assert not remove_stale(entry, why) and path.exists()


def test_a_container_is_known_by_its_oci_runtimes_state_directory(tmp_path: Path) -> None:
    (tmp_path / "runc" / "c1").mkdir(parents=True)
    dirs = [tmp_path / "runc", tmp_path / "crun"]  # crun never ran here: its root does not exist
    assert container_known("c1", dirs) is True
    assert container_known("c2", dirs) is False
    assert container_known("c1", [tmp_path / "crun"]) is None  # nothing visible: cannot tell
    assert container_known("../runc", dirs) is None and container_known("", dirs) is None


def test_a_containerd_sandbox_is_known_on_a_host_that_runs_podman_too() -> None:
    # By default: runc's root holds podman's containers, containerd's shims keep its CRI sandboxes
    # under their own root; with only the former listed, every sandbox would be judged gone.
    from eni_ipam.agent.config import AgentConfig

    roots = AgentConfig.model_fields["oci_state_dirs"].default
    assert {"/run/runc", "/run/crun", "/run/containerd/runc/k8s.io"} <= set(roots)


def test_when_liveness_cannot_tell_the_newer_entry_wins(tmp_path: Path) -> None:
    write_entry(tmp_path, "old", "10.99.0.10", mtime=1000)
    write_entry(tmp_path, "new", "10.99.0.10", mtime=2000)
    assert cni_cache_view(tmp_path)["10.99.0.10"].owner == "cni:new:eth0"


@pytest.mark.parametrize(
    "content",
    [b"not json", b"[]", b'{"kind": "cniCacheV1"}', b'{"config": "%%%", "containerId": "c", "ifName": "e"}'],
)
def test_a_file_that_is_not_a_cache_entry_is_skipped(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "junk").write_bytes(content)
    write_entry(tmp_path, "c1", "10.99.0.10")
    assert list(cni_cache_view(tmp_path)) == ["10.99.0.10"]


def test_a_fifo_in_the_cache_does_not_block_the_rebuild(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")  # opening it to read would wait for a writer for ever
    write_entry(tmp_path, "c1", "10.99.0.10")
    assert list(cni_cache_view(tmp_path)) == ["10.99.0.10"]


def test_a_rebuilt_allocation_keeps_what_the_cache_said_of_its_container(tmp_path: Path) -> None:
    (tmp_path / "a").touch()
    write_entry(tmp_path, "c1", "10.99.0.10", netns=str(tmp_path / "a"))
    allocator = Allocator(clock=LoopClock())
    allocator.set_pool("default", [PoolAddress(address="10.99.0.10", prefix_length=24, gateway="10.99.0.1")])
    allocator.restore(runtime=cni_cache_view(tmp_path))
    [allocation] = allocator.allocations()
    assert (allocation.owner, allocation.network, allocation.netns) == (
        "cni:c1:eth0",
        "podnet",
        str(tmp_path / "a"),
    )


def test_namespace_existence_is_unknown_where_its_directory_is_not_visible(tmp_path: Path) -> None:
    (tmp_path / "present").touch()
    assert namespace_exists(str(tmp_path / "present")) is True
    assert namespace_exists(str(tmp_path / "absent")) is False
    assert namespace_exists(str(tmp_path / "no-such-dir" / "ns")) is None
    assert namespace_exists("") is None


def test_owners_parse_back_and_plugin_detection_reads_both_config_shapes() -> None:
    assert parse_cni_owner("cni:abc:eth0") == ("abc", "eth0")
    assert parse_cni_owner("libnetwork:x") is None
    assert uses_this_plugin(OURS) and not uses_this_plugin(HOST_LOCAL)
    assert uses_this_plugin({"type": "eni-ipam-cni"}) and not uses_this_plugin(["eni-ipam-cni"])


def test_a_judged_entry_replaced_by_a_fifo_neither_holds_the_sweep_nor_is_removed(tmp_path: Path) -> None:
    # Between the scan and the removal, the name becomes a FIFO: re-reading it must not wait for a
    # writer (the sweep runs this on the event loop), and what is there now is not the agent's.
    path = write_entry(tmp_path, "c1", "10.99.0.10", netns=str(tmp_path / "gone"))
    [(entry, why)] = read_cache(tmp_path).stale
    path.unlink()
    os.mkfifo(path)
    with capture_logs() as logs:
        assert not remove_stale(entry, why)
    assert path.exists()
    [refused] = [e for e in logs if e["event"] == "cni_cache_entry_not_removed"]
    assert "a FIFO" in refused["error"]


def test_a_link_in_the_cache_is_not_followed(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    target = write_entry(elsewhere, "c1", "10.99.0.10")
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "planted").symlink_to(target)
    assert cni_cache_view(cache) == {}
