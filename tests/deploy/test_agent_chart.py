"""The node agent in the Helm chart (``agent.enabled``): a DaemonSet running ``eni-ipam agent`` with
the configuration file of eni_ipam/agent/config.py, the host directories that file names, RBAC equal to
AGENT_PERMISSIONS, the CNI plugin's install, and deploy/kubernetes/agent.yaml."""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import json
import os
import posixpath
import re
import subprocess
import sys
from typing import Any

import pytest
import yaml

from eni_ipam.agent.config import AgentConfig, agent_config_from_mapping, load_agent_config
from eni_ipam.errors import ConfigError
from eni_ipam.kube.permissions import AGENT_PERMISSIONS
from tests.deploy.conftest import (
    AGENT,
    CHART,
    NAMESPACE,
    RELEASE,
    REPO_ROOT,
    HelmError,
    controller_selectors,
    generated_manifests,
    one,
    render,
    render_notes,
    values,
)
from tests.deploy.conftest import container as shared_container
from tests.deploy.conftest import pod_spec as shared_pod_spec

AGENT_NAME = f"{RELEASE}-agent"
CONFIG_PATH = "/etc/eni-ipam-agent/config.yaml"
PLUGIN_IN_IMAGE = "/opt/eni-ipam/eni-ipam-cni"
AGENT_KINDS = [
    "ServiceAccount",
    "ConfigMap",
    "ClusterRole",
    "ClusterRoleBinding",
    "Service",
    "DaemonSet",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
]
NESTED_KEYS = {
    "server": {
        "host": "server_host",
        "port": "server_port",
        "probe_host": "server.probe_host",
        "probe_port": "server.probe_port",
        "max_connections": "server.max_connections",
        "read_timeout": "server.read_timeout",
    },
    "kubernetes": {"kubeconfig": "kubeconfig"},
}
"""Sections of the agent's file format → their keys → the AgentConfig field each one sets."""
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def agent(overrides: dict[str, Any] | None = None, **kwargs: Any) -> list[dict[str, Any]]:
    """The chart rendered with the agent enabled and ``overrides`` under ``agent``."""
    return render({"agent": {"enabled": True, **(overrides or {})}}, **kwargs)


