"""The Helm commands and values files of the docs work as written: every value they set exists in
values.yaml (or in the provider's settings, for a provider section values.yaml leaves out), and every
command renders, split into words as a shell splits it, to objects that validate (schemas.py)."""

from __future__ import annotations

import itertools
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from providers.azure.settings import AzureSettings
from providers.generic.settings import GenericSettings
from tests.deploy.conftest import CHART, REPO_ROOT, helm, one, render_notes, values, with_required
from tests.deploy.schemas import floor_errors

PAGES = ["docs/deploy.md", "docs/azure.md", "docs/generic.md", "docs/node.md"]
"""The pages that install or upgrade the chart."""
CHART_PATH = "deploy/helm/eni-ipam"
PROVIDER_SECTIONS: dict[str, Any] = {"azure": AzureSettings, "generic": GenericSettings}
"""config sections values.yaml leaves out (only the default provider's is there): their settings."""
FENCE = re.compile(r"^[ \t]*```(\w*)\n(.*?)^[ \t]*```", re.M | re.S)  # list items indent theirs
INLINE = re.compile(r"`(helm [^`]+)`")
NAMED = re.compile(r"^#\s*([\w.-]+\.ya?ml)\s*$")
HELM_VERBS = {"install", "upgrade", "template", "lint"}
VALUE_FLAGS = {"--set", "--set-string"}
PASSED_ON = {"--show-only"}
PROSE_SET = re.compile(r"(--set(?:-string)?) '?([A-Za-z0-9_.\\/-]+)=")


def page_text(page: str) -> str:
    return (REPO_ROOT / page).read_text()


def fenced(text: str, *languages: str) -> list[str]:
    return [body for lang, body in FENCE.findall(text) if lang in languages]


def helm_commands(text: str) -> list[list[str]]:
    """Every ``helm install|upgrade|template|lint`` of the chart in ``text`` (code blocks and inline
    code), split into words as a POSIX shell splits them, up to the end of the command (a pipe, a
    comment)."""
    lines = [
        line for body in fenced(text, "sh", "bash", "") for line in body.replace("\\\n", " ").splitlines()
    ]
    lines += INLINE.findall(text)
    commands = []
    for line in lines:
        start = line.find("helm ")
        if start < 0:
            continue
        words = shlex.split(line[start:], comments=True)
        for stop in ("|", "&&", ";", ">"):
            if stop in words:
                words = words[: words.index(stop)]
        if len(words) > 1 and words[1] in HELM_VERBS and CHART_PATH in words:  # not a mere `helm template`
            commands.append(words)
    return commands


def values_file_texts() -> dict[str, str]:
    """The values files the pages show, by the name their first line gives (``# my-values.yaml``)."""
    files = {}
    for page in PAGES:
        for body in fenced(page_text(page), "yaml"):
            if match := NAMED.match(body.partition("\n")[0]):
                files[match.group(1)] = body
    return files


def values_files() -> dict[str, dict[str, Any]]:
    return {name: yaml.safe_load(text) for name, text in values_file_texts().items()}


def values_blocks(text: str) -> list[dict[str, Any]]:
    """The YAML blocks of ``text`` that are Helm values: those with a top-level key of values.yaml (the
    others are run configurations, scenarios or Kubernetes objects)."""
    top = set(values())
    blocks = [yaml.safe_load(body) for body in fenced(text, "yaml")]
    return [b for b in blocks if isinstance(b, dict) and set(b) & top]


def set_flag_values(words: list[str]) -> list[dict[str, Any]]:
    """The ``--set`` and ``--set-string`` of a command as values files: helm splits a key at every dot
    a backslash does not escape."""
    out = []
    for flag, arg in itertools.pairwise(words):
        if flag in VALUE_FLAGS:
            path, _, value = arg.partition("=")
            keys = [k.replace("\\.", ".") for k in re.split(r"(?<!\\)\.", path)]
            node: dict[str, Any] = {keys[-1]: value}
            for key in reversed(keys[:-1]):
                node = {key: node}
            out.append(node)
    return out


def unknown_values(given: dict[str, Any]) -> list[str]:
    """The paths of ``given`` that values.yaml does not have. Below an empty map of values.yaml
    (annotations, labels, tags, pools) any key goes; null removes a default and is always allowed."""
    problems: list[str] = []

    def walk(node: dict[str, Any], default: Any, path: list[str]) -> None:
        for key, value in node.items():
            where = [*path, str(key)]
            if path == ["config"] and key in PROVIDER_SECTIONS and key not in default:
                fields = set(PROVIDER_SECTIONS[key].model_fields)
                problems.extend(".".join([*where, k]) for k in (value or {}) if k not in fields)
            elif not isinstance(default, dict) or key not in default:
                problems.append(".".join(where))
            elif isinstance(value, dict) and isinstance(default[key], dict):
                if default[key]:  # an empty map takes any key
                    walk(value, default[key], where)
            elif isinstance(value, dict) and default[key] is not None:
                problems.append(f"{'.'.join(where)}: a map, where values.yaml has {default[key]!r}")

    walk(given, values(), [])
    return problems


