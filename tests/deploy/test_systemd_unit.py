"""The node agent's systemd unit (deploy/systemd/eni-ipam-agent.service): confined, with room for its
connections, and still able to write every path it writes with the default and the documented
configurations. systemd itself (``systemd-analyze``) verifies the file and scores its exposure where it
is installed; the agent is started once without capabilities and with the unit's file limit, as the
unit runs it."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path, PurePosixPath

import pytest
import yaml

from eni_ipam.agent.config import AgentConfig, agent_config_from_mapping
from tests.deploy.conftest import REPO_ROOT

UNIT = REPO_ROOT / "deploy" / "systemd" / "eni-ipam-agent.service"
NODE_DOC = REPO_ROOT / "docs" / "node.md"
VENV_BIN = Path(sys.executable).parent


def settings(section: str) -> dict[str, list[str]]:
    """The settings of the unit's ``[section]``: every value of each key, in order."""
    found: dict[str, list[str]] = {}
    current = ""
    for raw in UNIT.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            current = line
        elif current == f"[{section}]":
            key, _, value = line.partition("=")
            found.setdefault(key.strip(), []).append(value.strip())
    return found


def service() -> dict[str, list[str]]:
    """``[Service]``'s settings: every value of each key, in order."""
    return settings("Service")


def last(key: str) -> str:
    return service()[key][-1]


def writable(path: str) -> bool:
    """Whether the unit lets the agent write under ``path``: a StateDirectory (under /var/lib), a
    RuntimeDirectory (under /run), or a ReadWritePaths entry holding it."""
    settings = service()
    roots = [f"/var/lib/{d}" for v in settings.get("StateDirectory", []) for d in v.split()]
    roots += [f"/run/{d}" for v in settings.get("RuntimeDirectory", []) for d in v.split()]
    roots += [p.lstrip("-+") for v in settings.get("ReadWritePaths", []) for p in v.split()]
    return any(PurePosixPath(path).is_relative_to(root) for root in roots)


def documented_configs() -> list[AgentConfig]:
    """The agent configurations docs/node.md gives for a podman and a Docker host."""
    blocks = documented_configs_text()
    assert len(blocks) >= 2, "docs/node.md: the podman and Docker hosts' configurations"
    return [agent_config_from_mapping(yaml.safe_load(block)) for block in blocks]


def test_the_unit_confines_the_agent() -> None:
    settings = service()
    expected = {
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "PrivateDevices": "yes",
        "ProtectKernelTunables": "yes",
        "ProtectKernelModules": "yes",
        "ProtectKernelLogs": "yes",
        "ProtectControlGroups": "yes",
        "RestrictSUIDSGID": "yes",
        "LockPersonality": "yes",
        "RestrictRealtime": "yes",
        "RestrictNamespaces": "yes",
        "MemoryDenyWriteExecute": "yes",
        "SystemCallArchitectures": "native",
        "CapabilityBoundingSet": "",
        "AmbientCapabilities": "",
    }
    assert {key: settings.get(key, ["(unset)"])[-1] for key in expected} == expected


def test_the_agent_may_hold_more_files_than_systemds_default_1024() -> None:
    limit = int(last("LimitNOFILE"))
    assert limit >= 65536
    bounds = AgentConfig.model_fields["socket_max_connections"].metadata
    assert limit >= max(getattr(bound, "le", 0) for bound in bounds)  # the most connections it may hold


def test_every_path_the_agent_writes_is_writable_under_the_unit() -> None:
    for config in (agent_config_from_mapping({}), *documented_configs()):
        written = {
            "state_dir": config.state_dir,
            "socket": str(PurePosixPath(config.socket).parent),
            "cni_cache_dir": config.cni_cache_dir,
        }
        assert {name: path for name, path in written.items() if not writable(path)} == {}