def is_agents(doc: dict[str, Any]) -> bool:
    return doc["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "node-agent"


def agent_objects(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in docs if is_agents(d)]


def pod_spec(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return shared_pod_spec(docs, "DaemonSet")


def container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return shared_container(docs, "DaemonSet")


def init_container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (init,) = pod_spec(docs)["initContainers"]
    return init


def config_text(docs: list[dict[str, Any]]) -> str:
    return one(agent_objects(docs), "ConfigMap")["data"]["config.yaml"]


def host_paths(docs: list[dict[str, Any]], ctr: dict[str, Any]) -> dict[str, tuple[str, bool]]:
    """mountPath → (host path, read-only) for each hostPath volume ``ctr`` mounts."""
    volumes = {v["name"]: v for v in pod_spec(docs)["volumes"]}
    return {
        m["mountPath"]: (volumes[m["name"]]["hostPath"]["path"], m.get("readOnly", False))
        for m in ctr["volumeMounts"]
        if "hostPath" in volumes[m["name"]]
    }


def grants(role: dict[str, Any]) -> set[tuple[str, str, str]]:
    out: set[tuple[str, str, str]] = set()
    for rule in role["rules"]:
        assert set(rule) == {"apiGroups", "resources", "verbs"}, rule  # no resourceNames, no URLs
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    assert "*" not in (group, resource, verb), rule
                    out.add((group, resource, verb))
    return out


def file_format_keys() -> set[str]:
    """The top-level keys of the agent's configuration file, from AgentConfig's fields."""
    fields = set(AgentConfig.model_fields)
    assert set(NESTED_KEYS) <= fields
    return fields


# -- on and off ----------------------------------------------------------------------------------


@pytest.mark.system
def test_the_agent_is_off_by_default(default_docs, full_docs):
    assert values()["agent"]["enabled"] is False
    for docs in (default_docs, full_docs):
        assert not agent_objects(docs)
        assert not any(AGENT_NAME in d["metadata"]["name"] for d in docs)
        assert "DaemonSet" not in {d["kind"] for d in docs}
    notes = render_notes(None)
    assert "node agent" not in notes and "eni-ipam-cni" not in notes


@pytest.mark.system
def test_enabled_it_adds_exactly_the_agent_objects_and_leaves_the_rest(agent_docs, default_docs):
    objects = agent_objects(agent_docs)
    assert [d["kind"] for d in objects] == AGENT_KINDS  # Helm's install order
    assert {d["metadata"]["name"] for d in objects} == {AGENT_NAME}
    assert [d for d in agent_docs if not is_agents(d)] == default_docs
    assert "DaemonSet" in render_notes(AGENT) and "python3 >= 3.11" in render_notes(AGENT)


def test_names_scopes_and_labels(agent_docs):
    for doc in agent_objects(agent_docs):
        name = doc["metadata"]["name"]
        assert len(name) <= 63 and DNS1123_SUBDOMAIN.match(name), (doc["kind"], name)
        if doc["kind"].startswith(("ClusterRole", "ValidatingAdmissionPolicy")):  # cluster-scoped
            assert "namespace" not in doc["metadata"]
        else:
            assert doc["metadata"]["namespace"] == NAMESPACE
    ds = one(agent_docs, "DaemonSet")
    for labels in (ds["metadata"]["labels"], ds["spec"]["template"]["metadata"]["labels"]):
        assert labels["app.kubernetes.io/instance"] == RELEASE
        assert labels["app.kubernetes.io/part-of"] == "eni-ipam"
        for key, value in labels.items():
            assert isinstance(value, str) and len(value) <= 63 and LABEL_VALUE.match(value), (key, value)


def test_the_daemonset_selects_its_pods_and_the_controllers_selectors_do_not(agent_docs):
    docs = agent_docs
    pods = one(docs, "DaemonSet")["spec"]["template"]["metadata"]["labels"]
    selector = one(docs, "DaemonSet")["spec"]["selector"]["matchLabels"]
    assert selector and selector.items() <= pods.items()
    assert set(selector) == {"app.kubernetes.io/name", "app.kubernetes.io/instance"}
    deployment = one(docs, "Deployment")
    for owner, other in controller_selectors(docs).items():
        assert not other.items() <= pods.items(), f"the controller's {owner} selects agent pods"
    assert not selector.items() <= deployment["spec"]["template"]["metadata"]["labels"].items()


@pytest.mark.system
def test_names_follow_the_release_and_stay_dns_labels():
    renamed = agent_objects(render({**AGENT, "fullnameOverride": "ipam"}))
    assert {d["metadata"]["name"] for d in renamed} == {"ipam-agent"}
    # helm's longest release name: the full name is 62 characters, so "-agent" must cut it
    docs = agent(release_name="r" * 53)
    names = {d["metadata"]["name"] for d in agent_objects(docs)}
    assert len(names) == 1 and len(names.pop()) <= 63
    controller = one(docs, "Deployment")["metadata"]["name"]
    assert one(docs, "DaemonSet")["metadata"]["name"] != controller


# -- RBAC ----------------------------------------------------------------------------------------


def test_the_cluster_role_grants_exactly_the_agent_permissions(agent_docs):
    assert grants(one(agent_objects(agent_docs), "ClusterRole")) == set(AGENT_PERMISSIONS)


def test_the_binding_gives_the_role_to_the_agents_service_account(agent_docs):
    objects = agent_objects(agent_docs)
    account = one(objects, "ServiceAccount")["metadata"]
    binding = one(objects, "ClusterRoleBinding")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["name"], "namespace": NAMESPACE}
    ]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": one(objects, "ClusterRole")["metadata"]["name"],
    }
    pod = pod_spec(agent_docs)
    assert pod["serviceAccountName"] == account["name"] == AGENT_NAME
    assert pod["automountServiceAccountToken"] is True
    controller_account = one([d for d in agent_docs if not is_agents(d)], "ServiceAccount")["metadata"][
        "name"
    ]
    assert account["name"] != controller_account


@pytest.mark.system
def test_rbac_create_false_leaves_the_roles_to_the_operator():
    kinds = [d["kind"] for d in agent_objects(render({**AGENT, "rbac": {"create": False}}))]
    # the admission policy is not RBAC: it narrows whatever roles the operator grants
    assert kinds == [
        "ServiceAccount",
        "ConfigMap",
        "Service",
        "DaemonSet",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ]


# -- the configuration file ----------------------------------------------------------------------


