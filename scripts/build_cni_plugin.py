#!/usr/bin/env python3
"""Build the installed ``eni-ipam-cni`` plugin: one executable file from ``eni_ipam/agent/cni.py``.

A runtime execs the plugin for every pod, so its start-up is its latency. The built file

* runs an isolated interpreter without the site module (``-I -S``: no ``site-packages`` scan, no
  ``PYTHON*`` variables, no current directory on the path);
* carries the module compiled (``marshal``) for the interpreter that built it, so the common case
  skips compiling 20 KB of source (about 40% of a bare interpreter start), and the source itself,
  compiled at start by any other interpreter (a different minor version of Python);
* uses only the standard library, nothing from the eni-ipam package.

Usage: ``python3 scripts/build_cni_plugin.py --output PATH [--interpreter /usr/bin/python3]``. Build it
with the interpreter the host will run it with (the default interpreter line is ``/usr/bin/env -S
python3 -IS``) to get the compiled copy used; docs/node.md, "Installing".
"""

from __future__ import annotations
import __future__

import argparse
import marshal
import os
import sys
from importlib.util import MAGIC_NUMBER
from pathlib import Path

SOURCE = Path(__file__).resolve().parent.parent / "eni_ipam" / "agent" / "cni.py"
DEFAULT_INTERPRETER = "/usr/bin/env -S python3"
FILENAME = "eni-ipam-cni"

MARKER = "# eni-ipam-cni payload: magic, code, source"
LAUNCHER = """#!{shebang}
# eni-ipam-cni: the eni-ipam CNI IPAM plugin (docs/node.md). Built by scripts/build_cni_plugin.py
# from eni_ipam/agent/cni.py. Below the launcher, each on one comment line in hex (the cheapest text
# for the interpreter to skip): the bytecode's magic number, the module compiled for Python {python},
# and its source, compiled at start by any other Python.
from marshal import loads
from _frozen_importlib_external import MAGIC_NUMBER

with open(__file__, "rb") as _file:
    _magic, _code, _source = _file.read().partition(b"\\n{marker}\\n")[2].split(b"\\n")[:3]
if bytes.fromhex(_magic[1:].decode()) == MAGIC_NUMBER:
    _code = loads(bytes.fromhex(_code[1:].decode()))
else:
    _code = compile(
        bytes.fromhex(_source[1:].decode()),
        {filename!r},
        "exec",
        flags={flags},
        dont_inherit=True,
        optimize=2,
    )
del _magic, _source
exec(_code, {{"__name__": "__main__", "__builtins__": __builtins__}})
"""
FUTURE = "from __future__ import annotations\n"


def build(*, interpreter: str = DEFAULT_INTERPRETER, source: Path = SOURCE) -> str:
    """The plugin file's text; compiled for this interpreter (``sys.executable``)."""
    shebang = interpreter if interpreter.endswith(" -IS") else f"{interpreter} -IS"
    if not shebang.startswith("/"):
        raise ValueError(f"the interpreter must be an absolute path, got {interpreter!r}")
    # Linux passes everything after the interpreter's path as ONE argument: "-IS" works; anything
    # with more words needs env -S to split it.
    if " " in shebang.partition(" ")[2] and not shebang.startswith("/usr/bin/env -S "):
        raise ValueError(f"use /usr/bin/env -S for an interpreter with arguments, got {interpreter!r}")
    text = source.read_text(encoding="utf-8")
    # The future import is a real import at run time; the compiler flag has the same effect free.
    if text.count(FUTURE) != 1:
        raise ValueError(f"{source} must hold exactly one line {FUTURE.strip()!r}")
    text = text.replace(FUTURE, "\n")
    flags = __future__.annotations.compiler_flag
    code = compile(text, FILENAME, "exec", flags=flags, dont_inherit=True, optimize=2)
    launcher = LAUNCHER.format(
        shebang=shebang,
        python=f"{sys.version_info.major}.{sys.version_info.minor}",
        marker=MARKER,
        filename=FILENAME,
        flags=flags,
    )
    payload = (MAGIC_NUMBER, marshal.dumps(code), text.encode())
    return launcher + MARKER + "\n" + "".join(f"#{part.hex()}\n" for part in payload)


def write(output: Path, text: str) -> None:
    """Write ``output`` (mode 0755) through a temporary file and a rename: never half-written."""
    tmp = output.with_name(f".{output.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.chmod(tmp, 0o755)
    os.replace(tmp, output)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", required=True, type=Path, help="where to write the plugin")
    parser.add_argument(
        "--interpreter",
        default=DEFAULT_INTERPRETER,
        help=f"the plugin's interpreter (default: {DEFAULT_INTERPRETER!r}); ' -IS' is added",
    )
    args = parser.parse_args(argv)
    if not args.output.parent.is_dir():
        parser.error(f"--output: {args.output.parent} is not a directory")
    try:
        text = build(interpreter=args.interpreter)
    except ValueError as exc:
        parser.error(f"--interpreter: {exc}")
    write(args.output, text)
    print(f"built {args.output} for Python {sys.version_info.major}.{sys.version_info.minor}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
