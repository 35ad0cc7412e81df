"""The reference pages list every setting the models have, so a new field cannot go undocumented."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import BaseModel

from eni_ipam.agent.config import ServerSection
from eni_ipam.app.runconfig import ServerSettings
from eni_ipam.core.settings import Settings
from eni_ipam.core.spec import NodeSpec
from eni_ipam.kube.settings import KubeSettings

DOCS = Path(__file__).resolve().parent.parent / "docs"


def documented(page: str) -> set[str]:
    """The names in the first column of the page's tables (`| \\`name\\` |`, or several per cell)."""
    names: set[str] = set()
    for line in (DOCS / page).read_text().splitlines():
        cells = line.split("|")
        if len(cells) > 2:
            names.update(re.findall(r"`([a-z_]+)`", cells[1]))
    return names


@pytest.mark.parametrize(
    ("model", "page"),
    [
        (Settings, "settings.md"),
        (NodeSpec, "settings.md"),
        (KubeSettings, "configuration.md"),
        (ServerSettings, "configuration.md"),
        (ServerSection, "node.md"),
    ],
)
def test_every_field_is_on_its_reference_page(model: type[BaseModel], page: str) -> None:
    missing = set(model.model_fields) - documented(page)
    assert not missing, f"{page} does not list {sorted(missing)}"


@pytest.mark.parametrize("model", [Settings, NodeSpec, KubeSettings, ServerSettings, ServerSection])
def test_every_field_says_why_in_its_docstring(model: type[BaseModel]) -> None:
    undocumented = [name for name, field in model.model_fields.items() if not field.description]
    assert not undocumented, f"{model.__name__}: no docstring for {undocumented}"


ROOT = DOCS.parent
PAGES = sorted([ROOT / "README.md", *DOCS.rglob("*.md"), *(ROOT / "examples").rglob("*.md")])


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_table_row_belongs_to_a_table_with_a_header(page: Path) -> None:
    """A table row cut off from its table by a paragraph renders as a stray line of pipes: every run
    of `|` lines outside code blocks starts with a header and its separator."""
    lines = page.read_text().splitlines()
    fenced = False
    stray = []
    for n, line in enumerate(lines):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        if fenced or not line.startswith("|") or (n and lines[n - 1].startswith("|")):
            continue
        following = lines[n + 1] if n + 1 < len(lines) else ""
        if not re.match(r"^\|\s*:?-", following):
            stray.append(f"line {n + 1}: {line[:60]}")
    assert not stray, stray


LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchors(page: Path) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces as hyphens,
    a repeated one suffixed -1, -2, ..."""
    found: set[str] = set()
    fenced = False
    for line in page.read_text().splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if fenced or not heading:
            continue
        slug = re.sub(r"[^\w\- ]", "", heading[1].lower()).replace(" ", "-")
        candidate, n = slug, 0
        while candidate in found:
            n += 1
            candidate = f"{slug}-{n}"
        found.add(candidate)
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_relative_link_reaches_a_file_and_its_heading(page: Path) -> None:
    broken = []
    for target in LINK.findall(re.sub(r"```.*?```", "", page.read_text(), flags=re.S)):
        if re.match(r"^[a-z]+:", target):
            continue  # http(s), mailto: not this test's
        path, _, anchor = target.partition("#")
        reached = (page.parent / path).resolve() if path else page
        if not reached.exists():
            broken.append(f"{target}: no {path}")
        elif anchor and reached.suffix == ".md" and anchor not in anchors(reached):
            broken.append(f"{target}: no heading #{anchor} in {reached.relative_to(ROOT)}")
    assert not broken, broken