def test_the_configmap_loads_with_the_agent_loader_and_is_the_code_defaults(agent_docs, tmp_path):
    text = config_text(agent_docs)
    assert agent_config_from_mapping(yaml.safe_load(text)) == AgentConfig()
    (tmp_path / "config.yaml").write_text(text)
    assert load_agent_config(tmp_path / "config.yaml") == AgentConfig()


def test_the_config_keys_in_values_are_the_file_formats_keys():
    config = values()["agent"]["config"]
    assert set(config) == file_format_keys()
    for section, keys in NESTED_KEYS.items():
        assert set(config[section]) == set(keys)
    assert config["pools"] == {}
    # each key is one the loader takes, and sets the field it is meant to
    for key in config:
        agent_config_from_mapping({key: config[key]})
    numbers: dict[str, Any] = {"port": 4242, "probe_port": 4343, "max_connections": 42, "read_timeout": 4.5}
    for section, keys in NESTED_KEYS.items():
        for key, field in keys.items():
            given = numbers.get(key, f"/{key}")
            read: Any = agent_config_from_mapping({section: {key: given}})
            for name in field.split("."):
                read = getattr(read, name)
            assert read == given
    with pytest.raises(ConfigError):
        agent_config_from_mapping({"not_a_key": 1})


def comment_above(lines: list[str], n: int) -> str:
    """The comment lines right above line ``n``, joined."""
    above: list[str] = []
    while n > 0 and lines[n - 1].lstrip().startswith("#"):
        n -= 1
        above.insert(0, lines[n].lstrip("# "))
    return " ".join(above)


def test_every_agent_config_key_is_commented_with_its_default():
    lines = (CHART / "values.yaml").read_text().splitlines()
    start = lines.index("agent:")
    config = values()["agent"]["config"]
    keys = [f"    {key}:" for key in config] + [f"      {key}:" for key in config["kubernetes"]]
    for key in keys:
        n = next(i for i in range(start, len(lines)) if lines[i].startswith(key))
        comment = comment_above(lines, n)
        assert "default" in comment.lower(), f"agent.config: {key.strip()} has no comment giving its default"


@pytest.mark.system
def test_a_bad_agent_config_is_refused_by_the_loader():
    text = config_text(agent({"config": {"report_interval": "soon"}}))
    with pytest.raises(ConfigError, match="report_interval"):
        agent_config_from_mapping(yaml.safe_load(text))


@pytest.mark.system
def test_the_config_checksum_follows_the_configmap(agent_docs):
    def checksum(docs: list[dict[str, Any]]) -> str:
        return one(docs, "DaemonSet")["spec"]["template"]["metadata"]["annotations"]["checksum/config"]

    text = config_text(agent_docs)
    assert checksum(agent_docs) == hashlib.sha256(text.removesuffix("\n").encode()).hexdigest()
    assert checksum(agent({"config": {"log_level": "debug"}})) != checksum(agent_docs)


# -- the pod -------------------------------------------------------------------------------------


