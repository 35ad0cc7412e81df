"""What ``run`` and ``run --check`` check of the machine: files, ports, instance types, all at once."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from eni_ipam.app.checks import check_configuration
from eni_ipam.app.runconfig import load_config_mapping
from eni_ipam.errors import ConfigError, ConfigErrors

KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443", certificate-authority: CA}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
"""
CLOUD = {
    "vpcs": [{"id": "vpc-1", "cidr": "10.0.0.0/16"}],
    "subnets": [{"id": "s-1", "vpc": "vpc-1", "zone": "us-east-1a", "cidr": "10.0.0.0/24"}],
    "instances": [{"id": "i-1", "type": "m5.large", "subnet": "s-1"}],
}
FREE_PORTS = {"host": "127.0.0.1", "port": 0, "probe_port": 0}


@pytest.fixture
def kubeconfig(tmp_path: Path) -> Path:
    (tmp_path / "ca.crt").write_text("not read by the check, only looked for")
    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG.replace("CA", str(tmp_path / "ca.crt")))
    return path


@pytest.fixture
def held_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def config(**data: Any) -> Any:
    return load_config_mapping(
        {"provider": "sim", "sim": {"cloud": CLOUD}, "node_source": "memory", "server": FREE_PORTS, **data}
    )


def problems(config: Any, **options: Any) -> dict[str, str]:
    with pytest.raises(ConfigError) as caught:
        check_configuration(config, **{"ports": True, **options})
    return {e.field: e.message for e in caught.value.errors}


def test_a_configuration_the_machine_can_run_passes() -> None:
    assert check_configuration(config(), ports=True).notes == ()


# -- files ---------------------------------------------------------------------------------------------


def test_a_kubeconfig_is_loaded_and_the_files_it_names_found(kubeconfig: Path, tmp_path: Path) -> None:
    kube = config(node_source="kubernetes", kubernetes={"kubeconfig": str(kubeconfig)})
    check_configuration(kube, ports=True)
    (tmp_path / "ca.crt").unlink()
    message = problems(kube)["kubernetes.kubeconfig"]
    assert f"names a certificate-authority file {tmp_path / 'ca.crt'} that does not exist" in message
    assert "ENI_IPAM_KUBERNETES__KUBECONFIG" in message


def test_a_missing_kubeconfig_is_named_with_the_fix(tmp_path: Path) -> None:
    kube = config(node_source="kubernetes", kubernetes={"kubeconfig": str(tmp_path / "nowhere")})
    message = problems(kube)["kubernetes.kubeconfig"]
    assert "cannot load" in message and "nowhere" in message
    assert "set kubernetes.kubeconfig (or ENI_IPAM_KUBERNETES__KUBECONFIG)" in message


def test_a_kubeconfig_set_by_a_variable_names_it(tmp_path: Path) -> None:
    kube = config(node_source="kubernetes", kubernetes={"kubeconfig": str(tmp_path / "nowhere")})
    with pytest.raises(ConfigError) as caught:
        check_configuration(
            kube, ports=False, environ={"ENI_IPAM_KUBERNETES__KUBECONFIG": str(tmp_path / "nowhere")}
        )
    assert caught.value.message.endswith("(set by ENI_IPAM_KUBERNETES__KUBECONFIG)")


