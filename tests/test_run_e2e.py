"""End to end: ``eni-ipam run`` as a subprocess, against the fake API server and the in-memory cloud.

Nodes appear → ENIPools are created → pools filled on the cloud → status written; SIGTERM →
mutations drain, the Lease is released, exit 0.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

import pytest
import yaml

from eni_ipam_testkit.fake_kube import FakeKube
from tests.conftest import CRD
from tests.deploy.conftest import one, render
from tests.deploy.test_manifests import grants
from tests.kube.conftest import node
from tests.waiting import until

pytestmark = [pytest.mark.system, pytest.mark.timeout(60)]


def config(kubeconfig: Path) -> dict:
    return {
        "provider": "sim",
        "node_source": "kubernetes",
        "log_level": "info",
        "shutdown_timeout": "5s",
        "server": {"host": "127.0.0.1", "port": 0, "probe_port": 0},
        "sim": {
            "cloud": {
                "vpcs": [{"id": "vpc-1", "cidr": "10.0.0.0/16"}],
                "subnets": [{"id": "s-1", "vpc": "vpc-1", "zone": "us-east-1a", "cidr": "10.0.0.0/22"}],
                "security_groups": [{"id": "sg-1", "vpc": "vpc-1"}],
                "instances": [
                    {"id": f"i-{n}", "type": "m5.large", "subnet": "s-1", "security_groups": ["sg-1"]}
                    for n in range(3)
                ],
            }
        },
        "kubernetes": {
            "kubeconfig": str(kubeconfig),
            "lease_namespace": "kube-system",
            "identity": "e2e-replica",
            "lease_duration": "3s",
            "renew_deadline": "2s",
            "retry_period": "0.5s",
        },
        "node_defaults": {"pre_allocate": 6},
    }


def available(kube: FakeKube, name: str) -> int:
    pool = kube.get_object("enipools", name) or {}
    return int(((pool.get("status") or {}).get("stats") or {}).get("available", -1))


async def test_run_fills_pools_of_new_nodes_and_exits_cleanly_on_sigterm(tmp_path: Path) -> None:
    async with FakeKube() as kube:
        await kube.apply_manifest(yaml.safe_load(CRD.read_text()))
        kube.requests.clear()  # what the service asks is checked against the chart's RBAC below
        kubeconfig = tmp_path / "kubeconfig"
        kube.write_kubeconfig(kubeconfig)
        path = tmp_path / "config.yaml"
        path.write_text(yaml.safe_dump(config(kubeconfig)))
        kube.add_object("nodes", node("n0", "i-0"))
        env = {k: v for k, v in os.environ.items() if not k.startswith("ENI_IPAM_")}
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "eni_ipam.cli",
            "run",
            "--config",
            str(path),
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            await until(lambda: available(kube, "n0") == 6, limit=20)
            for n in (1, 2):
                kube.add_object("nodes", node(f"n{n}", f"i-{n}"))
            await until(lambda: available(kube, "n1") == 6 and available(kube, "n2") == 6, limit=20)
            lease = kube.get_object("leases", "eni-ipam", namespace="kube-system")
            assert lease is not None and lease["spec"]["holderIdentity"] == "e2e-replica"
            pool = kube.get_object("enipools", "n1")
            assert pool is not None and pool["spec"]["instanceID"] == "i-1"
            assert {c["type"]: c["status"] for c in pool["status"]["conditions"]}["Ready"] == "True"
        finally:
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.wait_for(process.communicate(), 15)
        log = stderr.decode()
        assert process.returncode == 0, log[-3000:]
        # (mutations_drained is logged whether or not a call was in flight; tests/core/test_fence.py
        # shows a drain that waits for one)
        assert "mutations_drained" in log and "lease_released" in log and "service_stopped" in log
        # Port 0 asked for a free port: the log says which one it got, not 0.
        started = [json.loads(line) for line in log.splitlines() if '"service_started"' in line]
        assert [e["endpoint"].rsplit(":", 1)[0] for e in started] == ["127.0.0.1"], log[:3000]
        assert int(started[0]["endpoint"].rsplit(":", 1)[1]) > 0
        lease = kube.get_object("leases", "eni-ipam", namespace="kube-system")
        assert lease is not None and lease["spec"]["holderIdentity"] == ""
        # Everything the service asked of the API server is granted by the chart's RBAC.
        used = {
            (r.group, f"{r.plural}/{r.subresource}" if r.subresource else r.plural, r.verb)
            for r in kube.requests
        }
        docs = render()
        granted = grants(one(docs, "ClusterRole")) | grants(one(docs, "Role"))
        assert used <= granted, used - granted
        assert ("eni-ipam.io", "enipools/status", "patch") in used


async def test_run_refuses_an_invalid_configuration_naming_the_field(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("provider: sim\nsim: {cloud: {}}\nsettings: {parallel_workers: 0}\n")
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "eni_ipam.cli", "run", "--config", str(path), stderr=asyncio.subprocess.PIPE
    )
    _, stderr = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 2
    assert "settings.parallel_workers" in stderr.decode()


async def test_run_without_the_crd_says_once_what_installs_it(tmp_path: Path) -> None:
    """No ENIPool CRD in the cluster: one error naming the fix, /readyz saying the same, and no
    warning at each retry of the informer."""
    import aiohttp

    async with FakeKube() as kube:  # no CRD applied
        kubeconfig = tmp_path / "kubeconfig"
        kube.write_kubeconfig(kubeconfig)
        path = tmp_path / "config.yaml"
        path.write_text(yaml.safe_dump(config(kubeconfig)))
        kube.add_object("nodes", node("n0", "i-0"))
        env = {k: v for k, v in os.environ.items() if not k.startswith("ENI_IPAM_")}
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "eni_ipam.cli", "run", "--config", str(path), env=env,
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert process.stderr is not None
        lines: list[str] = []

        async def first(event: str) -> dict:
            while True:
                line = (await process.stderr.readline()).decode()  # type: ignore[union-attr]
                assert line, "".join(lines)[-3000:]
                lines.append(line)
                if f'"{event}"' in line:
                    found: dict = json.loads(line)
                    return found

        try:
            started = await asyncio.wait_for(first("service_started"), 20)
            missing = await asyncio.wait_for(first("crd_missing"), 20)
            async with (
                aiohttp.ClientSession() as session,
                session.get(f"http://{started['endpoint']}/readyz") as response,
            ):
                readyz = response.status, await response.text()
            await asyncio.sleep(8)  # the informer's retries after 1, 2 and 4 seconds
        finally:
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
        _, rest = await asyncio.wait_for(process.communicate(), 15)
    log = [json.loads(line) for line in [*lines, *rest.decode().splitlines()] if line.startswith("{")]
    fix = "kubectl apply --server-side -f deploy/kubernetes/crd.yaml (or install the Helm chart"
    assert missing["level"] == "error" and missing["resource"] == "enipools"
    assert missing["fix"].startswith(fix)
    assert readyz[0] == 503 and fix in readyz[1]
    assert [e["event"] for e in log].count("crd_missing") == 1
    assert not [e for e in log if e["event"] == "watch_failed" and e["level"] == "warning"]
    assert process.returncode == 0
