"""``eni-ipam run`` with the generic provider: Kubernetes Nodes without provider ids get pools carved
from the cluster CIDR, and a restarted service never hands out a block a published pool holds."""

from __future__ import annotations

import asyncio
import ipaddress
from pathlib import Path

import pytest
import yaml

from eni_ipam.app.runconfig import load_config_mapping
from eni_ipam.app.service import serve
from eni_ipam.kube.resources import pool_for_node
from eni_ipam_testkit.fake_kube import FakeKube
from tests.conftest import CRD
from tests.waiting import until

pytestmark = [pytest.mark.system, pytest.mark.timeout(60)]


def bare_node(name: str) -> dict:
    return {"metadata": {"name": name, "labels": {}}, "spec": {}}


def config(kubeconfig: Path) -> dict:
    return {
        "provider": "generic",
        "node_source": "kubernetes",
        "shutdown_timeout": "2s",
        "server": {"host": "127.0.0.1", "port": 0, "probe_port": 0},
        "generic": {"cluster_cidrs": ["10.0.0.0/25", "fd00:1::/62"], "node_mask_ipv4": 28},
        "kubernetes": {
            "kubeconfig": str(kubeconfig),
            "lease_namespace": "kube-system",
            "identity": "generic-e2e",
            "lease_duration": "3s",
            "renew_deadline": "2s",
            "retry_period": "0.5s",
        },
        "node_defaults": {"pre_allocate": 16},
    }


def prefixes(kube: FakeKube, name: str) -> list[str]:
    pool = kube.get_object("enipools", name) or {}
    return [p for i in (pool.get("status") or {}).get("interfaces") or [] for p in i.get("prefixes") or []]


def ipv6(kube: FakeKube, name: str) -> list[str]:
    pool = kube.get_object("enipools", name) or {}
    return [
        p for i in (pool.get("status") or {}).get("interfaces") or [] for p in i.get("ipv6Prefixes") or []
    ]


async def run_until(kube_config: dict, done) -> None:
    stop = asyncio.Event()
    task = asyncio.create_task(serve(load_config_mapping(kube_config), stop=stop, environ={}))
    try:
        await until(done, limit=20)
    finally:
        stop.set()
        assert await asyncio.wait_for(task, 15) == 0


async def test_nodes_get_blocks_and_a_restart_never_hands_one_out_twice(tmp_path: Path) -> None:
    async with FakeKube() as kube:
        await kube.apply_manifest(yaml.safe_load(CRD.read_text()))
        kubeconfig = tmp_path / "kubeconfig"
        kube.write_kubeconfig(kubeconfig)
        for name in ("n0", "n1"):
            kube.add_object("nodes", bare_node(name))
        cfg = config(kubeconfig)
        await run_until(cfg, lambda: len(prefixes(kube, "n0")) == 1 == len(prefixes(kube, "n1")))
        first = {n: (prefixes(kube, n), ipv6(kube, n)) for n in ("n0", "n1")}
        assert (kube.get_object("enipools", "n0") or {})["spec"]["instanceID"] == "n0"

        # A new process: it must occupy what the pools publish before it serves a2 and a3. Their
        # pools exist before it starts and a2 asks for more (so it is served first): a process that
        # forgot the published blocks would hand n0's and n1's to a2.
        for name, wanted in (("a2", 32), ("a3", 16)):
            kube.add_object("nodes", bare_node(name))
            pool = pool_for_node(kube.get_object("nodes", name) or {}, None, instance_ids="node-name")
            assert pool is not None
            pool["spec"]["preAllocate"] = wanted
            kube.add_object("enipools", pool)
        await run_until(cfg, lambda: len(prefixes(kube, "a2")) == 2 and len(prefixes(kube, "a3")) == 1)
        after = {n: (prefixes(kube, n), ipv6(kube, n)) for n in ("n0", "n1", "a2", "a3")}
        assert {n: after[n] for n in first} == first
        v4 = [p for n in after for p in after[n][0]]
        v6 = [p for n in after for p in after[n][1]]
        cidr = ipaddress.ip_network("10.0.0.0/25")
        assert len(set(v4)) == 5 and all(ipaddress.ip_network(p).subnet_of(cidr) for p in v4)
        assert len(set(v6)) == 4
