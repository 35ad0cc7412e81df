"""parliament lints the IAM policy; every finding it still reports is explained in docs/aws.md.

The table "What parliament reports" of docs/aws.md §2 lists each finding (issue code, statement,
actions) with the reason the linter is wrong there. The test fails on a finding the table does not
explain, and on a row of the table that no longer occurs, for the shipped file
(deploy/aws/iam-policy.json), for the example policy and for a rendering with other values (another
partition, one subnet, two groups, another instance tag).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from parliament import analyze_policy_string  # type: ignore[import-untyped]

from providers.aws.iam_policy import EXAMPLE, render_policy

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "aws.md"
SHIPPED = ROOT / "deploy" / "aws" / "iam-policy.json"
HEADING = "#### What parliament reports"
CODE = re.compile(r"`([^`]+)`")

OTHER = {
    "account_id": "444455556666",
    "partition": "aws-us-gov",
    "region": "us-gov-west-1",
    "vpc_id": "vpc-0a1b2c3d",
    "cluster_name": "blue",
    "subnet_ids": ["subnet-0a1b2c3d"],
    "security_group_ids": ["sg-0a1b2c3d", "sg-0123456789abcdef0"],
    "instance_tag": ("team", "blue"),
}

Finding = tuple[str, str, frozenset[str]]
"""Issue code, statement Sid, actions named in the finding."""


def explained() -> set[Finding]:
    """The rows of the table under HEADING in docs/aws.md."""
    lines = DOC.read_text().splitlines()
    start = lines.index(HEADING)
    rows: set[Finding] = set()
    table = False
    for line in lines[start + 1 :]:
        if line.startswith("#"):
            break
        if not line.startswith("|"):
            if table:
                break
            continue
        table = True
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[0] in {"issue", ""} or set(cells[0]) <= {"-"}:
            continue
        (issue,) = CODE.findall(cells[0])
        (sid,) = CODE.findall(cells[1])
        actions = frozenset(CODE.findall(cells[2]))
        assert actions and len(cells) == 4 and cells[3], line
        rows.add((issue, sid, actions))
    assert rows, f"no table under {HEADING!r}"
    return rows


def findings(policy: dict[str, Any]) -> set[Finding]:
    """parliament's findings, each with the Sid of the statement it points at."""
    text = json.dumps(policy, indent=2)
    lines = text.splitlines()
    found: set[Finding] = set()
    for finding in analyze_policy_string(text).findings:
        line = finding.location["line"]  # 1-based: the statement's opening brace
        sid = next(
            re.search(r'"Sid": "(\w+)"', lines[n]) for n in range(line - 1, len(lines)) if '"Sid"' in lines[n]
        )
        assert sid is not None
        details = finding.detail if isinstance(finding.detail, list) else [finding.detail]
        actions = frozenset(d["action"] for d in details if isinstance(d, dict) and "action" in d)
        found.add((finding.issue, sid.group(1), actions))
    return found


@pytest.mark.parametrize("inputs", [None, EXAMPLE, OTHER], ids=["shipped-file", "example", "other-values"])
def test_every_finding_is_explained_and_every_explanation_still_occurs(inputs: dict[str, Any] | None) -> None:
    found = findings(json.loads(SHIPPED.read_text()) if inputs is None else render_policy(**inputs))
    assert not found - explained(), (
        f"explain in docs/aws.md ({HEADING}) or fix: {sorted(found - explained())}"
    )
    assert not explained() - found, f"no longer reported, remove from docs/aws.md: {explained() - found}"


def test_parliament_reports_what_it_should() -> None:
    """The linter is awake: an unknown condition key and a misspelt action are findings."""
    policy = render_policy(**EXAMPLE)
    policy["Statement"][1]["Condition"]["ArnEquals"]["ec2:NoSuchKey"] = "x"
    policy["Statement"][0]["Action"].append("ec2:DescribeEverything")
    issues = {issue for issue, *_ in findings(policy)}
    assert {"UNKNOWN_CONDITION_FOR_ACTION", "UNKNOWN_ACTION"} <= issues
