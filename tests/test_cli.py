"""The command line: exit codes and messages people see before anything runs."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from eni_ipam.app.runconfig import DEFAULT_CONFIG
from eni_ipam.cli import _duration, main


@pytest.fixture
def no_aws_region(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """An environment in which botocore finds no region: no variables, no profile files."""
    for name in ("AWS_DEFAULT_REGION", "AWS_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))


def test_check_refuses_an_aws_configuration_without_a_region(
    no_aws_region: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("provider: aws\nnode_source: memory\n")
    assert main(["run", "--config", str(config), "--check"]) == 2
    err = capsys.readouterr().err
    assert "aws.region" in err and "AWS_DEFAULT_REGION" in err


def test_check_accepts_a_region_from_the_environment(
    no_aws_region: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    config = tmp_path / "config.yaml"
    config.write_text("provider: aws\nnode_source: memory\n")
    assert main(["run", "--config", str(config), "--check"]) == 0
    assert "configuration OK: provider aws" in capsys.readouterr().out


def test_an_invalid_run_configuration_exits_2_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("provider: sim\nsettings:\n  gc_interval: 1d\n")
    assert main(["run", "--config", str(config), "--check"]) == 2
    assert "settings.gc_interval" in capsys.readouterr().err


KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
"""
"""A kubeconfig that loads (no server answers it: ``--check`` reaches none)."""

PROFILES_CONFIG = """\
provider: sim
sim: {cloud: {vpcs: [{id: vpc-1, cidr: 10.0.0.0/16}]}}
server: {port: 0, probe_port: 0}
kubernetes: {kubeconfig: KUBECONFIG}
profiles:
  - {name: web, node_selector: {match_labels: {group: web}}, spec: {pre_allocate: 6}}
  - {name: web-a, node_selector: {match_labels: {group: web, zone: a}}}
"""


