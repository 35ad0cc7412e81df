"""The chart's alert rules under promtool: ``promtool check rules`` on the rendered PrometheusRule, and
``promtool test rules`` on the unit tests in tests/deploy/promtool/. Each alert fires when someone has to
act and stays quiet otherwise: a scale-up, pod churn, a leader hand-over, an agent scraped beside the
controllers, occasional throttling or failures (docs/decisions/0010-alerts-that-need-action.md).

The rules are rendered by the real helm (``conftest.render``) with the chart's default thresholds: the
tests judge what ships. Each test file names its rule file by a relative path, which promtool resolves
against the test file's directory, so the rendered rules are written beside copies of the test files in
``tmp_path``. promtool compares annotations exactly, so ``rules.yaml`` leaves them out, and the
behaviour files need not repeat every description. ``rules-annotated.yaml`` keeps them, for
annotations.yaml.

promtool is Debian's (``make prometheus-tools``). Without it, these tests skip, saying so.
"""

from __future__ import annotations

import copy
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.conftest import one, render

pytestmark = pytest.mark.system


PROMTOOL_TESTS = Path(__file__).parent / "promtool"
TEST_FILES = sorted(PROMTOOL_TESTS.glob("*.yaml"))
RULES = "rules.yaml"
"""The rendered rules without annotations, as the behaviour files name them."""
ANNOTATED_RULES = "rules-annotated.yaml"
"""The rendered rules as shipped, as annotations.yaml names them."""
RULE_VALUES: dict[str, Any] = {"prometheusRule": {"enabled": True}, "agent": {"enabled": True}}
"""The chart's defaults, PrometheusRule on: the thresholds under test are the shipped ones."""
PROMTOOL_TIMEOUT = 50
"""Seconds one promtool run may take (all the files take about 5 s), under pytest's 60 s timeout."""


def promtool() -> str:
    """promtool's path; skip the test, saying why, when it is not installed."""
    path = shutil.which("promtool")
    if path is None:
        reason = "promtool is missing: `make prometheus-tools` installs Debian's prometheus package"
        print(reason)
        pytest.skip(reason)
    return path


def rendered_spec() -> dict[str, Any]:
    """The spec of the PrometheusRule ``helm template`` renders: a plain Prometheus rule file."""
    spec: dict[str, Any] = one(render(RULE_VALUES), "PrometheusRule")["spec"]
    return spec


