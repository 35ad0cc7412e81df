"""Every third-party module the code imports comes from a distribution it declares.

A dependency that arrives only because another one needs it (httpx2 through lightkube, botocore
through boto3) can vanish with that one's next release; so each distribution's imports are checked
against its own ``pyproject.toml``: the product's runtime dependencies (the Azure provider's in the
``azure`` extra, the live view's and the plots' in ``view`` and ``plot``), the test kit's. The
module → distribution map is read from the installed distributions' file lists, so namespace
packages (``azure.*``, ``lightkube`` and its models) name the distribution that really ships the
module.
"""

from __future__ import annotations

import ast
import importlib.metadata as metadata
import importlib.util
import re
import sys
import tomllib
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
OWN = {"eni_ipam", "providers", "eni_ipam_testkit", "bench", "scripts", "tests", "__future__"}


EXTRAS = {
    "azure": "providers/azure/",
    "view": "eni_ipam/app/view.py",
    "plot": "eni_ipam/simulator/plot.py",
}
"""The product's extras, and the files that may import what each brings."""


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_name(requirement: str) -> str:
    return _normalise(re.split(r"[<>=!~\[; ]", requirement.strip(), maxsplit=1)[0])


@cache
def _file_owners() -> dict[str, str]:
    """Installed file (relative to its site directory) → the distribution that ships it."""
    owners: dict[str, str] = {}
    for dist in metadata.distributions():
        for file in dist.files or ():
            owners.setdefault(str(file), _normalise(dist.metadata["Name"]))
    return owners


def _distribution_of(module: str) -> str | None:
    """The distribution shipping ``module`` (its deepest package with an ``__init__`` or the module
    file), or None for the standard library and the project's own packages."""
    top = module.split(".")[0]
    if top in sys.stdlib_module_names or top in OWN:
        return None
    parts = module.split(".")
    owners = _file_owners()
    while parts:
        spec = importlib.util.find_spec(".".join(parts))
        if spec is not None and spec.origin and spec.origin not in ("namespace", "built-in"):
            for candidate in (f"{'/'.join(parts)}/__init__.py", f"{'/'.join(parts)}.py"):
                if candidate in owners:
                    return owners[candidate]
        parts.pop()
    raise AssertionError(f"no installed distribution ships {module}")


def _imports(package: Path) -> dict[str, set[str]]:
    """Module imported → the files importing it (absolute imports only)."""
    found: dict[str, set[str]] = {}
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                found.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    return found


def _declared(pyproject: Path, *extras: str) -> set[str]:
    project = tomllib.loads(pyproject.read_text())["project"]
    requirements = list(project["dependencies"])
    for extra in extras:
        requirements += project["optional-dependencies"][extra]
    return {_requirement_name(r) for r in requirements}


def _undeclared(packages: list[Path], declared: set[str]) -> dict[str, list[str]]:
    missing: dict[str, list[str]] = {}
    for package in packages:
        for module, files in _imports(package).items():
            dist = _distribution_of(module)
            if dist is not None and dist not in declared:
                missing.setdefault(dist, []).extend(sorted(files))
    return missing


@pytest.mark.parametrize(
    ("packages", "pyproject", "extras"),
    [
        ([ROOT / "eni_ipam", ROOT / "providers"], ROOT / "pyproject.toml", tuple(EXTRAS)),
        ([ROOT / "testkit" / "eni_ipam_testkit"], ROOT / "testkit" / "pyproject.toml", ()),
    ],
    ids=["product", "testkit"],
)
def test_every_imported_distribution_is_declared(
    packages: list[Path], pyproject: Path, extras: tuple[str, ...]
) -> None:
    assert _undeclared(packages, _declared(pyproject, *extras)) == {}


@pytest.mark.parametrize("extra", sorted(EXTRAS))
def test_an_extras_distributions_are_imported_only_where_it_applies(extra: str) -> None:
    """A product without the extra installed never imports what it brings, outside the files that
    need it (and that its callers import only when it is there)."""
    runtime = _declared(ROOT / "pyproject.toml")
    brought = _declared(ROOT / "pyproject.toml", extra) - runtime
    imported = _imports(ROOT / "eni_ipam")
    for module, files in _imports(ROOT / "providers").items():
        imported.setdefault(module, set()).update(files)
    outside = {
        module: sorted(f for f in files if not f.startswith(EXTRAS[extra]))
        for module, files in imported.items()
        if _distribution_of(module) in brought
    }
    assert {module: files for module, files in outside.items() if files} == {}


def test_the_check_sees_a_transitive_import() -> None:
    """httpx2 is lightkube's dependency: importing it without declaring it is what this guards."""
    assert _distribution_of("httpx2") == "httpx2"
    assert _distribution_of("botocore.exceptions") == "botocore"
    assert _distribution_of("azure.mgmt.core.tools") == "azure-mgmt-core"
    assert _distribution_of("json") is None