def test_check_lists_the_profiles_in_the_order_they_are_tried(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.yaml"
    (tmp_path / "kubeconfig").write_text(KUBECONFIG)
    config.write_text(PROFILES_CONFIG.replace("KUBECONFIG", str(tmp_path / "kubeconfig")))
    assert main(["run", "--config", str(config), "--check"]) == 0
    assert "profiles web-a, web (in the order tried)" in capsys.readouterr().out


def test_check_names_a_bad_profiles_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(PROFILES_CONFIG.replace("pre_allocate: 6", "pre_allocat: 6"))
    assert main(["run", "--config", str(config), "--check"]) == 2
    assert "profiles[0].spec.pre_allocat" in capsys.readouterr().err


@pytest.mark.parametrize(("text", "seconds"), [("10s", 10.0), ("5m", 300.0), ("90", 90.0), ("0", 0.0)])
def test_durations_on_the_command_line_are_written_as_in_files(text: str, seconds: float) -> None:
    assert _duration(text) == seconds


def test_a_bad_command_line_duration_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["demo", "--duration", "1d"])
    assert info.value.code == 2
    assert "--duration" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("option", "value", "why"),
    [
        ("--nodes", "9" * 5000, "an integer of 5000 digits"),
        ("--nodes", "99999999999999999999", "at most 1000"),
        ("--nodes", "0x10", "not an integer"),
        ("--port", "99999", "at most 65535"),
        ("--seed", "9" * 5000, "an integer of 5000 digits"),
        ("--duration", "1" + "0" * 400, "expected a finite duration"),
    ],
)
def test_an_oversized_number_on_the_command_line_is_a_usage_error_naming_the_option(
    option: str, value: str, why: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main(["demo", option, value])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {option}: " in err and why in err and len(err) < 1000


@pytest.mark.parametrize("host", ["$(HOST_IP)", "", "10.0.0.300", "a b"])
def test_the_agent_refuses_a_listen_address_that_is_none(
    host: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """An unset HOST_IP reaches the agent as the literal ``$(HOST_IP)``: it must say so, not bind."""
    assert main(["agent", "--node", "n1", "--server-host", host]) == 2
    err = capsys.readouterr().err
    assert "--server-host" in err and repr(host) in err
    if host.startswith("$("):
        assert "status.hostIP" in err


@pytest.mark.parametrize("host", ["10.0.3.7", "fd00::7", "node-1.internal"])
def test_listen_addresses_the_agent_takes(host: str) -> None:
    from eni_ipam.agent.config import listen_address, load_agent_config

    config = load_agent_config(None)
    assert config.replace(server=config.server.replace(host=listen_address(host))).server_host == host


@pytest.fixture
def port_in_use() -> Iterator[int]:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        yield taken.getsockname()[1]


def test_the_agent_exits_2_when_its_port_is_in_use(
    port_in_use: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "agent.yaml"
    config.write_text(
        f"node_source: memory\nsocket: {tmp_path}/agent.sock\nstate_dir: {tmp_path}/state\n"
        f"server: {{host: 127.0.0.1, port: {port_in_use}}}\npools: {{default: {{cidr: 10.9.0.0/28}}}}\n"
    )
    assert main(["agent", "--node", "n1", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert f"server.port: cannot listen on 127.0.0.1:{port_in_use}" in err and "in use" in err
    assert "Traceback" not in err


@pytest.mark.system
def test_the_controller_exits_2_when_its_port_is_in_use(
    port_in_use: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(DEFAULT_CONFIG.replace("port: 9090", f"port: {port_in_use}"))
    assert main(["run", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert f"server.port: cannot listen on 127.0.0.1:{port_in_use}" in err and "Traceback" not in err


def test_the_test_kit_adds_its_commands_through_entry_points() -> None:
    from eni_ipam.cli import COMMANDS, DEMOS, _plugins

    assert "dev-cluster" in _plugins(COMMANDS)
    assert _plugins(DEMOS)["moto"].default_nodes == 10


@pytest.mark.parametrize(
    ("argv", "what"),
    [
        (["dev-cluster", "--kubeconfig", "k"], "eni-ipam dev-cluster"),
        (["demo", "--cloud", "moto"], "eni-ipam demo --cloud moto"),
    ],
)
def test_without_the_test_kit_its_commands_say_where_they_come_from(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], argv: list[str], what: str
) -> None:
    import eni_ipam.cli

    monkeypatch.setattr(eni_ipam.cli, "_plugins", lambda group: {})
    assert main(argv) == 2
    assert f"{what} comes with eni-ipam-testkit, which is not installed" in capsys.readouterr().err


def test_log_level_takes_what_the_configuration_takes() -> None:
    import typing

    from eni_ipam.cli import LOG_LEVELS
    from eni_ipam.config.schema import LogLevel

    assert typing.get_args(LogLevel) == LOG_LEVELS


@pytest.mark.system
@pytest.mark.parametrize("command", [["demo", "--duration", "1s"], ["run", "--check"], ["simulate"]])
def test_an_unknown_log_level_is_a_usage_error_naming_the_levels_not_a_traceback(command: list[str]) -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "eni_ipam.cli", "--log-level", "verbose", *command],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert "argument --log-level: invalid choice: 'verbose'" in done.stderr
    assert "'debug', 'info', 'warning', 'error'" in done.stderr


def cli(
    *argv: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``eni-ipam ARGV`` as people run it, with ``env`` over an environment of no ENI_IPAM_ variable."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("ENI_IPAM_")}
    return subprocess.run(
        [sys.executable, "-m", "eni_ipam.cli", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        env={**base, **(env or {})},
        cwd=cwd,
    )


BROKEN = """\
provider: sim
node_source: memory
server: {host: 127.0.0.1, port: PORT, probe_port: 0}
node_defaults: {min_allocate: 40, max_allocate: 10}
sim:
  cloud:
    vpcs: [{id: vpc-1, cidr: 10.0.0.0/16}]
    subnets: [{id: s-1, vpc: vpc-1, zone: us-east-1a, cidr: 10.0.0.0/24}]
    instances: [{id: i-1, type: m5.lage, subnet: s-1}]
nodes: [{name: n1, instance: i-1}]
"""


@pytest.mark.system
def test_check_lists_every_problem_at_once_each_with_its_field_and_fix(
    port_in_use: int, tmp_path: Path
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(BROKEN.replace("PORT", str(port_in_use)))
    done = cli("run", "--config", str(config), "--check")
    assert done.returncode == 2 and done.stdout == ""
    lines = done.stderr.splitlines()
    assert lines[0] == "invalid configuration: 3 problems"
    assert lines[1].startswith("  node_defaults.min_allocate: min_allocate 40 is above max_allocate 10")
    assert "Lower min_allocate to at most 10, or raise max_allocate" in lines[1]
    assert lines[2].startswith("  sim.cloud.instances[0].type: unknown instance type 'm5.lage'")
    assert "(did you mean 'm5.large'?)" in lines[2]
    assert lines[3].startswith(f"  server.port: cannot listen on 127.0.0.1:{port_in_use}")
    assert lines[3].endswith("choose a free port with --port, server.port or ENI_IPAM_SERVER__PORT")
    assert "Traceback" not in done.stderr


@pytest.mark.system
def test_run_refuses_what_check_refuses_before_it_binds(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        f"provider: sim\nsim: {{cloud: {{}}}}\nkubernetes: {{kubeconfig: {tmp_path / 'kubeconfig'}}}\n"
    )
    for argv in (["run", "--config", str(config), "--check"], ["run", "--config", str(config)]):
        done = cli(*argv)
        assert done.returncode == 2, done.stderr
        assert done.stderr.startswith("invalid configuration: kubernetes.kubeconfig: cannot load ")
        assert "set kubernetes.kubeconfig (or ENI_IPAM_KUBERNETES__KUBECONFIG)" in done.stderr
        assert "service_started" not in done.stderr and "Traceback" not in done.stderr


@pytest.mark.system
def test_a_provider_override_without_a_file_says_to_pass_one() -> None:
    done = cli("run", "--check", env={"ENI_IPAM_PROVIDER": "aws", "ENI_IPAM_LOG_LEVEL": "debug"})
    assert done.returncode == 2
    assert done.stderr.startswith("invalid configuration: provider: set by ENI_IPAM_PROVIDER")
    assert "pass --config FILE (e.g. examples/config/aws-kubernetes.yaml)" in done.stderr
    assert "sim:" not in done.stderr and "Traceback" not in done.stderr


@pytest.mark.system
def test_other_overrides_without_a_file_apply_to_the_demo() -> None:
    done = cli("run", "--check", env={"ENI_IPAM_SERVER__PORT": "0", "ENI_IPAM_SERVER__PROBE_PORT": "0"})
    assert done.returncode == 0, done.stderr
    assert done.stdout == "configuration OK: provider sim, node source memory\n"


@pytest.mark.system
def test_a_misspelt_variable_names_the_one_it_may_mean() -> None:
    done = cli("run", "--check", env={"ENI_IPAM_SETTINGS__GC_INTERVALL": "10m"})
    assert done.returncode == 2
    assert "settings.gc_intervall: unknown key 'gc_intervall'" in done.stderr
    assert "did you mean ENI_IPAM_SETTINGS__GC_INTERVAL?" in done.stderr
    assert "Traceback" not in done.stderr
