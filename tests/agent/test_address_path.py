"""A pod's address path, end to end: the controller writes the node's pool into its ENIPool → the
agent daemon follows it and opens its socket → the real ``bridge`` plugin delegates IPAM to
``eni-ipam-cni`` → the address is configured in a real network namespace → the agent reports it in
``status.used`` (so the controller never releases it) → DEL returns it.

Needs root, ``ip netns`` and Debian's containernetworking-plugins; skips otherwise, saying which.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from eni_ipam.kube.api import ENIPOOLS
from eni_ipam_testkit.fake_kube import FakeKube
from tests.agent.conftest import enipool_status
from tests.agent.test_cni_netns import CNI_DIR, _ip, addresses_in, link_exists, netns, plugin_dir, run_cni
from tests.agent.test_daemon import running_agent, serving, status
from tests.kube.conftest import make_api
from tests.waiting import until

pytestmark = [pytest.mark.system, pytest.mark.timeout(60)]
__all__ = ["netns", "plugin_dir"]  # fixtures shared with the plugins' own namespace tests


async def test_pool_address_reaches_the_pod_namespace_and_is_reported_in_use(
    kube: FakeKube, tmp_path: Path, netns: str, plugin_dir: str
) -> None:
    controller = make_api(kube)
    await controller.create(ENIPOOLS, {"metadata": {"name": "n1"}, "spec": {"instanceID": "i-1"}})
    pool = ["10.0.0.37", "10.0.0.38"]
    await controller.patch(ENIPOOLS, "n1", {"status": enipool_status(pool)}, status=True)
    bridge = f"enibr{uuid.uuid4().hex[:6]}"
    container = f"ctr-{netns}"
    try:
        async with running_agent(kube, tmp_path) as agent:
            await until(lambda: serving(agent))
            conf = {
                "cniVersion": "1.0.0",
                "name": "eni-path",
                "type": "bridge",
                "bridge": bridge,
                "isGateway": False,
                "ipMasq": False,
                "ipam": {"type": "eni-ipam-cni", "socket": agent.config.socket},
            }
            common = {"container": container, "netns": netns, "cni_path": f"{plugin_dir}:{CNI_DIR}"}
            rc, result, err = await run_cni("bridge", "ADD", conf, **common)
            assert rc == 0, (result, err)
            # the subnet's prefix length and router come from the ENIPool's status.subnets
            assert result["ips"][0]["address"] == "10.0.0.37/24"
            assert result["ips"][0]["gateway"] == "10.0.0.1"
            assert addresses_in(netns) == [("10.0.0.37", 24)]
            await until(lambda: status(kube).get("used") == ["10.0.0.37"])

            rc, _, err = await run_cni("bridge", "DEL", {**conf, "prevResult": result}, **common)
            assert rc == 0, err
            assert not link_exists(netns)
            await until(lambda: status(kube).get("used") == [])
    finally:
        _ip("link", "del", bridge, check=False)
        await controller.close()
