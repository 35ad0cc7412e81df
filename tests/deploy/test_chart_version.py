"""The chart's version moves with every change of it, and the CRD's revision with every change of it.

Each released chart is kept as it was released, in tests/deploy/charts/eni-ipam-<version>/ (0.1.0 is
the first chart, as it was committed; the upgrade tests install them). The chart in deploy/ is either
one of them, file for file, or a version above all of them (a release being prepared): a change to a
template, the CRD or the values under a released version fails here. Its CRD, when it differs from
the last release's, has a higher ``eni-ipam.io/crd-revision`` (the controller updates a cluster's CRD
only to a higher revision, eni_ipam/kube/crd.py).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml

from eni_ipam import __version__
from eni_ipam.kube import crd as crd_module
from tests.deploy.conftest import CHART

RELEASES = Path(__file__).parent / "charts"
SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?$")
CRD_FILE = Path("crds") / "enipools.eni-ipam.io.yaml"


def _version(text: str) -> tuple[int, int, int]:
    match = SEMVER.match(text)
    assert match, f"{text!r} is not a semantic version"
    major, minor, patch = (int(part) for part in match.groups())
    return major, minor, patch


def _files(chart: Path) -> dict[str, bytes]:
    return {str(p.relative_to(chart)): p.read_bytes() for p in sorted(chart.rglob("*")) if p.is_file()}


def _metadata(chart: Path) -> dict[str, str]:
    meta = yaml.safe_load((chart / "Chart.yaml").read_text())
    return {"version": str(meta["version"]), "appVersion": str(meta["appVersion"])}


def releases(where: Path = RELEASES) -> dict[str, Path]:
    """The kept releases, by version."""
    return {p.name.removeprefix("eni-ipam-"): p for p in sorted(where.glob("eni-ipam-*")) if p.is_dir()}


def problems(chart: Path, where: Path = RELEASES) -> list[str]:
    """What is wrong with ``chart``'s version against the releases kept in ``where``."""
    out: list[str] = []
    kept = releases(where)
    if not kept:
        return ["no released chart is kept"]
    for version, path in kept.items():
        if _metadata(path)["version"] != version:
            out.append(f"{path.name} holds chart version {_metadata(path)['version']}")
    meta = _metadata(chart)
    current = _version(meta["version"])
    _version(meta["appVersion"])
    last = max(kept, key=_version)
    if meta["version"] in kept:
        if _files(chart) != _files(kept[meta["version"]]):
            changed = sorted(
                name
                for name in set(_files(chart)) | set(_files(kept[meta["version"]]))
                if _files(chart).get(name) != _files(kept[meta["version"]]).get(name)
            )
            out.append(
                f"the chart changed ({', '.join(changed)}) but its version is still the released "
                f"{meta['version']}: raise version (and appVersion with the code)"
            )
    elif current < _version(last):
        out.append(f"chart version {meta['version']} is below the last release, {last}")
    before = yaml.safe_load((kept[last] / CRD_FILE).read_text())
    now = yaml.safe_load((chart / CRD_FILE).read_text())
    if now != before and crd_module.revision(now) <= crd_module.revision(before):
        out.append(
            f"the CRD changed since {last} but its {crd_module.REVISION_ANNOTATION} is still "
            f"{crd_module.revision(now)}: raise it"
        )
    return out


def test_the_chart_version_follows_every_change():
    assert problems(CHART) == []


def test_the_first_release_and_the_current_one_are_kept():
    kept = releases()
    assert "0.1.0" in kept
    assert _metadata(CHART)["version"] in kept  # the chart as it is released
    first = yaml.safe_load((kept["0.1.0"] / CRD_FILE).read_text())
    assert crd_module.REVISION_ANNOTATION not in (first["metadata"].get("annotations") or {})
    assert crd_module.revision(first) == crd_module.FIRST_REVISION


def test_versions_are_semantic_and_agree():
    meta = _metadata(CHART)
    _version(meta["version"])
    assert meta["appVersion"] == __version__
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert str(values["valuesVersion"]) == meta["version"]  # templates/_helpers.tpl's fillDefaults


@pytest.fixture
def copies(tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the chart and of the releases, the chart kept as a release of its own version."""
    chart, where = tmp_path / "chart", tmp_path / "releases"
    shutil.copytree(CHART, chart)
    shutil.copytree(RELEASES, where)
    version = _metadata(CHART)["version"]
    shutil.rmtree(where / f"eni-ipam-{version}", ignore_errors=True)
    shutil.copytree(CHART, where / f"eni-ipam-{version}")
    return chart, where


def _bump(chart: Path, version: str) -> None:
    path = chart / "Chart.yaml"
    path.write_text(re.sub(r"^version: .*$", f"version: {version}", path.read_text(), flags=re.M))


@pytest.mark.parametrize("changed", ["templates/deployment.yaml", "values.yaml", str(CRD_FILE)])
def test_a_change_under_a_released_version_is_found(copies, changed):
    chart, where = copies
    assert problems(chart, where) == []
    with (chart / changed).open("a") as file:
        file.write("\n# changed\n")
    found = problems(chart, where)
    assert found and changed in found[0] and "raise version" in found[0]
    _bump(chart, "9.0.0")  # a version above every release: a release being prepared
    assert problems(chart, where) == []


def test_a_crd_change_needs_a_higher_revision(copies):
    chart, where = copies
    _bump(chart, "9.0.0")
    path = chart / CRD_FILE
    path.write_text(path.read_text().replace("maxItems: 8", "maxItems: 9"))
    assert any("crd-revision" in p for p in problems(chart, where))
    mine = crd_module.revision(yaml.safe_load(path.read_text()))
    path.write_text(path.read_text().replace(f'crd-revision: "{mine}"', f'crd-revision: "{mine + 1}"'))
    assert problems(chart, where) == []


def test_a_version_below_the_last_release_is_refused(copies):
    chart, where = copies
    _bump(chart, "0.0.1")
    assert any("below the last release" in p for p in problems(chart, where))