def test_the_container_runs_the_agent_on_the_mounted_configuration(agent_docs):
    ctr, pod = container(agent_docs), pod_spec(agent_docs)
    assert ctr["command"] + ctr["args"] == [
        "eni-ipam-agent",
        "--config",
        CONFIG_PATH,
        "--server-host=127.0.0.1",
    ]
    assert "--node" not in ctr["args"]  # NODE_NAME names the node
    mount = next(m for m in ctr["volumeMounts"] if m["mountPath"] == posixpath.dirname(CONFIG_PATH))
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    assert mount["readOnly"] is True
    assert volume["configMap"]["name"] == one(agent_objects(agent_docs), "ConfigMap")["metadata"]["name"]
    assert ctr["image"] == one(agent_docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["image"]


@pytest.mark.system
def test_node_name_comes_from_the_downward_api_and_extra_env_follows(agent_docs):
    env = container(agent_docs)["env"]
    assert env == [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]
    docs = agent({"extraEnv": [{"name": "TZ", "value": "UTC"}], "listen": "node"})
    assert [e["name"] for e in container(docs)["env"]] == ["NODE_NAME", "HOST_IP", "TZ"]


def test_volumes_follow_the_configured_paths(agent_docs):
    config = AgentConfig()
    mounts = host_paths(agent_docs, container(agent_docs))
    socket_dir = posixpath.dirname(config.socket)
    assert mounts == {
        socket_dir: (socket_dir, False),
        config.state_dir: (config.state_dir, False),
        config.cni_cache_dir: (config.cni_cache_dir, True),
    }
    assert (socket_dir, config.state_dir, config.cni_cache_dir) == (
        "/run/eni-ipam",
        "/var/lib/eni-ipam",
        "/var/lib/cni/results",
    )
    types = {
        v["hostPath"]["path"]: v["hostPath"]["type"]
        for v in pod_spec(agent_docs)["volumes"]
        if "hostPath" in v
    }
    assert types == dict.fromkeys(
        [socket_dir, config.state_dir, config.cni_cache_dir, "/opt/cni/bin"], "DirectoryOrCreate"
    )


@pytest.mark.system
def test_changed_paths_move_the_volumes():
    paths = {
        "socket": "/var/run/ipam/api.sock",
        "state_dir": "/data/ipam",
        "cni_cache_dir": "/var/lib/cni/cache",
    }
    docs = agent({"config": paths})
    assert host_paths(docs, container(docs)) == {
        "/var/run/ipam": ("/var/run/ipam", False),
        "/data/ipam": ("/data/ipam", False),
        "/var/lib/cni/cache": ("/var/lib/cni/cache", True),
    }
    # the socket inside the state directory: one volume, not two mounts at one path
    docs = agent({"config": {"socket": "/var/lib/eni-ipam/agent.sock"}})
    mounts = [m["mountPath"] for m in container(docs)["volumeMounts"]]
    assert len(mounts) == len(set(mounts)) and "/var/lib/eni-ipam" in mounts
    assert len([v for v in pod_spec(docs)["volumes"] if "hostPath" in v]) == 3


@pytest.mark.system
def test_probes_ask_their_own_listener_on_the_loopback_address(agent_docs):
    """kubelet's probes have a listener of their own (decision 0043): no flood of agent-http takes a
    slot they need, and on the loopback address no pod reaches it."""
    ctr = container(agent_docs)
    assert ctr["ports"] == [
        {"name": "agent-http", "containerPort": AgentConfig().server_port, "protocol": "TCP"},
        {"name": "agent-probes", "containerPort": AgentConfig().server.probe_port, "protocol": "TCP"},
    ]
    assert (AgentConfig().server_port, AgentConfig().server.probe_port) == (9091, 9093)
    assert AgentConfig().server.probe_host == "127.0.0.1"
    probes = {kind: ctr[kind]["httpGet"] for kind in ("livenessProbe", "readinessProbe")}
    assert probes == {
        "livenessProbe": {"path": "/healthz", "port": "agent-probes", "host": "127.0.0.1"},
        "readinessProbe": {"path": "/readyz", "port": "agent-probes", "host": "127.0.0.1"},
    }
    moved = container(agent({"config": {"server": {"port": 9191, "probe_port": 9193}}}))
    assert [p["containerPort"] for p in moved["ports"]] == [9191, 9193]
    assert moved["livenessProbe"]["httpGet"]["port"] == "agent-probes"


@pytest.mark.system
def test_without_the_host_network_the_probes_are_served_on_the_pods_address():
    docs = agent({"hostNetwork": False})
    assert "host" not in container(docs)["readinessProbe"]["httpGet"]  # kubelet probes the pod's address
    assert yaml.safe_load(one(agent_objects(docs), "ConfigMap")["data"]["config.yaml"])["server"][
        "probe_host"
    ] == ("0.0.0.0")


@pytest.mark.system
def test_host_network_scheduling_and_updates(agent_docs):
    pod = pod_spec(agent_docs)
    assert pod["hostNetwork"] is True and pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert pod["priorityClassName"] == "system-node-critical"
    assert pod["tolerations"] == [{"operator": "Exists"}]
    assert pod["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert one(agent_docs, "DaemonSet")["spec"]["updateStrategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 1},
    }
    assert container(agent_docs)["resources"] == values()["agent"]["resources"]
    docs = agent({"hostNetwork": False, "priorityClassName": "", "tolerations": [], "nodeSelector": None})
    pod = pod_spec(docs)
    assert pod["hostNetwork"] is False
    assert not {"dnsPolicy", "priorityClassName", "tolerations", "nodeSelector"} & set(pod)


