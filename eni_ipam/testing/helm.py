"""Render deploy/helm/eni-ipam in Python: a test helper for this chart, not a full Helm.

It implements the part of Go's text/template and of Helm's and Sprig's functions that this chart
uses, so the tests and ``scripts/render_manifests.py`` work without a ``helm`` binary. Where Helm's
semantics matter to a chart they are Helm's: numbers read from values are floats (``eq`` between a
value and an integer literal fails, as in Go), ``toYaml`` sorts keys, prints integral floats as
integers and drops the final newline, a missing key prints as nothing, ``range`` over a map goes in
key order, ``$`` is the data an ``include`` was given. Anything else (another function, ``block``,
``break``, assignment with ``=``, character literals, printing a map or a list without ``toYaml``,
``.Capabilities``, ``.Files``) raises :class:`TemplateError` naming the template and line.
"""

from __future__ import annotations

import base64
import dataclasses
import decimal
import hashlib
import json
import math
import posixpath
import re
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any

import yaml

_WS = " \t\r\n"
_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present: same result, faster
_NOTHING: Any = object()  # no piped value
# fmt: off
INSTALL_ORDER = (
    "PriorityClass", "Namespace", "NetworkPolicy", "ResourceQuota", "LimitRange", "PodSecurityPolicy",
    "PodDisruptionBudget", "ServiceAccount", "Secret", "SecretList", "ConfigMap", "StorageClass",
    "PersistentVolume", "PersistentVolumeClaim", "CustomResourceDefinition", "ClusterRole", "ClusterRoleList",
    "ClusterRoleBinding", "ClusterRoleBindingList", "Role", "RoleList", "RoleBinding", "RoleBindingList",
    "Service", "DaemonSet", "Pod", "ReplicationController", "ReplicaSet", "Deployment",
    "HorizontalPodAutoscaler", "StatefulSet", "Job", "CronJob", "IngressClass", "Ingress", "APIService",
)
# fmt: on
"""Helm's install order of kinds; other kinds come after these, by kind name."""


class TemplateError(Exception):
    """The chart uses something this renderer does not support, or a template failed (``required``)."""


class _Struct(dict[str, Any]):
    """Built-in objects (the root, ``.Release``, ``.Chart``): a missing field is an error, as in Go."""


# -- parsing -------------------------------------------------------------------------------------

# ("lit", value) | ("field", [names]) | ("var", (name, [names])) | ("ident", name) | ("pipe", _Pipe)
_Arg = tuple[str, Any]


@dataclasses.dataclass
class _Pipe:
    decl: list[str]
    cmds: list[list[_Arg]]


@dataclasses.dataclass
class _Text:
    text: str


@dataclasses.dataclass
class _Action:
    pipe: _Pipe
    where: str


@dataclasses.dataclass
class _If:
    branches: list[tuple[_Pipe, list[_Node]]]
    orelse: list[_Node]
    where: str


@dataclasses.dataclass
class _Block:  # with / range
    kind: str
    pipe: _Pipe
    body: list[_Node]
    orelse: list[_Node]
    where: str


@dataclasses.dataclass
class _Call:  # {{ template "name" pipe }}
    name: str
    pipe: _Pipe | None
    where: str


_Node = _Text | _Action | _If | _Block | _Call

_TOKEN = re.compile(
    r"""\s*(?:(?P<str>"(?:[^"\\\n]|\\.)*")|(?P<raw>`[^`]*`)|(?P<num>-?\d+(?:\.\d+)?)
    |(?P<var>\$\w*(?:\.[A-Za-z_]\w*)*)|(?P<field>(?:\.[A-Za-z_]\w*)+|\.)|(?P<ident>[A-Za-z_]\w*)
    |(?P<op>:=|[|(),=]))""",
    re.X,
)


