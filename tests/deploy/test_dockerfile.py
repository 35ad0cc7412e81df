"""The Dockerfile, read as text (no Docker engine here): multi-stage, a non-root runtime without build
tools, and an entry point that is the project's console script running the chart's configuration."""

from __future__ import annotations

import json
import re
import tomllib

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from eni_ipam import __version__
from tests.deploy.conftest import CHART, REPO_ROOT, values

BUILD_TOOLS = re.compile(
    r"\b(build-essential|gcc|g\+\+|clang|make|cmake|python3?-dev|libc6?-dev|cargo|rustc)\b"
)
PYPROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    joined = re.sub(
        r"\\\n", " ", "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    )
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1])
        for line in joined.splitlines()
        if line.strip()
    ]


def stages(text: str) -> list[list[tuple[str, str]]]:
    out: list[list[tuple[str, str]]] = []
    for instruction in instructions(text):
        if instruction[0] == "FROM":
            out.append([])
        if out:
            out[-1].append(instruction)
    return out


DOCKERFILE = (REPO_ROOT / "Dockerfile").read_text()
FINAL = stages(DOCKERFILE)[-1]


def final(name: str) -> list[str]:
    return [args for instruction, args in FINAL if instruction == name]


def test_multi_stage_build_on_python_slim():
    froms = [args for instruction, args in instructions(DOCKERFILE) if instruction == "FROM"]
    assert len(froms) >= 2
    base = dict(re.findall(r"^ARG (\w+)=(\S+)$", DOCKERFILE, re.M))
    resolved = [re.sub(r"\$\{(\w+)\}", lambda m: base[m.group(1)], f.split()[0]) for f in froms]
    assert resolved[0] == resolved[-1]
    assert re.fullmatch(r"python:3\.12-slim-bookworm@sha256:[0-9a-f]{64}", resolved[0]), (
        "base not pinned by digest"
    )
    assert any(args.startswith("--from=") for args in final("COPY")), "the final stage takes nothing built"


def test_final_stage_runs_as_a_numeric_non_root_user():
    (user,) = final("USER")
    uid = user.split(":")[0]
    assert uid.isdigit() and int(uid) != 0
    assert int(uid) == values()["securityContext"]["runAsUser"]


APT_INSTALL = re.compile(r"apt-get install (?:-\S+ )*\"(\S+)=\$\{(\w+)\}\"")


def test_final_stage_has_no_build_tools_and_from_apt_only_nftables_at_a_pinned_version():
    pins = dict(re.findall(r"^ARG (\w+)=(\S+)$", DOCKERFILE, re.M))
    for args in final("RUN"):
        assert not BUILD_TOOLS.search(args), args
        assert "apk add" not in args, args
        if "apt-get install" in args:
            # The node datapath's nft (decision 0036), and nothing else, at a version the Dockerfile pins.
            installed = APT_INSTALL.findall(args)
            assert [package for package, _ in installed] == ["nftables"], args
            assert all(re.fullmatch(r"[0-9][\w.+~-]*", pins[arg]) for _, arg in installed), args
            assert "rm -rf /var/lib/apt/lists/*" in args, args


def test_entrypoint_is_the_console_script_running_the_chart_configuration():
    (entrypoint,) = final("ENTRYPOINT")
    (cmd,) = final("CMD")
    assert json.loads(entrypoint) == ["eni-ipam"]
    assert "eni-ipam" in PYPROJECT["project"]["scripts"]
    assert json.loads(cmd) == ["run", "--config", "/etc/eni-ipam/config.yaml"]
    assert final("EXPOSE") == [str(values()["config"]["server"]["port"])]


def test_environment_and_labels():
    env = " ".join(final("ENV"))
    assert "PYTHONDONTWRITEBYTECODE=1" in env and "PYTHONUNBUFFERED=1" in env
    labels = " ".join(final("LABEL"))
    for key in ("title", "description", "version", "licenses"):
        assert f"org.opencontainers.image.{key}=" in labels


def test_one_version_everywhere():
    chart = (CHART / "Chart.yaml").read_text()
    (dockerfile_version,) = re.findall(r"^ARG VERSION=(\S+)$", DOCKERFILE, re.M)
    assert PYPROJECT["project"]["version"] == __version__ == dockerfile_version
    assert f'appVersion: "{__version__}"' in chart


def test_dockerignore_keeps_the_build_context_small_but_complete():
    ignored = {line.strip() for line in (REPO_ROOT / ".dockerignore").read_text().splitlines()}
    assert {".venv", ".git", ".pytest_cache", ".mypy_cache", "**/__pycache__"} <= ignored
    copied = {args.split()[0] for instruction, args in instructions(DOCKERFILE) if instruction == "COPY"}
    copied |= {a for i, args in instructions(DOCKERFILE) if i == "COPY" for a in args.split()[1:-1]}
    for path in copied - {"--from=builder", "/opt/venv", "/opt/eni-ipam/eni-ipam-cni"}:
        assert path.rstrip("/") not in ignored, f"{path} is copied but excluded by .dockerignore"
        assert (REPO_ROOT / path).exists(), path