def test_security_root_without_capabilities(agent_docs):
    pod = pod_spec(agent_docs)
    assert not pod.get("hostPID") and not pod.get("hostIPC")
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    for ctr in (container(agent_docs), init_container(agent_docs)):
        sc = ctr["securityContext"]
        assert sc["runAsUser"] == 0 and sc["runAsNonRoot"] is False  # the image's user is 65532
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["privileged"] is False
        assert sc["readOnlyRootFilesystem"] is True
        assert sc["capabilities"] == {"drop": ["ALL"]}
        assert sc["seccompProfile"] == {"type": "RuntimeDefault"}


@pytest.mark.system
def test_the_datapath_adds_exactly_net_admin_to_the_agent_container_and_nothing_else() -> None:
    datapath = {"enabled": True, "vpc_cidrs": ["10.0.0.0/16"]}
    docs = agent({"config": {"datapath": datapath}})
    sc = container(docs)["securityContext"]
    assert sc["capabilities"] == {"drop": ["ALL"], "add": ["NET_ADMIN"]}
    assert sc["privileged"] is False and sc["allowPrivilegeEscalation"] is False
    assert init_container(docs)["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert pod_spec(docs)["hostNetwork"] is True
    config = agent_config_from_mapping(yaml.safe_load(config_text(docs)))
    assert config.datapath.enabled and [str(c) for c in config.datapath.vpc_cidrs] == ["10.0.0.0/16"]


@pytest.mark.system
def test_the_datapath_without_the_host_network_is_refused_at_render() -> None:
    with pytest.raises(HelmError, match=r"needs agent\.hostNetwork: true"):
        agent({"hostNetwork": False, "config": {"datapath": {"enabled": True, "vpc_cidrs": ["10.0.0.0/16"]}}})


# -- the CNI plugin ------------------------------------------------------------------------------


def test_the_init_container_copies_the_plugin_to_the_cni_bin_dir(agent_docs):
    init = init_container(agent_docs)
    assert init["image"] == container(agent_docs)["image"]
    assert init["command"] == ["sh", "-c"]
    (script,) = init["args"]
    assert script.startswith(f"cp {PLUGIN_IN_IMAGE} /opt/cni/bin/") and script.endswith(
        " /opt/cni/bin/eni-ipam-cni"
    )
    assert host_paths(agent_docs, init) == {"/opt/cni/bin": ("/opt/cni/bin", False)}
    assert "/opt/cni/bin" not in host_paths(agent_docs, container(agent_docs))


@pytest.mark.system
def test_the_install_script_replaces_the_plugin_on_the_host(tmp_path):
    bin_dir = tmp_path / "host" / "cni-bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "eni-ipam-cni").write_text("old")
    plugin = tmp_path / "image-plugin"
    plugin.write_text("#!/bin/sh\necho new\n")
    plugin.chmod(0o755)
    (script,) = init_container(agent({"cniBinDir": str(bin_dir)}))["args"]
    subprocess.run(["sh", "-c", script.replace(PLUGIN_IN_IMAGE, str(plugin))], check=True)
    installed = bin_dir / "eni-ipam-cni"
    assert installed.read_text() == plugin.read_text() and os.access(installed, os.X_OK)
    assert sorted(p.name for p in bin_dir.iterdir()) == ["eni-ipam-cni"]


@pytest.mark.system
def test_install_cni_false_installs_nothing():
    pod = pod_spec(agent({"installCNI": False}))
    assert "initContainers" not in pod
    assert [v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v] == [
        "/run/eni-ipam",
        "/var/lib/eni-ipam",
        "/var/lib/cni/results",
    ]


def test_the_image_builds_the_plugin_the_init_container_copies():
    dockerfile = (REPO_ROOT / "Dockerfile").read_text()
    final_at = dockerfile.rindex("\nFROM ")
    builder, final = dockerfile[:final_at], dockerfile[final_at:]
    runs = [re.sub(r"\\\n\s*", "", run) for run in re.findall(r"^RUN ((?:.*\\\n)*.*)$", builder, re.M)]
    (build,) = [run for run in runs if "build_cni_plugin.py" in run]
    assert f"--output {PLUGIN_IN_IMAGE}" in build and "--interpreter" not in build  # /usr/bin/env python3
    assert "COPY scripts/build_cni_plugin.py" in builder
    assert f"COPY --from=builder {PLUGIN_IN_IMAGE} {PLUGIN_IN_IMAGE}" in final
    assert final.index(PLUGIN_IN_IMAGE) < final.index("\nUSER ")


@pytest.mark.system
def test_the_plugin_is_standard_library_only_and_runs_on_any_interpreter(tmp_path):
    source = REPO_ROOT / "eni_ipam" / "agent" / "cni.py"
    imported: set[str] = set()
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "a relative import would not survive the build"
            imported.add((node.module or "").split(".")[0])
    assert imported and imported <= set(sys.stdlib_module_names) | {"__future__"}, imported
    target = tmp_path / "eni-ipam-cni"
    script = REPO_ROOT / "scripts" / "build_cni_plugin.py"
    subprocess.run(
        [sys.executable, str(script), "--output", str(target), "--interpreter", sys.executable], check=True
    )
    # Another interpreter (another bytecode magic): the plugin compiles its source instead.
    lines = target.read_text().split("\n")
    assert lines[0].startswith(f"#!{sys.executable} -ISc") and len(lines[0]) <= 127, lines[0]
    assert lines[2] == f"#{importlib.util.MAGIC_NUMBER.hex()}", "the magic is the third line"
    lines[2] = "#00000000"
    foreign = tmp_path / "foreign"
    foreign.write_text("\n".join(lines))
    foreign.chmod(0o755)
    # Exec'd (the interpreter line reads the launcher), and run as a script (Python compiles the file).
    for command in ([str(target)], [str(foreign)], [sys.executable, "-I", "-S", str(target)]):
        out = subprocess.run(
            command,
            env={"CNI_COMMAND": "VERSION", "PATH": os.environ.get("PATH", "")},
            input='{"cniVersion": "1.1.0"}',
            capture_output=True,
            text=True,
            check=True,
        )
        assert json.loads(out.stdout) == {
            "cniVersion": "1.1.0",
            "supportedVersions": ["0.4.0", "1.0.0", "1.1.0"],
        }


@pytest.mark.system
def test_the_plugin_build_refuses_an_interpreter_line_linux_would_split_wrongly(tmp_path):
    script = REPO_ROOT / "scripts" / "build_cni_plugin.py"
    for bad in ("python3", "/usr/bin/python3 -X dev"):
        done = subprocess.run(
            [sys.executable, str(script), "--output", str(tmp_path / "p"), "--interpreter", bad],
            capture_output=True,
            text=True,
        )
        assert done.returncode == 2 and "--interpreter" in done.stderr
        assert not (tmp_path / "p").exists()


# -- generated manifests and docs ----------------------------------------------------------------


@pytest.mark.system
def test_deploy_kubernetes_agent_yaml_is_up_to_date(agent_docs):
    path = REPO_ROOT / "deploy" / "kubernetes" / "agent.yaml"
    text = path.read_text()
    assert text == generated_manifests()["agent.yaml"], (
        "deploy/kubernetes/agent.yaml is stale: run python scripts/render_manifests.py"
    )
    assert text.startswith("# Generated by scripts/render_manifests.py")
    assert [d for d in yaml.safe_load_all(text) if d] == agent_objects(agent_docs)


def test_the_docs_set_only_values_that_exist():
    text = (REPO_ROOT / "docs" / "node.md").read_text()
    assert "python3" in text and "3.11" in text
    paths = re.findall(r"--set(?:-string)? ([A-Za-z0-9_.\\/-]+?)=", text)
    assert any(p == "agent.enabled" for p in paths)
    for path in paths:
        node: Any = values()
        keys = re.split(r"(?<!\\)\.", path)
        for key in keys[:-1]:
            assert isinstance(node, dict) and key in node, f"docs/node.md: --set {path}: no {key!r}"
            node = node[key]
        assert isinstance(node, dict) and (not node or keys[-1].replace("\\", "") in node), path


# -- metrics -------------------------------------------------------------------------------------


def listening(ctr: dict[str, Any]) -> tuple[str | None, str | None, bool]:
    """(the --server-host flag, the probes' host, whether HOST_IP is declared) of the agent's container."""
    flags = [a.removeprefix("--server-host=") for a in ctr["args"] if a.startswith("--server-host=")]
    hosts = {ctr[p]["httpGet"].get("host") for p in ("livenessProbe", "readinessProbe")}
    assert len(flags) <= 1 and len(hosts) == 1, (flags, hosts)
    return (flags[0] if flags else None), hosts.pop(), "HOST_IP" in [e["name"] for e in ctr["env"]]


@pytest.mark.system
def test_on_the_host_network_the_endpoint_listens_on_the_loopback_address_unless_prometheus_scrapes_it(
    agent_docs,
):
    """Any pod reaches a port on the node's address: only a scraped agent listens there."""
    assert listening(container(agent_docs)) == ("127.0.0.1", "127.0.0.1", False)
    scraped = render({"agent": {"enabled": True}, "serviceMonitor": {"enabled": True}})
    # Kubernetes expands $(HOST_IP) in args only from a variable the container declares. The probes
    # stay on their own listener on the loopback address, wherever /metrics listens.
    assert listening(container(scraped)) == ("$(HOST_IP)", "127.0.0.1", True)
    env = container(scraped)["env"]
    assert {"name": "HOST_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}} in env
    assert listening(container(agent({"listen": "node"}))) == ("$(HOST_IP)", "127.0.0.1", True)
    loopback = render({"agent": {"enabled": True, "listen": "loopback"}, "serviceMonitor": {"enabled": True}})
    assert listening(container(loopback)) == ("127.0.0.1", "127.0.0.1", False)
    assert listening(container(agent({"listen": "config"}))) == (None, "127.0.0.1", False)
    # on the pod network the pod has an address of its own: config.server.host, whatever listen says
    for choice in ("auto", "loopback", "node"):
        assert listening(container(agent({"hostNetwork": False, "listen": choice}))) == (None, None, False)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"listen": "public"}, 'agent.listen must be auto, loopback, node or config, got "public"'),
        ({"listenOnNodeAddress": False}, "agent.listenOnNodeAddress was replaced by agent.listen"),
    ],
)
@pytest.mark.system
def test_a_listen_choice_the_chart_does_not_know_is_refused_by_name(overrides, message):
    with pytest.raises(HelmError, match=re.escape(message)):
        agent(overrides)


