"""The command line: exit codes and messages people see before anything runs."""

from __future__ import annotations

import contextlib
import io
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from eni_ipam.app.runconfig import DEFAULT_CONFIG
from eni_ipam.cli import _duration, main
from tests.kubeconfigs import UNREACHED


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
    # Ports the kernel picks: --check binds the ports, and whatever else listens on 9090 is not this test's.
    config.write_text("provider: aws\nnode_source: memory\nserver: {port: 0, probe_port: 0}\n")
    assert main(["run", "--config", str(config), "--check"]) == 2
    err = capsys.readouterr().err
    assert "aws.region" in err and "AWS_DEFAULT_REGION" in err


def test_check_accepts_a_region_from_the_environment(
    no_aws_region: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    config = tmp_path / "config.yaml"
    # Ports the kernel picks: --check binds the ports, and whatever else listens on 9090 is not this test's.
    config.write_text("provider: aws\nnode_source: memory\nserver: {port: 0, probe_port: 0}\n")
    assert main(["run", "--config", str(config), "--check"]) == 0
    assert "configuration OK: provider aws" in capsys.readouterr().out


def test_an_invalid_run_configuration_exits_2_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("provider: sim\nsettings:\n  gc_interval: 1d\n")
    assert main(["run", "--config", str(config), "--check"]) == 2
    assert "settings.gc_interval" in capsys.readouterr().err


PROFILES_CONFIG = """\
provider: sim
sim: {cloud: {vpcs: [{id: vpc-1, cidr: 10.0.0.0/16}]}}
server: {port: 0, probe_port: 0}
kubernetes: {kubeconfig: KUBECONFIG_PATH}
profiles:
  - {name: web, node_selector: {match_labels: {group: web}}, spec: {pre_allocate: 6}}
  - {name: web-a, node_selector: {match_labels: {group: web, zone: a}}}
"""


def test_check_lists_the_profiles_in_the_order_they_are_tried(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.yaml"
    (tmp_path / "kubeconfig").write_text(UNREACHED)
    config.write_text(PROFILES_CONFIG.replace("KUBECONFIG_PATH", str(tmp_path / "kubeconfig")))
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
    assert "choose another port: server.port in the agent's configuration file" in err
    assert "agent.config.server.port" in err  # where the chart keeps it
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


@pytest.mark.system
def test_a_port_in_use_names_the_ways_to_choose_another(port_in_use: int) -> None:
    """As a person meets it: the process's whole output, from ``--port`` on the command line."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "eni_ipam.cli", "run", "--plain", "--port", str(port_in_use)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert f"server.port: cannot listen on 127.0.0.1:{port_in_use}" in done.stderr  # the field
    hint = done.stderr.splitlines()[-1]
    for way in ("eni-ipam run --port N", "server.port in the configuration file", "ENI_IPAM_SERVER__PORT=N"):
        assert way in hint  # the fixes
    assert "Prometheus" not in hint  # said of 9090 alone


def test_port_9090_in_use_says_prometheus_listens_there_by_default() -> None:
    from eni_ipam.cli import listen_hint
    from eni_ipam.errors import ConfigError

    taken = ConfigError("server.port", "cannot listen on 0.0.0.0:9090: address already in use")
    assert "9090 is also Prometheus's default port" in listen_hint(taken, 9090)
    probe = ConfigError("server.probe_port", "cannot listen on 0.0.0.0:9092: address already in use")
    assert "ENI_IPAM_SERVER__PROBE_PORT=N" in listen_hint(probe, 9090)
    assert "--port" not in listen_hint(probe, 9090)  # --port is the endpoint's, not the probes'
    assert listen_hint(ConfigError("server.port", "must be at most 65535"), 9090) == ""


def test_run_port_overrides_the_file_and_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import eni_ipam.app.service

    served: list[int] = []

    async def serve(config: Any, **_: Any) -> int:
        served.append(config.server.port)
        return 0

    monkeypatch.setattr(eni_ipam.app.service, "serve", serve)
    monkeypatch.setenv("ENI_IPAM_SERVER__PORT", "9300")
    config = tmp_path / "config.yaml"
    config.write_text(DEFAULT_CONFIG)
    assert main(["run", "--config", str(config)]) == 0
    assert main(["run", "--config", str(config), "--port", "9191"]) == 0
    assert served == [9300, 9191]


def test_run_port_is_checked_as_a_port(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["run", "--port", "70000"])
    assert exited.value.code == 2
    assert "argument --port: 70000 is out of range: at least 0, at most 65535" in capsys.readouterr().err


HELP_PAGES = [
    [],
    ["run"],
    ["agent"],
    ["simulate"],
    ["demo"],
    ["max-pods"],
    ["aws-iam-policy"],
    ["dev-cluster"],
]


@pytest.mark.parametrize("command", HELP_PAGES, ids=lambda c: " ".join(c) or "eni-ipam")
def test_every_help_page_says_what_the_command_does_with_examples(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main([*command, "--help"])
    assert exited.value.code == 0
    page = capsys.readouterr().out
    _, _, rest = page.partition("\n\n")  # the usage, then the description
    description = rest.split("\n\n", 1)[0]
    assert not description.startswith(("options:", "positional arguments:")), page
    assert len(description.split()) >= 10, description  # a sentence or two, not a word
    examples = page.split("\nexamples:\n", 1)[1]
    lines = [line for line in examples.splitlines() if line.startswith("  eni-ipam")]
    assert 2 <= len(lines) <= 4, examples
    assert (
        all(line.startswith(f"  eni-ipam {' '.join(command)}".rstrip()) for line in lines[1:]) or not command
    )


def test_the_top_level_help_lists_every_command_and_says_where_to_start(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    page = capsys.readouterr().out
    listed = page.split("\ncommands:\n", 1)[1].split("\n\n", 1)[0]
    for name in ("run", "agent", "simulate", "demo", "max-pods", "aws-iam-policy", "dev-cluster"):
        assert f"\n    {name} " in listed, name
    assert "  eni-ipam demo\n      start here" in page


def test_the_agents_own_program_has_the_same_help() -> None:
    from eni_ipam.agent.main import main as agent_main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        agent_main(["--help"])
    assert "\nexamples:\n  eni-ipam-agent --config" in out.getvalue()


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


@pytest.mark.parametrize(("flags", "plain"), [([], False), (["--plain"], True)])
def test_a_registered_demo_gets_the_options_given(
    monkeypatch: pytest.MonkeyPatch, flags: list[str], plain: bool
) -> None:
    import eni_ipam.cli

    calls: list[dict[str, object]] = []

    class Recorded:
        help = "a cloud that records how it was started"
        default_nodes = 3

        def run(self, **options: object) -> int:
            calls.append(options)
            return 0

    plugins = {eni_ipam.cli.DEMOS: {"rec": Recorded()}, eni_ipam.cli.COMMANDS: {}}
    monkeypatch.setattr(eni_ipam.cli, "_plugins", lambda group: plugins[group])
    assert main(["demo", "--cloud", "rec", "--duration", "5s", "--port", "0", *flags]) == 0
    assert calls == [{"nodes": 3, "duration": 5.0, "seed": 1, "port": 0, "plain": plain}]


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
        "server: {port: 0, probe_port: 0}\n"
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


def test_counts_are_written_in_the_singular_and_the_plural(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from eni_ipam.adapters.terminal import plural

    assert [plural(n, "node") for n in (0, 1, 2)] == ["0 nodes", "1 node", "2 nodes"]
    assert (
        plural(1, "address", "addresses") == "1 address"
        and plural(3, "address", "addresses") == "3 addresses"
    )
    scenario = tmp_path / "s.yaml"
    cloud = (
        "cloud:\n  vpcs: [{id: vpc-1, cidr: 10.0.0.0/16}]\n"
        "  subnets: [{id: s-1, vpc: vpc-1, zone: z, cidr: 10.0.0.0/24}]\n"
        "  security_groups: [{id: sg-1, vpc: vpc-1}]\n"
        "  instances: [{id: i-1, type: m5.large, subnet: s-1, security_groups: [sg-1]}]\n"
        "nodes: [{name: node1, instance: i-1}]\n"
    )
    scenario.write_text(cloud + "steps: [{expect: {node1: {used: 0}}}]\n")
    assert main(["simulate", str(scenario)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "PASS: 1 expectation held over 1 step"
    scenario.write_text(cloud + "steps: [{converge: 10s}, {expect: {node1: {available: 8}}}, {expect: {}}]\n")
    assert main(["simulate", str(scenario)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "PASS: 2 expectations held over 3 steps"


def _eni_ipam(*argv: str) -> subprocess.CompletedProcess[str]:
    """The command line as a person runs it: its own process, its whole output."""
    return subprocess.run(
        [sys.executable, "-m", "eni_ipam.cli", *argv], capture_output=True, text=True, timeout=120
    )


@pytest.mark.system
def test_a_demo_port_asked_for_and_taken_says_metrics_are_off_and_the_demo_runs_on(port_in_use: int) -> None:
    done = _eni_ipam("demo", "--nodes", "3", "--duration", "1s", "--plain", "--port", str(port_in_use))
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    said = [line for line in done.stdout.splitlines() if line.startswith("metrics off")]
    assert said and said[0].startswith(f"metrics off: port {port_in_use} is taken")
    assert said[-1].endswith("--port N chooses another, --port 0 none")
    assert done.stdout.rstrip().endswith(said[-1]), "said again after the summary"
    assert "summary: 3 nodes" in done.stdout


@pytest.mark.system
def test_a_failed_simulation_says_why_its_node_got_nothing(tmp_path: Path) -> None:
    scenario = tmp_path / "typo.yaml"
    scenario.write_text(
        "cloud:\n  vpcs: [{id: vpc-1, cidr: 10.0.0.0/16}]\n"
        "  subnets: [{id: s-1, vpc: vpc-1, zone: z, cidr: 10.0.0.0/24}]\n"
        "  security_groups: [{id: sg-1, vpc: vpc-1}]\n"
        "  instances: [{id: i-1, type: c5.xlarg, subnet: s-1, security_groups: [sg-1]}]\n"
        "nodes: [{name: node1, instance: i-1, pre_allocate: 10}]\n"
        "steps: [{converge: 60s}, {expect: {node1: {available: 10}}}]\n"
    )
    done = _eni_ipam("simulate", str(scenario))
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert "steps[1].expect.node1.available: expected 10, got 0" in done.stderr  # the field
    why = next(line for line in done.stderr.splitlines() if "steps[1].expect.node1: why:" in line)
    assert "limits-unknown" in why and "instance type c5.xlarg" in why
    assert "did you mean c5.xlarge" in why  # the fix


@pytest.mark.system
def test_an_unknown_instance_type_for_max_pods_offers_the_closest() -> None:
    done = _eni_ipam("max-pods", "m5.larg")
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert "INSTANCE_TYPE: m5.larg not in the shipped EC2 table" in done.stderr
    assert "m5.larg: did you mean m5.large" in done.stderr