def test_no_kubeconfig_outside_a_pod_says_there_is_no_service_account(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import lightkube

    reader = lightkube.KubeConfig.from_service_account.__func__  # type: ignore[attr-defined]
    monkeypatch.setattr(  # no service account mounted, whatever the machine running the test has
        lightkube.KubeConfig, "from_service_account", classmethod(lambda cls: reader(cls, tmp_path / "none"))
    )
    kube = config(node_source="kubernetes")
    message = problems(kube)["kubernetes.kubeconfig"]
    assert "the in-cluster service account" in message and "this process is not in a pod" in message


def test_memory_nodes_need_no_kubeconfig() -> None:
    check_configuration(config(kubernetes={"kubeconfig": "/nowhere"}), ports=True)


def test_an_irsa_token_file_that_is_not_there_is_named(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("AWS_WEB_IDENTITY_TOKEN_FILE", str(tmp_path / "token"))
    monkeypatch.setenv("AWS_ROLE_ARN", "arn:aws:iam::111122223333:role/eni-ipam")
    aws = load_config_mapping(
        {"provider": "aws", "aws": {"region": "eu-west-1"}, "node_source": "memory", "server": FREE_PORTS}
    )
    message = problems(aws)["AWS_WEB_IDENTITY_TOKEN_FILE"]
    assert str(tmp_path / "token") in message and "eks.amazonaws.com/role-arn" in message
    (tmp_path / "token").write_text("a token")
    check_configuration(aws, ports=True)


def test_azure_credential_files_that_are_not_there_are_named(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("AZURE_FEDERATED_TOKEN_FILE", str(tmp_path / "token"))
    monkeypatch.setenv("AZURE_CLIENT_CERTIFICATE_PATH", str(tmp_path / "cert.pem"))
    section = {
        "subscription_id": "0a1b2c3d-0000-4000-8000-00000000abcd",
        "resource_groups": ["rg"],
        "vnet_id": "/subscriptions/0a1b2c3d-0000-4000-8000-00000000abcd/resourceGroups/net/providers/"
        "Microsoft.Network/virtualNetworks/v",
    }
    azure = load_config_mapping(
        {"provider": "azure", "azure": section, "node_source": "memory", "server": FREE_PORTS}
    )
    assert set(problems(azure)) == {"AZURE_FEDERATED_TOKEN_FILE", "AZURE_CLIENT_CERTIFICATE_PATH"}


# -- ports ---------------------------------------------------------------------------------------------


def test_a_port_another_process_holds_is_named_with_the_fix(held_port: int) -> None:
    message = problems(config(server={**FREE_PORTS, "port": held_port}))["server.port"]
    assert f"cannot listen on 127.0.0.1:{held_port}: another process listens on it" in message
    assert "--port, server.port or ENI_IPAM_SERVER__PORT" in message


def test_a_probe_port_another_process_holds_is_named(held_port: int) -> None:
    message = problems(config(server={**FREE_PORTS, "probe_port": held_port}))["server.probe_port"]
    assert "server.probe_port or ENI_IPAM_SERVER__PROBE_PORT" in message


def test_one_port_for_both_listeners_is_refused() -> None:
    with socket.socket() as sock:  # a port free now, then released for the check
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    message = problems(config(server={**FREE_PORTS, "port": port, "probe_port": port}))["server.probe_port"]
    assert "server.port is the same port" in message


def test_run_does_not_check_the_ports_it_binds_itself(held_port: int) -> None:
    check_configuration(config(server={**FREE_PORTS, "port": held_port}), ports=False)


def test_a_host_that_is_not_this_machines_is_named() -> None:
    message = problems(config(server={**FREE_PORTS, "port": 1, "host": "192.0.2.1"}))["server.host"]
    assert "not an address of this machine" in message


# -- instance types ------------------------------------------------------------------------------------


def test_a_misspelt_sim_instance_type_names_the_type_it_may_mean() -> None:
    cloud = {**CLOUD, "instances": [{"id": "i-1", "type": "m5.lage", "subnet": "s-1"}]}
    message = problems(config(sim={"cloud": cloud}))["sim.cloud.instances[0].type"]
    assert "unknown instance type 'm5.lage' (did you mean 'm5.large'?)" in message


def test_an_instance_the_cloud_cannot_build_is_refused_before_the_start() -> None:
    interfaces = [{"index": n} for n in range(5)]  # an m5.large takes 3
    cloud = {
        **CLOUD,
        "instances": [{"id": "i-1", "type": "m5.large", "subnet": "s-1", "interfaces": interfaces}],
    }
    assert "sim.cloud.instances[0]" in problems(config(sim={"cloud": cloud}))


def gpu_profile(*types: str) -> dict[str, Any]:
    requirement = {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": list(types)}
    return {"name": "gpu", "node_selector": {"match_expressions": [requirement]}}


def aws(*, api: bool, kubeconfig: Path, **data: Any) -> Any:
    section = {"region": "eu-west-1", "update_limits_via_api": api}
    return load_config_mapping(
        {
            "provider": "aws",
            "aws": section,
            "server": FREE_PORTS,
            "kubernetes": {"kubeconfig": str(kubeconfig)},
            **data,
        }
    )


def test_a_profiles_unknown_instance_type_is_refused_when_the_table_is_all_there_is(kubeconfig: Path) -> None:
    found = problems(aws(api=False, kubeconfig=kubeconfig, profiles=[gpu_profile("p5.48xlarge", "m5.lage")]))
    message = found["profiles[0].node_selector.match_expressions[0].values[1]"]
    assert "unknown instance type 'm5.lage' (did you mean 'm5.large'?)" in message
    assert len(found) == 1  # p5.48xlarge is known


def test_with_ec2_asked_about_types_an_unknown_one_is_a_note(kubeconfig: Path) -> None:
    findings = check_configuration(
        aws(api=True, kubeconfig=kubeconfig, profiles=[gpu_profile("m5.lage", "x9.brandnew")]), ports=True
    )
    assert findings.notes == (
        "profiles[0].node_selector.match_expressions[0].values[0]: 'm5.lage' is not in the limits table; "
        "did you mean 'm5.large'?",
    )


def test_a_node_selector_on_the_instance_type_is_checked_too(kubeconfig: Path) -> None:
    kube = {"kubeconfig": str(kubeconfig), "node_selector": {"node.kubernetes.io/instance-type": "M5.large"}}
    found = problems(aws(api=False, kubeconfig=kubeconfig, kubernetes=kube))
    assert "did you mean 'm5.large'?" in found["kubernetes.node_selector.node.kubernetes.io/instance-type"]


# -- all at once ---------------------------------------------------------------------------------------


def test_every_problem_is_listed_at_once(held_port: int) -> None:
    cloud = {**CLOUD, "instances": [{"id": "i-1", "type": "m5.lage", "subnet": "s-1"}]}
    meaning = [ConfigError("node_defaults.min_allocate", "above max_allocate")]
    with pytest.raises(ConfigErrors) as caught:
        check_configuration(
            config(node_source="kubernetes", sim={"cloud": cloud}, server={**FREE_PORTS, "port": held_port}),
            ports=True,
            found=meaning,
        )
    assert [e.field for e in caught.value.errors] == [
        "node_defaults.min_allocate",
        "kubernetes.kubeconfig",
        "sim.cloud.instances[0].type",
        "server.port",
    ]
