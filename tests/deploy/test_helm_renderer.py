"""eni_ipam/testing/helm.py: each construct the chart uses, with Helm's semantics, and a clear error for
anything it does not support."""

from __future__ import annotations

import base64
import hashlib
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from eni_ipam.testing.helm import TemplateError, render_chart, render_chart_text, render_manifests

VALUES = {
    "a": {"b": "x", "n": 2, "big": 1000000, "half": 0.5, "empty": "", "zero": 0, "flag": True},
    "items": ["p", "q"],
    "map": {"z": 1, "y": "two"},
    "none": {},
    "tags": {"k": "v", "j": "w"},
}


def chart(tmp_path: Path, templates: dict[str, str], values: dict[str, Any] | None = None) -> Path:
    (tmp_path / "templates").mkdir(exist_ok=True)
    (tmp_path / "Chart.yaml").write_text("apiVersion: v2\nname: demo\nversion: 1.2.3\nappVersion: '4.5'\n")
    (tmp_path / "values.yaml").write_text(yaml.safe_dump(VALUES if values is None else values))
    for name, text in templates.items():
        (tmp_path / "templates" / name).write_text(text)
    return tmp_path


def render(tmp_path: Path, template: str, overrides: dict[str, Any] | None = None, helpers: str = "") -> str:
    root = chart(tmp_path, {"t.yaml": template, "_helpers.tpl": helpers})
    return render_chart_text(root, overrides, release_name="rel", namespace="ns")["templates/t.yaml"]