def _runs() -> list[str]:
    return [re.sub(r"\\\n\s*", "", run) for run in re.findall(r"^RUN ((?:.*\\\n)*.*)$", DOCKERFILE, re.M)]


def test_every_dependency_is_installed_from_the_lock_with_hashes():
    installs = [part for run in _runs() for part in run.split("&&") if " install " in part]
    assert installs
    for install in installs:
        if "apt-get install" in install:
            continue  # Debian's nftables at a pinned version (the test of the final stage checks it)
        locked = "--require-hashes" in install and "-r requirements/" in install
        own_wheel = "--no-deps" in install and "/tmp/wheel/" in install
        assert locked or own_wheel, (
            f"an install that is neither hash-locked nor the project's wheel: {install}"
        )
    assert any("--no-build-isolation" in run for run in _runs()), (
        "the build backend would be fetched unpinned"
    )


def test_the_shipped_environment_never_had_pip_and_the_bases_is_removed():
    runs = _runs()
    assert any("venv --without-pip /opt/venv" in run for run in runs)
    final_runs = [args for instruction, args in FINAL if instruction == "RUN"]
    assert any("site-packages/pip" in run and "setuptools" in run for run in final_runs)


def test_the_final_stage_removes_ensurepip_of_either_base():
    """ensurepip carries a pip wheel: left in place, ``python -m venv`` in the container yields pip."""
    removed = " ".join(
        args for instruction, args in FINAL if instruction == "RUN" and "rm -rf" in args
    ).split()
    assert "/usr/local/lib/python3*/ensurepip" in removed  # python:3.X-slim
    assert "/usr/lib/python3*/ensurepip" in removed  # Debian's python3 (scripts/build_image.py)


def test_the_lock_files_are_the_ones_make_lock_writes():
    makefile = (REPO_ROOT / "Makefile").read_text()
    for lock in ("requirements/image.txt", "requirements/build.txt"):
        assert lock in makefile and (REPO_ROOT / lock).is_file()
        assert "--generate-hashes" in makefile


def _locked(path: str) -> dict[str, str]:
    text = (REPO_ROOT / path).read_text()
    pins = dict(re.findall(r"^([A-Za-z0-9._-]+)==(\S+)", text, re.M))
    return {canonicalize_name(name): version for name, version in pins.items()}


def test_the_lock_pins_every_dependency_of_the_image_within_its_bounds():
    """A dependency added to pyproject.toml without `make lock` fails here (and the image's build)."""
    locked = _locked("requirements/image.txt")
    wanted = [Requirement(r) for r in PYPROJECT["project"]["dependencies"]]
    wanted += [Requirement(r) for r in PYPROJECT["project"]["optional-dependencies"]["azure"]]
    for requirement in wanted:
        name = canonicalize_name(requirement.name)
        assert name in locked, f"{name} is not in requirements/image.txt: run make lock"
        assert requirement.specifier.contains(locked[name]), f"{name}=={locked[name]} is not {requirement}"
    text = (REPO_ROOT / "requirements" / "image.txt").read_text()
    blocks = re.split(r"\n(?=[A-Za-z0-9])", text.strip())
    assert all("--hash=sha256:" in block for block in blocks if "==" in block), "a pin without its hashes"
    build = _locked("requirements/build.txt")
    for requirement in map(Requirement, PYPROJECT["build-system"]["requires"]):
        name = canonicalize_name(requirement.name)
        assert name in build and requirement.specifier.contains(build[name])


def _direct(path: str, via: str) -> set[str]:
    """The pins of a lock file that ``via`` (a pattern) requires directly (uv's ``# via`` annotations)."""
    text = (REPO_ROOT / path).read_text()
    blocks = re.split(r"\n(?=[A-Za-z0-9])", text.strip())
    return {
        canonicalize_name(block.split("==", 1)[0])
        for block in blocks
        if "==" in block and re.search(rf"^\s*#\s+(via\s+)?{via}", block, re.M)
    }


def test_the_locks_direct_dependencies_are_exactly_those_of_pyproject():
    """A dependency removed from pyproject.toml (or the azure extra) without `make lock` fails here too."""
    wanted = PYPROJECT["project"]["dependencies"] + PYPROJECT["project"]["optional-dependencies"]["azure"]
    assert _direct("requirements/image.txt", r"eni-ipam \(") == {
        canonicalize_name(Requirement(r).name) for r in wanted
    }, "requirements/image.txt is not the lock of pyproject.toml's dependencies: run make lock"
    build_in = (REPO_ROOT / "requirements" / "build.in").read_text()
    build_wanted = [r for r in build_in.splitlines() if r.strip() and not r.lstrip().startswith("#")]
    assert {canonicalize_name(Requirement(r).name) for r in build_wanted} == {
        canonicalize_name(Requirement(r).name) for r in PYPROJECT["build-system"]["requires"]
    }, "requirements/build.in is not pyproject.toml's [build-system] requires"
    assert _direct("requirements/build.txt", r"-r (\S*/)?build\.in") == {
        canonicalize_name(Requirement(r).name) for r in build_wanted
    }