@pytest.mark.system
def test_the_headless_service_exposes_every_agents_metrics_port(agent_docs):
    service = one(agent_objects(agent_docs), "Service")
    pods = one(agent_docs, "DaemonSet")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"].items() <= pods.items()
    assert service["spec"]["ports"] == [
        {
            "name": "agent-http",
            "port": AgentConfig().server_port,
            "targetPort": "agent-http",
            "protocol": "TCP",
        }
    ]
    moved = one(agent_objects(agent({"config": {"server": {"port": 9191}}})), "Service")
    assert moved["spec"]["ports"][0]["port"] == 9191
    # the controller's Service never lists an agent, nor the agent's Service a controller
    controller = one([d for d in agent_docs if not is_agents(d)], "Service")["spec"]["selector"]
    assert not controller.items() <= pods.items()
    deployment_pods = one(agent_docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert not service["spec"]["selector"].items() <= deployment_pods.items()


@pytest.mark.system
def test_the_service_monitor_switch_scrapes_the_agents_too():
    monitoring = {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}, "interval": "15s"}}
    docs = render({**AGENT, **monitoring})
    monitors = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ServiceMonitor"}
    assert set(monitors) == {RELEASE, AGENT_NAME}
    monitor = monitors[AGENT_NAME]
    service = one(agent_objects(docs), "Service")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert monitor["spec"]["endpoints"] == [
        {"port": "agent-http", "path": "/metrics", "interval": "15s", "scrapeTimeout": "10s"}
    ]
    controller_monitor = monitors[RELEASE]["spec"]["selector"]["matchLabels"]
    assert not controller_monitor.items() <= service["metadata"]["labels"].items()
    # without the agent, one ServiceMonitor; without the switch, none
    assert [
        d["metadata"]["name"]
        for d in render({"serviceMonitor": {"enabled": True}})
        if d["kind"] == "ServiceMonitor"
    ] == [RELEASE]
    assert not [d for d in agent() if d["kind"] == "ServiceMonitor"]


@pytest.mark.system
def test_the_notes_warn_when_the_init_containers_image_is_not_pinned_by_digest():
    """The init container writes a program the host runs as root: its image should be pinned."""
    assert "image.digest is empty" in render_notes(AGENT)
    digest = "sha256:" + "a" * 64
    pinned = render({**AGENT, "image": {"digest": digest}})
    (init,) = one(pinned, "DaemonSet")["spec"]["template"]["spec"]["initContainers"]
    assert init["image"].endswith(f"@{digest}")
    assert "image.digest is empty" not in render_notes({**AGENT, "image": {"digest": digest}})
    assert "image.digest is empty" not in render_notes(
        {**AGENT, "agent": {"enabled": True, "installCNI": False}}
    )