def template_args(words: list[str], files: dict[str, Path]) -> list[str]:
    """A documented command as ``helm template``, with its values: what install or upgrade would apply."""
    verb, rest = words[1], words[2:]
    positional, options = [], []
    i = 0
    while i < len(rest):
        word = rest[i]
        if word in ("-n", "--namespace"):
            options += ["--namespace", rest[i + 1]]
            i += 2
        elif word in ("-f", "--values"):
            assert rest[i + 1] in files, f"{' '.join(words)}: no values file {rest[i + 1]} in {PAGES}"
            options += ["--values", str(files[rest[i + 1]])]
            i += 2
        elif word in VALUE_FLAGS | PASSED_ON:
            options += [word, rest[i + 1]]
            i += 2
        else:
            assert not word.startswith("-"), f"{' '.join(words)}: {word} is not understood here"
            positional.append(word)
            i += 1
    assert positional[-1] == CHART_PATH and len(positional) == (1 if verb == "lint" else 2), words
    release = "eni-ipam" if verb == "lint" else positional[0]
    return ["template", release, str(REPO_ROOT / CHART_PATH), *options]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The pages' named values files, written out for helm."""
    directory = tmp_path_factory.mktemp("docs-values")
    out = {}
    for name, text in values_file_texts().items():
        out[name] = directory / name
        out[name].write_text(text)
    return out


@pytest.mark.parametrize("page", PAGES)
def test_every_page_shows_how_to_install_or_upgrade_the_chart(page):
    verbs = {words[1] for words in helm_commands(page_text(page))}
    assert verbs & {"install", "upgrade"}, f"{page} shows no helm install or upgrade"


@pytest.mark.parametrize("page", PAGES)
def test_the_docs_set_only_values_that_exist(page):
    text = page_text(page)
    given = [v for words in helm_commands(text) for v in set_flag_values(words)] + values_blocks(text)
    for flag, path in PROSE_SET.findall(text):  # `--set a.b=c` in a sentence, too
        given += set_flag_values([flag, f"{path}=…"])
    assert given, f"{page} sets no value"
    for block in given:
        assert unknown_values(block) == [], f"{page}: {block}"


@pytest.mark.parametrize("page", PAGES)
def test_the_values_files_a_page_passes_are_shown_in_the_docs(page, files):
    for words in helm_commands(page_text(page)):
        for flag, arg in itertools.pairwise(words):
            if flag in ("-f", "--values"):
                assert arg in files, f"{page}: {' '.join(words)}: {arg} is shown nowhere in {PAGES}"
                assert unknown_values(values_files()[arg]) == [], arg


@pytest.mark.system
@pytest.mark.parametrize("page", PAGES)
def test_the_documented_helm_commands_render_objects_that_validate(page, files):
    commands = helm_commands(page_text(page))
    assert commands
    for words in commands:
        text = helm(*template_args(words, files))
        docs = [d for d in yaml.safe_load_all(text) if d]
        assert docs, " ".join(words)
        assert floor_errors(docs) == [], " ".join(words)


def test_the_docs_checker_finds_a_misspelt_value():
    assert unknown_values({"serviceMonitor": {"enable": True}}) == ["serviceMonitor.enable"]
    assert unknown_values({"config": {"azure": {"vnet": "x"}}}) == ["config.azure.vnet"]
    assert unknown_values({"config": {"aws": {"region": {"name": "x"}}}}) == [
        "config.aws.region: a map, where values.yaml has ''"
    ]
    assert unknown_values({"podLabels": {"any/key": "x"}, "config": {"aws": None}}) == []


def test_an_unquoted_escaped_dot_reaches_helm_without_its_backslash():
    # what the shell does to `--set a.b\.c=1` (the reason the docs quote such keys)
    (words,) = helm_commands("```sh\nhelm install r deploy/helm/eni-ipam --set a.b\\.c=1\n```\n")
    assert set_flag_values(words) == [{"a": {"b": {"c": "1"}}}]
    (words,) = helm_commands("```sh\nhelm install r deploy/helm/eni-ipam --set 'a.b\\.c=1'\n```\n")
    assert set_flag_values(words) == [{"a": {"b.c": "1"}}]


@pytest.mark.system
def test_the_install_notes_irsa_hint_sets_one_annotation():
    (line,) = [line for line in render_notes(None).splitlines() if "--set" in line and "role-arn" in line]
    words = shlex.split(line)  # as the shell splits it when pasted
    arn = "arn:aws:iam::111122223333:role/eni-ipam"
    flag = words[words.index("--set") + 1].replace("<account>", "111122223333").replace("<role>", "eni-ipam")
    text = helm("template", "eni-ipam", str(CHART), "--set", flag, values=with_required(None))
    account = one([d for d in yaml.safe_load_all(text) if d], "ServiceAccount")
    assert account["metadata"]["annotations"] == {"eks.amazonaws.com/role-arn": arn}