CASES = [
    # values, built-in objects, missing keys
    ("{{ .Values.a.b }}", "x"),
    ("[{{ .Values.a.missing }}]", "[]"),
    ("{{ .Release.Name }}/{{ .Release.Namespace }}/{{ .Release.Service }}", "rel/ns/Helm"),
    ("{{ .Chart.Name }}-{{ .Chart.Version }}-{{ .Chart.AppVersion }}", "demo-1.2.3-4.5"),
    ("{{ .Template.Name }}", "demo/templates/t.yaml"),
    # numbers are float64, printed like Go
    ("{{ .Values.a.n }} {{ .Values.a.big }} {{ .Values.a.half }} {{ 3 }}", "2 1e+06 0.5 3"),
    ("{{ .Values.a.flag }} {{ true }}", "true true"),
    # whitespace trimming and comments
    ("a  \n {{- .Values.a.b -}} \n  b", "axb"),
    ("a {{- /* it's a comment, with 'quotes' */ -}} b", "ab"),
    ("{{/* plain comment */}}x", "x"),
    # raw strings keep braces (Prometheus templates in a chart)
    ("{{`{{ $labels.subnet }}`}}", "{{ $labels.subnet }}"),
    ('{{ "{{" }}', "{{"),
    # conditionals
    ("{{ if .Values.a.b }}yes{{ end }}", "yes"),
    ("{{ if .Values.a.empty }}yes{{ else }}no{{ end }}", "no"),
    (
        "{{ if .Values.a.zero }}0{{ else if .Values.none }}1{{ else if .Values.items }}2{{ else }}3{{ end }}",
        "2",
    ),
    ("{{ if and .Values.a.b (not .Values.a.empty) }}ok{{ end }}", "ok"),
    ("{{ or .Values.a.empty .Values.a.zero .Values.a.b }}", "x"),
    ("{{ and .Values.a.b .Values.a.zero }}", "0"),
    ('{{ if eq .Values.a.b "y" "x" }}any{{ end }}{{ if ne .Values.a.b "x" }}!{{ end }}', "any"),
    ("{{ if eq .Values.a.n 2.0 }}float{{ end }}", "float"),
    ('{{ if eq .Values.nothing "x" }}no{{ else }}nil is unequal{{ end }}', "nil is unequal"),
    # with, range, variables
    ("{{ with .Values.a }}{{ .b }}{{ end }}", "x"),
    ("{{ with .Values.none }}set{{ else }}unset{{ end }}", "unset"),
    ("{{ with $v := .Values.a.b }}{{ $v }}{{ end }}", "x"),
    ("{{ range .Values.items }}{{ . }},{{ end }}", "p,q,"),
    ("{{ range $i, $v := .Values.items }}{{ $i }}={{ $v }} {{ end }}", "0=p 1=q "),
    ("{{ range $k, $v := .Values.map }}{{ $k }}:{{ $v }} {{ end }}", "y:two z:1 "),
    ("{{ range .Values.none }}x{{ else }}empty{{ end }}", "empty"),
    ("{{ range .Values.items }}{{ $.Release.Name }}{{ end }}", "relrel"),
    ("{{ $x := .Values.a.b }}{{ if true }}{{ $y := 1 }}{{ end }}{{ $x }}", "x"),
    # define, include, template; $ is the data an include was given
    ('{{ include "h" .Values.a }}', "[x]"),
    ('{{ template "h" .Values.a }}', "[x]"),
    ('{{ include "root" .Values.a }}', "x"),
    # functions
    ("{{ toYaml .Values.map }}", "y: two\nz: 1"),
    ("{{ toYaml .Values.items }}", "- p\n- q"),
    ("{{ toYaml .Values.none }}|{{ toYaml .Values.a.half }}", "{}|0.5"),
    ("{{ toJson .Values.map }}", '{"y":"two","z":1}'),
    ("x:{{ toYaml .Values.tags | nindent 2 }}", "x:\n  j: w\n  k: v"),
    ('{{ "a\\nb" | indent 2 }}', "  a\n  b"),
    ("{{ .Values.a.b | quote }} {{ quote .Values.a.n }}", '"x" "2"'),
    ('{{ .Values.a.empty | default "d" }} {{ default "d" .Values.a.b }}', "d x"),
    ('{{ "abcdef" | trunc 3 }} {{ "abcdef" | trunc -2 }}', "abc ef"),
    ('{{ "name-" | trimSuffix "-" }}', "name"),
    ('{{ printf "%s-%s:%d %q 100%%" "a" .Values.a.b 7 "q" }}', 'a-x:7 "q" 100%'),
    ('{{ "1+2" | replace "+" "_" }} {{ contains "b" "abc" }}', "1_2 true"),
    ('{{ required "needed" .Values.a.b }}', "x"),
    ('{{ "hi" | b64enc }}', base64.b64encode(b"hi").decode()),
    ('{{ "hi" | sha256sum }}', hashlib.sha256(b"hi").hexdigest()),
    # dir is Go's path.Dir: up to the last slash, cleaned
    ('{{ "/run/eni-ipam/agent.sock" | dir }}', "/run/eni-ipam"),
    ('{{ dir "/x" }} {{ dir "/a/b/" }} {{ dir "agent.sock" }} {{ dir "" }}', "/ /a/b . ."),
    ('{{ dir "//a//b" }} {{ dir "/a/../b/./c" }} {{ dir "a/b" }} {{ dir "../x" }}', "/a /b a .."),
]
HELPERS = '{{- define "h" -}}[{{ .b }}]{{- end -}}\n{{- define "root" -}}{{ $.b }}{{- end -}}'


@pytest.mark.parametrize(("template", "expected"), CASES, ids=[c[0][:40] for c in CASES])
def test_constructs(tmp_path, template, expected):
    assert render(tmp_path, template, helpers=HELPERS) == expected


def test_overrides_merge_into_values(tmp_path):
    out = render(
        tmp_path,
        "{{ .Values.a.b }} {{ .Values.a.n }} {{ toYaml .Values.map }}",
        {"a": {"n": 3}, "map": {"w": 0}},
    )
    assert out == "x 3 w: 0\ny: two\nz: 1"


