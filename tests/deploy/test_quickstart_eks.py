"""docs/quickstart-eks.md works as written, as far as it can without AWS: its values file renders with
the real helm into a controller and agents whose configurations are valid and who land on the node
groups the page makes; the node group's CNI network is node.md's; its max-pods figure is what
``eni-ipam max-pods`` prints; its IAM command runs."""

from __future__ import annotations

import io
import json
import re
import shlex
import string
from contextlib import redirect_stdout
from typing import Any

import pytest
import yaml

from eni_ipam.agent.config import AgentConfig, agent_config_from_mapping
from eni_ipam.app.runconfig import load_config_mapping
from eni_ipam.cli import main
from tests.deploy.conftest import REPO_ROOT, pod_spec, render

PAGE = (REPO_ROOT / "docs" / "quickstart-eks.md").read_text()
SHELL = {
    "CLUSTER": "eni-demo",
    "REGION": "eu-west-1",
    "VERSION": "0.7.0",
    "ACCOUNT": "111122223333",
    "REPO": "111122223333.dkr.ecr.eu-west-1.amazonaws.com/eni-ipam",
    "VPC": "vpc-0a1b2c3d4e5f60718",
    "VPC_CIDR": "10.0.0.0/16",
    "GROUP": "sg-0a1b2c3d4e5f60718",
    "SUBNETS": "subnet-0a1b2c3d4e5f60718 subnet-0b1b2c3d4e5f60718",
}
"""What the page's shell variables hold in a plausible account."""


def heredoc(name: str) -> str:
    """The file the page writes with ``cat > NAME <<EOF``, as the shell expands it."""
    body = PAGE.split(f"cat > {name} <<EOF\n", 1)[1].split("\nEOF\n", 1)[0]
    return string.Template(body).safe_substitute(SHELL).replace("\\$", "$")


def quickstart_values() -> dict[str, Any]:
    data = yaml.safe_load(heredoc("values.yaml"))
    assert isinstance(data, dict)
    return data


def pods_group() -> dict[str, Any]:
    groups = yaml.safe_load(heredoc("pods.yaml"))["managedNodeGroups"]
    assert len(groups) == 1
    return dict(groups[0])


def test_the_run_configuration_of_the_values_is_valid() -> None:
    values = quickstart_values()
    config = load_config_mapping({"provider": "aws", **values["config"]})
    assert config.kubernetes.node_selector == pods_group()["labels"]


def test_the_agents_configuration_of_the_values_is_valid_and_routes_pods() -> None:
    agent = agent_config_from_mapping(quickstart_values()["agent"]["config"])
    assert agent.datapath.enabled and [str(c) for c in agent.datapath.vpc_cidrs] == [SHELL["VPC_CIDR"]]


def test_the_nodes_register_with_the_taint_the_agent_takes_off() -> None:
    taints = pods_group()["taints"]
    assert [(t["key"], t["effect"]) for t in taints] == [(AgentConfig().startup_taint, "NoSchedule")]


@pytest.mark.system
def test_the_chart_places_the_controller_and_the_agents_on_their_node_groups() -> None:
    docs = render(quickstart_values())
    controller = pod_spec(docs)
    assert controller["nodeSelector"]["eks.amazonaws.com/nodegroup"] == "system"
    agents = pod_spec(docs, "DaemonSet")
    assert agents["nodeSelector"]["eni-ipam.io/managed"] == "true"
    assert {"operator": "Exists"} in agents["tolerations"]  # the startup taint included
    configs = {d["metadata"]["name"]: d["data"]["config.yaml"] for d in docs if d["kind"] == "ConfigMap"}
    load_config_mapping(yaml.safe_load(configs["eni-ipam"]))
    agent_config_from_mapping(yaml.safe_load(configs["eni-ipam-agent"]))
    accounts = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ServiceAccount"}
    role = accounts["eni-ipam"]["metadata"]["annotations"]["eks.amazonaws.com/role-arn"]
    assert role == "arn:aws:iam::111122223333:role/eni-ipam-eni-demo"


def test_the_node_groups_cni_network_is_node_mds() -> None:
    commands = "\n".join(pods_group()["preBootstrapCommands"])
    written = json.loads(commands.split("<<'CNI'\n", 1)[1].split("\nCNI", 1)[0])
    node_md = (REPO_ROOT / "docs" / "node.md").read_text()
    documented = json.loads(
        node_md.split("### 4. The CNI network", 1)[1].split("```json\n")[1].split("```")[0]
    )
    assert written == documented


def test_the_max_pods_figure_is_what_the_command_prints() -> None:
    line = re.search(r"^eni-ipam max-pods (\S+)\s+# (\S+)\t(\d+)$", PAGE, re.M)
    assert line is not None
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["max-pods", line[1]]) == 0
    assert out.getvalue().split() == [line[2], line[3]]
    assert pods_group()["maxPodsPerNode"] == int(line[3])
    assert pods_group()["instanceType"] == line[1]


def test_the_iam_command_runs_with_the_pages_arguments() -> None:
    command = PAGE.split("eni-ipam aws-iam-policy ", 1)[1].split(" > eni-ipam-policy.json", 1)[0]
    command = command.replace("\\\n", " ").replace("$(printf -- '--subnet-id %s ' $SUBNETS)", "")
    argv = shlex.split(string.Template(command).substitute(SHELL))
    for subnet in SHELL["SUBNETS"].split():
        argv += ["--subnet-id", subnet]
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["aws-iam-policy", *argv]) == 0
    policy = json.loads(out.getvalue())
    assert SHELL["SUBNETS"].split()[1] in json.dumps(policy)