def test_docker_starting_starts_the_agent_before_it() -> None:
    """dockerd never starts again a container whose network's driver did not answer at its start: a
    `systemctl restart docker` while the agent is stopped must start the agent first."""
    wanted_by = [unit for value in settings("Install")["WantedBy"] for unit in value.split()]
    before = [unit for value in settings("Unit")["Before"] for unit in value.split()]
    assert "docker.service" in wanted_by and "docker.service" in before


def test_the_socket_the_unit_waits_for_is_the_documented_one() -> None:
    for config in (agent_config_from_mapping({}), *documented_configs()):
        assert config.socket in last("ExecStartPost")


def installed_here(directory: Path) -> Path:
    """The unit with its commands pointing at this interpreter's environment (``systemd-analyze
    verify`` checks that they are executables)."""
    text = UNIT.read_text().replace("/opt/eni-ipam/bin/", f"{VENV_BIN}/")
    path = directory / UNIT.name
    path.write_text(text)
    return path


@pytest.mark.system
@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_systemd_verifies_the_unit_and_rates_its_exposure_ok(tmp_path: Path) -> None:
    unit = installed_here(tmp_path)
    verify = subprocess.run(
        ["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60
    )
    assert verify.returncode == 0 and verify.stderr.strip() == "", verify.stderr
    security = subprocess.run(
        ["systemd-analyze", "security", "--offline=true", "--threshold=30", str(unit)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    score = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", security.stdout)
    assert score is not None, security.stdout + security.stderr
    assert float(score.group(1)) <= 3.0, security.stdout  # systemd's "OK" band; an unconfined unit is 9.6


@pytest.mark.system
@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv")
def test_the_agent_serves_without_any_capability_and_with_the_units_file_limit(tmp_path: Path) -> None:
    """As the unit starts it: uid 0 with an empty bounding set (so no capability after exec), no new
    privileges, LimitNOFILE; the documented Docker host's configuration, its paths in ``tmp_path``."""
    config = yaml.safe_load(documented_configs_text()[-1])
    config |= {
        "socket": str(tmp_path / "run" / "agent.sock"),
        "state_dir": str(tmp_path / "state"),
        "cni_cache_dir": str(tmp_path / "cni"),
        "server": {"host": "127.0.0.1", "port": free_port(), "probe_port": 0},
        "docker_socket": "",
    }
    (tmp_path / "agent.yaml").write_text(yaml.safe_dump(config))
    command = shlex.split(last("ExecStart").replace("/opt/eni-ipam/bin/", f"{VENV_BIN}/"))
    command[command.index("--config") + 1] = str(tmp_path / "agent.yaml")
    import resource

    # The unit's limit, or this host's hard limit when lower (raising it takes CAP_SYS_RESOURCE).
    limit = min(int(last("LimitNOFILE")), resource.getrlimit(resource.RLIMIT_NOFILE)[1])
    confined = ["prlimit", f"--nofile={limit}:{limit}", "--"]  # set first: raising it takes a capability
    confined += ["setpriv", "--bounding-set=-all", "--inh-caps=-all", "--no-new-privs", *command]
    agent = subprocess.Popen(confined, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.perf_counter() + 30
        while not _connects(tmp_path / "run" / "agent.sock"):
            assert agent.poll() is None, f"the agent exited {agent.returncode}: {_err(agent)}"
            assert time.perf_counter() < deadline, "the agent did not serve within 30 s"
            time.sleep(0.05)
        status = Path(f"/proc/{agent.pid}/status").read_text()
        assert re.search(r"^CapEff:\s+0+$", status, re.M), status
        assert f"Max open files            {limit}" in Path(f"/proc/{agent.pid}/limits").read_text()
    finally:
        agent.terminate()
        assert agent.wait(20) == 0, _err(agent)


def _err(process: subprocess.Popen[str]) -> str:
    return process.stderr.read()[-2000:] if process.stderr else ""


def documented_configs_text() -> list[str]:
    return re.findall(r"`/etc/eni-ipam-agent/config\.yaml`:\n\n```yaml\n(.*?)```", NODE_DOC.read_text(), re.S)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _connects(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX) as s:
        try:
            s.connect(str(path))
            return True
        except OSError:
            return False