def alerts(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Alert name → its rule."""
    return {rule["alert"]: rule for group in spec["groups"] for rule in group["rules"] if "alert" in rule}


def without_annotations(spec: dict[str, Any]) -> dict[str, Any]:
    stripped = copy.deepcopy(spec)
    for group in stripped["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    return stripped


def workspace(directory: Path, spec: dict[str, Any]) -> Path:
    """``directory`` with the rules of ``spec`` in RULES and ANNOTATED_RULES and a copy of every test
    file beside them."""
    (directory / ANNOTATED_RULES).write_text(yaml.safe_dump(spec, sort_keys=False))
    (directory / RULES).write_text(yaml.safe_dump(without_annotations(spec), sort_keys=False))
    for test_file in TEST_FILES:
        shutil.copy(test_file, directory / test_file.name)
    return directory


def run_promtool(*args: str, cwd: Path) -> tuple[int, str]:
    """promtool's exit status and its whole output (it reports failures on both streams)."""
    done = subprocess.run(
        [promtool(), *args], cwd=cwd, capture_output=True, text=True, check=False, timeout=PROMTOOL_TIMEOUT
    )
    return done.returncode, done.stdout + done.stderr


def promtool_cases() -> list[tuple[str, str, str, bool]]:
    """(test file, test group, alert name, whether it is expected firing) of every alert_rule_test."""
    cases = []
    for test_file in TEST_FILES:
        for group in yaml.safe_load(test_file.read_text())["tests"]:
            for case in group.get("alert_rule_test", []):
                firing = bool(case.get("exp_alerts"))
                cases.append((test_file.name, group["name"], case["alertname"], firing))
    return cases


# -- the rules as rendered ---------------------------------------------------------------------------


def test_the_rendered_rules_pass_promtool_check_rules(tmp_path: Path) -> None:
    spec = rendered_spec()
    workspace(tmp_path, spec)
    for rule_file in (ANNOTATED_RULES, RULES):
        status, output = run_promtool("check", "rules", rule_file, cwd=tmp_path)
        assert status == 0, f"promtool check rules {rule_file}:\n{output}"
        rules = sum(len(group["rules"]) for group in spec["groups"])  # eni_ipam:rules_evaluated too
        assert rules == len(alerts(spec)) + 1 and f"SUCCESS: {rules} rules found" in output, output


@pytest.mark.parametrize("test_file", TEST_FILES, ids=[f.stem for f in TEST_FILES])
def test_the_alerts_fire_exactly_when_the_promtool_tests_expect(tmp_path: Path, test_file: Path) -> None:
    workspace(tmp_path, rendered_spec())
    status, output = run_promtool("test", "rules", test_file.name, cwd=tmp_path)
    assert status == 0, f"promtool test rules {test_file.name}:\n{output}"
    # A rule file that is not there is only a warning to promtool, and then no alert fires at all.
    assert "no file match" not in output, output


# -- the test files themselves -----------------------------------------------------------------------


def test_every_test_file_reads_a_rendered_rule_file_and_names_its_groups() -> None:
    for test_file in TEST_FILES:
        tests = yaml.safe_load(test_file.read_text())
        assert tests["rule_files"] in ([RULES], [ANNOTATED_RULES]), test_file.name
        names = [group["name"] for group in tests["tests"]]
        assert all(names) and len(names) == len(set(names)), f"{test_file.name}: unnamed or repeated groups"


def test_every_alert_has_a_case_expecting_it_firing_and_one_expecting_it_quiet() -> None:
    names = set(alerts(rendered_spec()))
    cases = promtool_cases()
    tested = {alert for _, _, alert, _ in cases}
    assert tested <= names, f"promtool tests of alerts the chart does not have: {sorted(tested - names)}"
    for expected, word in ((True, "firing"), (False, "quiet")):
        covered = {alert for _, _, alert, firing in cases if firing is expected}
        assert names - covered == set(), f"alerts no promtool test expects {word}"


# -- the promtool tests can fail -----------------------------------------------------------------------

REVERTED = [
    pytest.param(
        "EniIpamSubnetExhaustionPredicted",
        # The rule before decision 0010: the trend alone, over whatever the window holds.
        "max by (subnet, zone) (eni_ipam_available_ips_per_subnet) > 0 and max by (subnet, zone) "
        "(predict_linear(eni_ipam_available_ips_per_subnet[6h], 14400)) <= 0",
        "30m",
        "subnets.yaml",
        "a scale-up from the start (1019 to 619 free of a /22 in ten minutes, then flat) never fires "
        "exhaustion",
        id="exhaustion-trend-alone",
    ),
    pytest.param(
        "EniIpamNodesInDeficit",
        'max(eni_ipam_nodes{category="in-deficit"}) > 0',
        "5m",
        "nodes.yaml",
        "pod churn moving a deficit to another node every minute does not fire deficit",
        id="deficit-cluster-count",
    ),
    pytest.param(
        "EniIpamNodesAtCapacity",
        'max(eni_ipam_nodes{category="at-capacity"}) > 0',
        "30m",
        "nodes.yaml",
        "a full node that needs nothing more does not fire capacity",
        id="capacity-cluster-count",
    ),
    pytest.param(
        "EniIpamCloudApiThrottled",
        "sum by (operation) (rate(eni_ipam_api_throttled_total[5m])) > 0",
        "15m",
        "failures.yaml",
        "one request in a hundred throttled, retried by the SDK, does not fire throttling",
        id="throttling-any",
    ),
]


@pytest.mark.parametrize(("alert", "old_expr", "old_for", "test_file", "catching_group"), REVERTED)
def test_the_promtool_tests_fail_when_a_rule_is_reverted(
    tmp_path: Path, alert: str, old_expr: str, old_for: str, test_file: str, catching_group: str
) -> None:
    """The rule as it was before decision 0010 fails the promtool test written for its false alarm."""
    spec = rendered_spec()
    rule = alerts(spec)[alert]
    rule["expr"], rule["for"] = old_expr, old_for
    workspace(tmp_path, spec)
    status, output = run_promtool("test", "rules", test_file, cwd=tmp_path)
    assert status != 0, f"the promtool tests pass with the old {alert}:\n{output}"
    assert f"name: {catching_group}," in output, output


# -- the previous rules ------------------------------------------------------------------------------

PREVIOUS_RULES: dict[str, dict[str, str]] = yaml.safe_load(
    (Path(__file__).parent / "previous_alert_rules.yaml").read_text()
)
"""Alert → its expression and ``for`` before the incident review (previous_alert_rules.yaml)."""
TOLD_APART: dict[str, list[tuple[str, str]]] = {
    "EniIpamNotReady": [
        ("installations.yaml", "this release never ready beside a healthy release fires not ready"),
        ("installations.yaml", "this release gone beside a healthy release fires not ready"),
    ],
    "EniIpamSubnetLow": [("installations.yaml", "a low subnet through a leader hand-over fires on time")],
    "EniIpamSubnetExhaustionPredicted": [
        (
            "subnets.yaml",
            "a steady drain of a /22 over six hours fires exhaustion about four hours before it is empty",
        ),
        ("subnets.yaml", "a burst to 12 per cent free that then stays flat never fires exhaustion"),
    ],
    "EniIpamNodesInDeficit": [
        ("installations.yaml", "a node short through a leader hand-over fires deficit on time")
    ],
    "EniIpamNodesAtCapacity": [
        ("installations.yaml", "a node at capacity through a leader hand-over fires on time")
    ],
    "EniIpamCloudApiThrottled": [
        (
            "failures.yaml",
            "every request throttled for fifteen minutes warns while it goes on, and ends soon after",
        ),
        ("installations.yaml", "this release healthy beside another throttled fires nothing"),
    ],
    "EniIpamMaintenanceFailing": [
        (
            "installations.yaml",
            "this release's passes failing beside a busy healthy release fires maintenance",
        )
    ],
    "EniIpamResyncFailing": [
        ("installations.yaml", "this release's resyncs failing beside a healthy release fires resync")
    ],
    "EniIpamGarbageCollectionFailing": [
        (
            "installations.yaml",
            "this release healthy beside another whose garbage collection fails fires nothing",
        )
    ],
    "EniIpamStatusWritesFailing": [
        (
            "installations.yaml",
            "this release's status writes failing beside a busy healthy release fires status writes",
        )
    ],
}
"""Alert → the promtool cases its previous form fails (file, test group)."""


def test_every_previous_rule_has_a_case_that_tells_it_apart() -> None:
    assert set(TOLD_APART) == set(PREVIOUS_RULES)


def only(test_file: str, case: str, alert: str, *, installation_labels: bool) -> dict[str, Any]:
    """A promtool test file holding only ``case``'s checks of ``alert``; without the installation
    labels in the expected alerts when ``installation_labels`` is false (the previous rules had none)."""
    tests = yaml.safe_load((PROMTOOL_TESTS / test_file).read_text())
    group = next(g for g in tests["tests"] if g["name"] == case)
    checks = copy.deepcopy([c for c in group["alert_rule_test"] if c["alertname"] == alert])
    assert checks, f"{test_file}: {case!r} checks no {alert}"
    if not installation_labels:
        for check in checks:
            for expected in check.get("exp_alerts") or []:
                for label in ("namespace", "job"):
                    expected["exp_labels"].pop(label, None)
    return {**tests, "tests": [{**group, "alert_rule_test": checks}]}


@pytest.mark.parametrize(
    ("alert", "test_file", "case"),
    [(alert, test_file, case) for alert, cases in TOLD_APART.items() for test_file, case in cases],
    ids=[f"{alert}-{n}" for alert, cases in TOLD_APART.items() for n in range(len(cases))],
)
def test_a_rule_put_back_in_its_previous_form_fails_its_named_case(
    tmp_path: Path, alert: str, test_file: str, case: str
) -> None:
    spec = rendered_spec()
    workspace(tmp_path, spec)
    (tmp_path / "case.yaml").write_text(
        yaml.safe_dump(only(test_file, case, alert, installation_labels=True))
    )
    status, output = run_promtool("test", "rules", "case.yaml", cwd=tmp_path)
    assert status == 0, f"today's {alert} fails {case!r}:\n{output}"

    previous = copy.deepcopy(without_annotations(spec))
    rule = alerts(previous)[alert]
    rule.update(PREVIOUS_RULES[alert])
    rule.pop("keep_firing_for", None)
    (tmp_path / RULES).write_text(yaml.safe_dump(previous, sort_keys=False))
    (tmp_path / "case.yaml").write_text(
        yaml.safe_dump(only(test_file, case, alert, installation_labels=False))
    )
    status, output = run_promtool("test", "rules", "case.yaml", cwd=tmp_path)
    assert status != 0 and case in output, f"the previous {alert} passes {case!r}:\n{output}"