def _scan(src: str, name: str) -> list[tuple[str, str, str]]:
    """Split a template into ("text", text, where) and ("action", body, where), trimming ``{{-``/``-}}``."""
    items: list[tuple[str, str, str]] = []
    pos = 0
    while (start := src.find("{{", pos)) >= 0:
        where = f"{name}:{src.count(chr(10), 0, start) + 1}"
        text, i = src[pos:start], start + 2
        if src[i : i + 1] == "-" and src[i + 1 : i + 2] in tuple(_WS):
            text, i = text.rstrip(_WS), i + 2
        items.append(("text", text, where))
        j = i
        if src.startswith("/*", i):  # a comment may hold quotes: skip it whole
            j = src.find("*/", i) + 2
            if j == 1:
                raise TemplateError(f"{where}: unclosed comment")
        quote = ""
        while j < len(src) and (quote or not src.startswith("}}", j)):
            char = src[j]
            if quote and char == "\\" and quote == '"':
                j += 1
            elif quote and char == quote:
                quote = ""
            elif not quote and char in '"`':
                quote = char
            j += 1
        if j >= len(src):
            raise TemplateError(f"{where}: unclosed action")
        body, pos = src[i:j], j + 2
        if body[-1:] == "-" and body[-2:-1] in tuple(_WS):
            body = body[:-2]
            while pos < len(src) and src[pos] in _WS:
                pos += 1
        body = body.strip()
        if not (body.startswith("/*") and body.endswith("*/")):
            items.append(("action", body, where))
    items.append(("text", src[pos:], name))
    return items


