"""Reading what people write: YAML files and texts, bounded and checked to be plain data.

One YAML reader for every input (:func:`load_yaml_file`): a key written twice is refused with its
line, every message names the file, a file is read up to :data:`MAX_FILE_BYTES`, and aliases can
neither make a document refer to itself nor multiply it (:func:`plain_data_problem`, linear in the
document). The domain never reads files; the packages above it do, through this module.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from eni_ipam.errors import ConfigError

MAX_DEPTH = 64
"""Deepest nesting accepted in a YAML document: no configuration or scenario comes near it."""
MAX_NODES = 1_000_000
"""Most values accepted in one document (a large scenario has some thousands)."""


class _Loader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key written twice in one mapping (the later one would
    silently win, and a reader of the file would believe the earlier)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                first = seen.get(key)
            except TypeError:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping",
                    node.start_mark,
                    "found an unhashable key",
                    key_node.start_mark,
                ) from None
            if first is not None:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"duplicate key {key!r} (line {key_node.start_mark.line + 1}; first on line {first})",
                    key_node.start_mark,
                )
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


# Numbers and booleans are YAML 1.2's (its core schema), exactly: YAML 1.1's other forms are gone
# from it and surprise people. Its base-60 numbers (``1:30`` is 90: a ``ports: [22:22]`` becomes
# 1342, and a long one costs quadratic time to convert), its octal ``017`` (15, where YAML 1.2
# reads 17), its binary ``0b11``, its underscores (``1_000``) and its booleans ``yes``, ``no``,
# ``on``, ``off`` (``country: NO`` is false) are strings here, which a numeric or boolean field then
# refuses by name; YAML 1.2's own ``0o17`` is 15.
_DECIMAL = re.compile(r"[-+]?[0-9]+")
"""A YAML 1.2 decimal integer (its octal and hexadecimal forms are unsigned ``0o`` and ``0x``)."""
_YAML_1_2_OWN = ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float", "tag:yaml.org,2002:bool")
_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag not in _YAML_1_2_OWN]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool",
    re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
    list("tTfF"),
)
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:int",
    re.compile(rf"^(?:{_DECIMAL.pattern}|0o[0-7]+|0x[0-9a-fA-F]+)$"),
    list("-+0123456789"),
)
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)


def _construct_int(loader: _Loader, node: yaml.ScalarNode) -> int:
    """An int of YAML 1.2's core schema (decimal, ``0o`` octal, ``0x`` hexadecimal), or a YAML error
    naming the line for one Python cannot read (a decimal of over 4,300 digits): no setting takes
    such a number, and the message must name where it is. An explicitly tagged ``!!int`` that is
    not one of those forms is refused the same way."""
    text = str(loader.construct_scalar(node))
    try:
        if text.startswith("0o"):
            return int(text[2:], 8)
        if text.startswith("0x"):
            return int(text[2:], 16)
        if not _DECIMAL.fullmatch(text):
            raise yaml.constructor.ConstructorError(
                None, None, f"{text!r} is not an integer as YAML 1.2 writes one", node.start_mark
            )
        return int(text, 10)
    except ValueError:
        raise yaml.constructor.ConstructorError(
            None, None, f"an integer of {len(text)} digits: no setting takes one", node.start_mark
        ) from None


def _construct_float(loader: _Loader, node: yaml.ScalarNode) -> float:
    """A float of YAML 1.2's core schema (``.inf``, ``.nan`` and decimal forms)."""
    text = str(loader.construct_scalar(node))
    lowered = text.lower()
    if lowered.endswith(".inf"):
        return float("-inf") if text.startswith("-") else float("inf")
    if lowered == ".nan":
        return float("nan")
    try:
        return float(text)
    except ValueError:
        raise yaml.constructor.ConstructorError(
            None, None, f"{text!r} is not a number as YAML 1.2 writes one", node.start_mark
        ) from None


_Loader.add_constructor("tag:yaml.org,2002:int", _construct_int)
_Loader.add_constructor("tag:yaml.org,2002:float", _construct_float)

MAX_FILE_BYTES = 4 << 20
"""Largest configuration or scenario file read (4 MiB): a path to /dev/zero or a log is an error,
not an endless read."""


def load_yaml_file(path: str | Path) -> Any:
    """The YAML document in ``path``, checked to be plain data (see :func:`plain_data_problem`).

    Raises:
        ValueError: why it cannot be used: unreadable, not UTF-8, not YAML (a duplicate key
            included), nested too deeply, or referring to itself.
    """
    try:
        with open(path, "rb") as file:
            raw = file.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise ValueError(f"{path} is larger than {MAX_FILE_BYTES >> 20} MiB: not a configuration file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path} is not UTF-8 text (byte {exc.start})") from None
    return load_yaml_text(text, what=str(path))


def load_yaml_text(text: str, *, what: str) -> Any:
    """``text`` parsed as YAML and checked to be plain data; ``what`` names it in messages (a file
    name, an environment variable). Raises ValueError as :func:`load_yaml_file`."""
    try:
        loader = _Loader(text)  # checks every character first: its error can only say "<unicode string>"
    except yaml.YAMLError as exc:
        raise ValueError(f"{what} is not valid YAML: {str(exc).replace('<unicode string>', what)}") from None
    loader.name = what  # marks say where: the file's name rather than "<unicode string>"
    try:
        data = loader.get_single_data()
    except yaml.YAMLError as exc:
        raise ValueError(f"{what} is not valid YAML: {exc}") from None
    except RecursionError:
        raise ValueError(f"{what} is nested too deeply") from None
    finally:
        loader.dispose()
    problem = plain_data_problem(data)
    if problem:
        raise ValueError(f"{what} {problem}")
    return data


def plain_data_problem(data: Any) -> str:
    """Why ``data`` is not a finite tree of at most :data:`MAX_DEPTH` levels and :data:`MAX_NODES`
    values once aliases are expanded (a YAML alias can make a document refer to itself, or
    multiply it), or ``""``. Each shared value is visited once: the check is linear in the file."""
    on_path: set[int] = set()
    size: dict[int, int] = {}
    # Depth-first, with an explicit "leave" step so ``on_path`` holds exactly the current branch and
    # a value's expanded size is known once its children's are.
    stack: list[tuple[Any, int, bool]] = [(data, 0, False)]
    while stack:
        value, depth, leaving = stack.pop()
        if not isinstance(value, Mapping | list):
            continue
        children = list(value.values()) if isinstance(value, Mapping) else value
        if leaving:
            on_path.discard(id(value))
            size[id(value)] = 1 + sum(size.get(id(c), 1) for c in children)
            if size[id(value)] > MAX_NODES:
                return f"expands to more than {MAX_NODES} values (aliases multiplying it)"
            continue
        if id(value) in on_path:
            return "refers to itself (a YAML alias inside its own anchor)"
        if depth >= MAX_DEPTH:
            return f"is nested more than {MAX_DEPTH} levels deep"
        if id(value) in size:
            continue  # shared by aliases, already measured
        on_path.add(id(value))
        stack.append((value, depth, True))
        stack.extend((child, depth + 1, False) for child in children)
    return ""


def read_config_file(path: str | Path, *, field: str = "--config") -> Any:
    """The YAML document in ``path`` (``{}`` for an empty file).

    Raises:
        ConfigError: ``field``: the file cannot be read, is not UTF-8 YAML, or is not plain data.
    """
    try:
        data = load_yaml_file(path)
    except ValueError as exc:
        raise ConfigError(field, str(exc)) from None
    return {} if data is None else data