ERRORS = [
    ("{{ upper .Values.a.b }}", "function 'upper' is not supported"),
    ('{{ block "x" . }}{{ end }}', "'block' is not supported"),
    ("{{ range .Values.items }}{{ break }}{{ end }}", "'break' is not supported"),
    ("{{ $x := 1 }}{{ $x = 2 }}", "assignment"),
    ("{{ .Capabilities.KubeVersion }}", "can't evaluate field Capabilities"),
    ("{{ .Files.Get }}", "can't evaluate field Files"),
    ("{{ .Values.map }}", "pipe it to toYaml"),
    ("{{ .Values.missing.deeper }}", "nil pointer evaluating"),
    ("{{ if eq .Values.a.n 2 }}{{ end }}", "incompatible types for comparison"),
    ("{{ .Values.a.b | trunc .Values.a.n }}", "trunc: expected int, got float64"),
    ('{{ required "config.x is required" .Values.a.empty }}', "t.yaml:1: config.x is required"),
    ('{{ fail "stop" }}', "stop"),
    ('{{ include "nope" . }}', 'no template named "nope"'),
    ("{{ if .Values.a.b }}open", "not closed"),
    ("{{ end }}", "unexpected {{ end }}"),
    ("{{ .Values.a.b", "unclosed action"),
    ("{{ 'c' }}", "unsupported syntax"),
    ('{{ printf "%5s" "a" }}', "only %s"),
    ('{{ printf "%s" }}', "no argument"),
    ("{{ $undefined }}", "undefined variable"),
    ("{{ range .Values.a.b }}{{ end }}", "range can't iterate"),
    ("{{ with .Values.a }}{{ else if .b }}{{ end }}", "'else if' is not supported"),
    ("{{ .Values.a.b 1 }}", "non-function"),
    ("{{ dir .Values.a.n }}", "dir: expected str, got float64"),
]


@pytest.mark.parametrize(("template", "message"), ERRORS, ids=[e[0][:40] for e in ERRORS])
def test_unsupported_or_failing_templates_raise(tmp_path, template, message):
    with pytest.raises(TemplateError, match=re.escape(message)):
        render(tmp_path, template, helpers=HELPERS)


def test_error_names_template_and_line(tmp_path):
    with pytest.raises(TemplateError, match=r"templates/t\.yaml:3: function 'lower'"):
        render(tmp_path, "a\nb\n{{ lower .Values.a.b }}")


def test_documents_in_install_order_without_notes_and_empty_ones(tmp_path):
    root = chart(
        tmp_path,
        {
            "a-deploy.yaml": "kind: Deployment\nmetadata: {name: d}\n---\n# only a comment\n",
            "b-sa.yaml": "{{ if true }}\napiVersion: v1\nkind: ServiceAccount\n{{ end }}",
            "c-off.yaml": "{{ if false }}\nkind: Secret\n{{ end }}",
            "d-custom.yaml": "apiVersion: x/v1\nkind: Widget\nmetadata: {name: w}",
            "NOTES.txt": "Hello {{ .Release.Name }}",
        },
    )
    assert [d["kind"] for d in render_chart(root)] == ["ServiceAccount", "Deployment", "Widget"]
    assert render_chart_text(root)["templates/NOTES.txt"] == "Hello eni-ipam"
    stream = render_manifests(root)
    first = "---\n# Source: demo/templates/b-sa.yaml\napiVersion: v1\nkind: ServiceAccount\n"
    assert stream.startswith(first + "---\n# Source: demo/templates/a-deploy.yaml\n")
    assert stream.count("---\n# Source:") == 3 and stream.endswith("name: w}\n")


def test_show_only_keeps_the_named_templates_and_refuses_one_that_renders_nothing(tmp_path):
    root = chart(
        tmp_path,
        {
            "a.yaml": "kind: ConfigMap\nmetadata: {name: a}",
            "b.yaml": "kind: ServiceAccount\nmetadata: {name: b}\n---\nkind: Secret\nmetadata: {name: c}",
            "off.yaml": "{{ if false }}\nkind: Secret\n{{ end }}",
        },
    )
    stream = render_manifests(root, show_only=["templates/b.yaml"])
    assert stream == (
        "---\n# Source: demo/templates/b.yaml\nkind: ServiceAccount\nmetadata: {name: b}\n"
        "---\n# Source: demo/templates/b.yaml\nkind: Secret\nmetadata: {name: c}\n"
    )
    assert render_manifests(root, show_only=["templates/a.yaml", "templates/b.yaml"]).count("# Source:") == 3
    assert render_manifests(root, show_only=()) == render_manifests(root)
    for missing in ("templates/off.yaml", "templates/nope.yaml"):
        with pytest.raises(TemplateError, match=f"could not find template {missing} in chart"):
            render_manifests(root, show_only=[missing])