def _lex(body: str, where: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    pos = 0
    while body[pos:].strip():
        match = _TOKEN.match(body, pos)
        if not match or match.lastgroup is None:
            raise TemplateError(f"{where}: unsupported syntax at {body[pos:].strip()[:20]!r}")
        tokens.append((match.lastgroup, match.group(match.lastgroup)))
        pos = match.end()
    return tokens


def _arg(kind: str, value: str) -> _Arg:
    if kind == "str":
        return ("lit", json.loads(value))
    if kind == "raw":
        return ("lit", value[1:-1])
    if kind == "num":
        return ("lit", float(value) if "." in value else int(value))
    if kind == "var":
        name, *names = value.split(".")
        return ("var", (name, names))
    if kind == "field":
        return ("field", [n for n in value.split(".") if n])
    if value in ("true", "false", "nil"):
        return ("lit", {"true": True, "false": False, "nil": None}[value])
    return ("ident", value)


def _pipeline(tokens: list[tuple[str, str]], pos: int, where: str) -> tuple[_Pipe, int]:
    cmds: list[list[_Arg]] = [[]]
    while pos < len(tokens) and tokens[pos] != ("op", ")"):
        kind, value = tokens[pos]
        pos += 1
        if (kind, value) == ("op", "|") and cmds[-1]:
            cmds.append([])
        elif (kind, value) == ("op", "("):
            inner, pos = _pipeline(tokens, pos, where)
            if pos >= len(tokens):
                raise TemplateError(f"{where}: unclosed '('")
            cmds[-1].append(("pipe", inner))
            pos += 1
        elif kind == "op":
            raise TemplateError(f"{where}: unsupported {value!r} here (assignment with '=' is not supported)")
        else:
            cmds[-1].append(_arg(kind, value))
    if not cmds[-1]:
        raise TemplateError(f"{where}: missing command in pipeline")
    return _Pipe([], cmds), pos


def _parse_pipe(body: str, where: str, *, variables: int = 1) -> _Pipe:
    tokens = _lex(body, where)
    decl: list[str] = []
    if len(tokens) > 1 and tokens[0][0] == "var" and tokens[1] == ("op", ":="):
        decl, tokens = [tokens[0][1]], tokens[2:]
    elif len(tokens) > 3 and [t[0] for t in tokens[:3]] == ["var", "op", "var"] and tokens[3] == ("op", ":="):
        decl, tokens = [tokens[0][1], tokens[2][1]], tokens[4:]
    if len(decl) > variables or any("." in name for name in decl):
        raise TemplateError(f"{where}: unsupported declaration of {', '.join(decl)}")
    pipe, pos = _pipeline(tokens, 0, where)
    if pos != len(tokens):
        raise TemplateError(f"{where}: unexpected ')'")
    pipe.decl = decl
    return pipe


class _Parser:
    def __init__(self, items: list[tuple[str, str, str]], defines: dict[str, list[_Node]]) -> None:
        self.items, self.pos, self.defines = items, 0, defines

    def block(self) -> tuple[list[_Node], str, str, str]:
        """Nodes up to an ``end`` or ``else`` (returned with the rest of that action) or the end of input."""
        nodes: list[_Node] = []
        while self.pos < len(self.items):
            kind, body, where = self.items[self.pos]
            self.pos += 1
            if kind == "text":
                nodes.append(_Text(body))
                continue
            word, rest = [*body.split(None, 1), ""][:2]
            if word in ("end", "else"):
                return nodes, word, rest, where
            if word == "if":
                nodes.append(self.if_(rest, where))
            elif word in ("with", "range"):
                pipe = _parse_pipe(rest, where, variables=2 if word == "range" else 1)
                body_nodes, end, tail, _ = self.block()
                nodes.append(_Block(word, pipe, body_nodes, self.rest(end, tail, where), where))
            elif word in ("define", "template"):
                name_token, _, tail = rest.partition(" ")
                name = str(_arg("str", name_token)[1]) if name_token.startswith('"') else ""
                if not name:
                    raise TemplateError(f"{where}: {word} needs a quoted name")
                if word == "define":
                    self.defines[name], end, tail, _ = self.block()
                    self.expect_end(end, tail, where)
                else:
                    nodes.append(_Call(name, _parse_pipe(tail, where) if tail.strip() else None, where))
            elif word in ("block", "break", "continue"):
                raise TemplateError(f"{where}: {word!r} is not supported by this renderer")
            else:
                nodes.append(_Action(_parse_pipe(body, where), where))
        return nodes, "", "", ""

    def if_(self, cond: str, where: str) -> _If:
        branches: list[tuple[_Pipe, list[_Node]]] = []
        while True:
            body, end, tail, at = self.block()
            branches.append((_parse_pipe(cond, where), body))
            if end != "else" or not tail.startswith("if "):
                return _If(branches, self.rest(end, tail, where), where)
            cond, where = tail[3:], at

    def rest(self, end: str, tail: str, where: str) -> list[_Node]:
        """After a block's body: the ``else`` branch up to ``end`` (empty without ``else``)."""
        if end != "else":
            self.expect_end(end, tail, where)
            return []
        if tail:
            raise TemplateError(f"{where}: 'else {tail.split()[0]}' is not supported here")
        orelse, end, tail, _ = self.block()
        self.expect_end(end, tail, where)
        return orelse

    @staticmethod
    def expect_end(end: str, tail: str, where: str) -> None:
        if end != "end" or tail:
            raise TemplateError(f"{where}: action not closed by {{{{ end }}}}")


# -- values and functions ------------------------------------------------------------------------


def _floats(value: Any) -> Any:
    """Numbers as Helm reads them from values files: float64."""
    if isinstance(value, Mapping):
        return {k: _floats(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_floats(v) for v in value]
    return float(value) if isinstance(value, int) and not isinstance(value, bool) else value


def _plain(value: Any) -> Any:
    """What Helm's JSON round trip makes of a value: integral floats become integers."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return int(value)
    return value


def _go_float(value: float) -> str:
    """Go's ``%v`` of a float64: shortest digits, exponent form from 1e+06 up and below 1e-04."""
    if not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("+Inf" if value > 0 else "-Inf")
    if value == 0:
        return "0"
    exact = decimal.Decimal(repr(value)).normalize()
    sign, digits, exp = exact.as_tuple()
    assert isinstance(exp, int)
    power = len(digits) + exp - 1
    if -4 <= power < 6:
        return format(exact, "f")
    mantissa = "".join(map(str, digits))
    mantissa = mantissa[0] + ("." + mantissa[1:] if len(mantissa) > 1 else "")
    return f"{'-' if sign else ''}{mantissa}e{'+' if power >= 0 else '-'}{abs(power):02d}"


def _text(value: Any, what: str = "value") -> str:
    """A value as Go's ``%v`` prints it; maps and lists are refused (use ``toYaml``)."""
    if value is None or value is _NOTHING:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return _go_float(value)
    if isinstance(value, int | str):
        return str(value)
    raise TemplateError(f"printing a {type(value).__name__} as a {what}; pipe it to toYaml or toJson")


def _truthy(value: Any) -> bool:
    return value is not _NOTHING and bool(value)


def _typed(value: Any, kind: type, fn: str) -> Any:
    if not isinstance(value, kind) or isinstance(value, bool):
        got = "float64" if isinstance(value, float) else type(value).__name__
        raise TemplateError(f"{fn}: expected {kind.__name__}, got {got} ({value!r})")
    return value


def _indent(spaces: int, text: str) -> str:
    pad = " " * int(_typed(spaces, int, "indent"))
    return pad + str(_typed(text, str, "indent")).replace("\n", "\n" + pad)


_KINDS = ((type(None), "nil"), (bool, "bool"), (int, "int"), (float, "float64"), (str, "string"))


def _kind(value: Any) -> str:
    name = next((name for kind, name in _KINDS if isinstance(value, kind)), None)
    if name is None:
        raise TemplateError(f"eq: {type(value).__name__} values are not comparable")
    return name


def _eq(first: Any, *others: Any) -> bool:
    for other in others:
        kinds = {_kind(first), _kind(other)}
        if "nil" in kinds:
            if first is None and other is None:
                return True
        elif len(kinds) > 1:
            raise TemplateError(
                f"eq: incompatible types for comparison ({' and '.join(sorted(kinds))}); numbers from values "
                "are float64 in Helm"
            )
        elif first == other:
            return True
    return False


def _printf(fmt: str, *args: Any) -> str:
    queue = list(args)

    def verb(match: re.Match[str]) -> str:
        if match.group(1) == "%":
            return "%"
        if match.group(1) not in ("s", "v", "d", "q"):
            raise TemplateError(f"printf: only %s, %v, %d, %q and %% are supported: {fmt!r}")
        if not queue:
            raise TemplateError(f"printf: no argument for {match.group(0)} in {fmt!r}")
        value = queue.pop(0)
        if match.group(1) == "d":
            return str(_typed(value, int, "printf %d"))
        return json.dumps(_text(value)) if match.group(1) == "q" else _text(value)

    out = re.sub(r"%(.?)", verb, fmt, flags=re.S)
    if queue:
        raise TemplateError(f"printf: {len(queue)} extra argument(s) for {fmt!r}")
    return out


def _trunc(length: int, text: str) -> str:
    _typed(length, int, "trunc")
    return _typed(text, str, "trunc")[:length] if length >= 0 else text[length:]


def _required(message: str, value: Any) -> Any:
    if value is None or value == "":
        raise TemplateError(message)
    return value


def _fail(message: str) -> Any:
    raise TemplateError(message)


def _dir(path: str) -> str:
    """Go's ``path.Dir``: everything up to the last slash, cleaned (``.`` when there is no slash)."""
    head = _typed(path, str, "dir")[: path.rfind("/") + 1]
    cleaned = posixpath.normpath(head) if head else "."
    return "/" + cleaned.lstrip("/") if cleaned.startswith("//") else cleaned  # Go keeps one slash


def _to_yaml(value: Any) -> str:
    text = yaml.safe_dump(_plain(value), default_flow_style=False, sort_keys=True, width=1 << 30)
    return text.removesuffix("\n...\n").removesuffix("\n")


def _to_json(value: Any) -> str:
    text = json.dumps(_plain(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


_FUNCS: dict[str, Callable[..., Any]] = {
    "and": lambda *args: next((a for a in args if not _truthy(a)), args[-1]),
    "or": lambda *args: next((a for a in args if _truthy(a)), args[-1]),
    "not": lambda value: not _truthy(value),
    "eq": _eq,
    "ne": lambda a, b: not _eq(a, b),
    "default": lambda fallback, *given: given[0] if given and _truthy(given[0]) else fallback,
    "required": _required,
    "fail": _fail,
    "toYaml": _to_yaml,
    "toJson": _to_json,
    "indent": _indent,
    "nindent": lambda spaces, text: "\n" + _indent(spaces, text),
    "quote": lambda *args: " ".join(json.dumps(_text(a), ensure_ascii=False) for a in args if a is not None),
    "printf": _printf,
    "trunc": _trunc,
    "trimSuffix": lambda suffix, s: _typed(s, str, "trimSuffix").removesuffix(suffix),
    "replace": lambda old, new, s: _typed(s, str, "replace").replace(old, new),
    "contains": lambda part, s: _typed(part, str, "contains") in _typed(s, str, "contains"),
    "dir": _dir,
    "b64enc": lambda s: base64.b64encode(_text(s).encode()).decode(),
    "sha256sum": lambda s: hashlib.sha256(_typed(s, str, "sha256sum").encode()).hexdigest(),
}


# -- execution -----------------------------------------------------------------------------------


class _Exec:
    def __init__(self, defines: dict[str, list[_Node]]) -> None:
        self.defines = defines

    def call(self, name: str, dot: Any, where: str) -> str:
        if name not in self.defines:
            raise TemplateError(f'{where}: no template named "{name}"')
        out: list[str] = []
        self.run(self.defines[name], dot, {"$": dot}, out)
        return "".join(out)

    def run(self, nodes: list[_Node], dot: Any, env: dict[str, Any], out: list[str]) -> None:
        for node in nodes:
            if isinstance(node, _Text):
                out.append(node.text)
            elif isinstance(node, _Action):
                value = self.pipe(node.pipe, dot, env, node.where)
                if not node.pipe.decl:
                    try:
                        out.append(_text(value, "template output"))
                    except TemplateError as exc:
                        raise TemplateError(f"{node.where}: {exc}") from None
            elif isinstance(node, _Call):
                value = None if node.pipe is None else self.pipe(node.pipe, dot, env, node.where)
                out.append(self.call(node.name, value, node.where))
            elif isinstance(node, _If):
                for cond, body in node.branches:
                    if _truthy(self.pipe(cond, dot, env, node.where)):
                        self.run(body, dot, dict(env), out)
                        break
                else:
                    self.run(node.orelse, dot, dict(env), out)
            else:
                self.block(node, dot, env, out)

    def block(self, node: _Block, dot: Any, env: dict[str, Any], out: list[str]) -> None:
        value = self.pipe(_Pipe([], node.pipe.cmds), dot, env, node.where)
        if node.kind == "with":
            if _truthy(value):
                self.run(node.body, value, dict(env) | dict.fromkeys(node.pipe.decl, value), out)
            else:
                self.run(node.orelse, dot, dict(env), out)
            return
        if isinstance(value, Mapping):
            pairs: list[tuple[Any, Any]] = [(k, value[k]) for k in sorted(value)]
        elif isinstance(value, list | tuple) or value is None:
            pairs = list(enumerate(value or ()))
        else:
            raise TemplateError(f"{node.where}: range can't iterate over {value!r}")
        for key, item in pairs:
            names = node.pipe.decl  # $v := (the element) or $k, $v := (index or key, element)
            bound = dict(zip(names, (key, item)[-len(names) :], strict=True)) if names else {}
            self.run(node.body, item, dict(env) | bound, out)
        if not pairs:
            self.run(node.orelse, dot, dict(env), out)

    def pipe(self, pipe: _Pipe, dot: Any, env: dict[str, Any], where: str) -> Any:
        value = _NOTHING
        for cmd in pipe.cmds:
            value = self.command(cmd, dot, env, value, where)
        if pipe.decl:
            env[pipe.decl[0]] = value
        return value

    def command(self, cmd: list[_Arg], dot: Any, env: dict[str, Any], piped: Any, where: str) -> Any:
        kind, name = cmd[0]
        if kind != "ident":
            if len(cmd) > 1 or piped is not _NOTHING:
                raise TemplateError(f"{where}: can't give an argument to a non-function")
            return self.arg(cmd[0], dot, env, where)
        args = [self.arg(a, dot, env, where) for a in cmd[1:]]
        if piped is not _NOTHING:
            args.append(piped)
        if name == "include":
            if len(args) != 2 or not isinstance(args[0], str):
                raise TemplateError(f'{where}: include takes a template name and a value: include "x" .')
            return self.call(args[0], args[1], where)
        if name not in _FUNCS:
            known = ", ".join(sorted([*_FUNCS, "include"]))
            raise TemplateError(
                f"{where}: function {name!r} is not supported by this renderer (known: {known})"
            )
        try:
            return _FUNCS[name](*args)
        except TemplateError as exc:
            raise TemplateError(f"{where}: {exc}") from None
        except (TypeError, IndexError) as exc:
            raise TemplateError(f"{where}: {name}: wrong number or type of arguments ({exc})") from None

    def arg(self, arg: _Arg, dot: Any, env: dict[str, Any], where: str) -> Any:
        kind, value = arg
        if kind == "lit":
            return value
        if kind == "pipe":
            return self.pipe(value, dot, env, where)
        if kind == "ident":
            return self.command([arg], dot, env, _NOTHING, where)
        if kind == "var":
            if value[0] not in env:
                raise TemplateError(f"{where}: undefined variable {value[0]}")
            dot, names = env[value[0]], value[1]
        else:
            names = value
        for name in names:
            if isinstance(dot, _Struct) and name not in dot:
                raise TemplateError(f"{where}: can't evaluate field {name} (not supported by this renderer)")
            if dot is None:
                raise TemplateError(f"{where}: nil pointer evaluating interface {{}}.{name}")
            if not isinstance(dot, Mapping):
                raise TemplateError(f"{where}: can't evaluate field {name} in a {type(dot).__name__}")
            dot = dot.get(name)
        return dot


# -- the chart -----------------------------------------------------------------------------------


def _merge(base: Any, override: Any) -> Any:
    if isinstance(base, Mapping) and isinstance(override, Mapping):
        return {**base, **{k: _merge(base.get(k), v) for k, v in override.items()}}
    return override


def render_chart_text(
    chart_dir: str | Path,
    values_overrides: Mapping[str, Any] | None = None,
    release_name: str = "eni-ipam",
    namespace: str = "kube-system",
) -> dict[str, str]:
    """Every template that is not a partial (``_*.tpl``), rendered: ``templates/x.yaml`` → text."""
    chart_dir = Path(chart_dir)
    meta = yaml.load((chart_dir / "Chart.yaml").read_text(), Loader=_LOADER)
    chart = _Struct({k[:1].upper() + k[1:]: v for k, v in meta.items()})
    values = yaml.load((chart_dir / "values.yaml").read_text(), Loader=_LOADER) or {}
    values = _floats(_merge(values, values_overrides or {}))
    release = _Struct(Name=release_name, Namespace=namespace, Service="Helm", IsInstall=True, IsUpgrade=False)
    paths = sorted(
        p for p in (chart_dir / "templates").rglob("*") if p.suffix in (".yaml", ".yml", ".tpl", ".txt")
    )
    defines: dict[str, list[_Node]] = {}
    bodies: dict[str, list[_Node]] = {}
    for path in paths:
        rel = path.relative_to(chart_dir).as_posix()
        nodes, end, _, where = _Parser(_scan(path.read_text(), rel), defines).block()
        if end:
            raise TemplateError(f"{where}: unexpected {{{{ {end} }}}}")
        if not path.name.startswith("_"):
            bodies[rel] = nodes
    run = _Exec(defines)
    out: dict[str, str] = {}
    for rel, nodes in bodies.items():
        template = _Struct(Name=f"{chart['Name']}/{rel}", BasePath=f"{chart['Name']}/templates")
        root = _Struct(Values=values, Release=release, Chart=chart, Template=template)
        text: list[str] = []
        run.run(nodes, root, {"$": root}, text)
        out[rel] = "".join(text)
    return out


def _documents(texts: Mapping[str, str]) -> list[tuple[str, str, dict[str, Any]]]:
    """(template path, document text, parsed document), in Helm's install order; empty ones dropped."""
    docs: list[tuple[int, str, str, int, str, dict[str, Any]]] = []
    for path, text in texts.items():
        if path.endswith("NOTES.txt"):
            continue
        for n, chunk in enumerate(re.split(r"(?:^|\s*\n)---\s*", text.strip())):
            chunk = chunk.strip()  # as Helm stores it; it applies the document followed by a newline
            parsed = yaml.load(chunk + "\n", Loader=_LOADER) if chunk else None
            if parsed is None:
                continue
            if not isinstance(parsed, dict):
                raise TemplateError(f"{path}: document {n} is not a mapping")
            kind = str(parsed.get("kind", ""))
            rank = INSTALL_ORDER.index(kind) if kind in INSTALL_ORDER else len(INSTALL_ORDER)
            docs.append((rank, kind if rank == len(INSTALL_ORDER) else "", path, n, chunk, parsed))
    docs.sort(key=lambda d: d[:4])
    return [(d[2], d[4], d[5]) for d in docs]


def render_chart(
    chart_dir: str | Path,
    values_overrides: Mapping[str, Any] | None = None,
    release_name: str = "eni-ipam",
    namespace: str = "kube-system",
) -> list[dict[str, Any]]:
    """The chart's objects as parsed YAML documents, in Helm's install order (NOTES.txt left out)."""
    texts = render_chart_text(chart_dir, values_overrides, release_name, namespace)
    return [doc for _, _, doc in _documents(texts)]


def render_manifests(
    chart_dir: str | Path,
    values_overrides: Mapping[str, Any] | None = None,
    release_name: str = "eni-ipam",
    namespace: str = "kube-system",
    show_only: Collection[str] = (),
) -> str:
    """The stream ``helm template`` prints: each document under ``# Source:``, in install order.

    ``show_only``: template paths (``templates/x.yaml``), as ``helm template --show-only``: only their
    documents, and an error for one that renders none.
    """
    texts = render_chart_text(chart_dir, values_overrides, release_name, namespace)
    name = yaml.load((Path(chart_dir) / "Chart.yaml").read_text(), Loader=_LOADER)["name"]
    docs = _documents(texts)
    if show_only:
        rendered = {path for path, _, _ in docs}
        for wanted in show_only:
            if wanted not in rendered:
                raise TemplateError(f"could not find template {wanted} in chart")
        docs = [doc for doc in docs if doc[0] in show_only]
    return "".join(f"---\n# Source: {name}/{path}\n{text}\n" for path, text, _ in docs)
