#!/usr/bin/env python3
"""Build the installed ``eni-ipam-cni`` plugin: one executable file from ``eni_ipam/agent/cni.py``.

A runtime execs the plugin for every pod, so its start-up is its latency. The built file

* runs an isolated interpreter without the site module (``-I -S``: no ``site-packages`` scan, no
  ``PYTHON*`` variables, no current directory on the path);
* is never compiled as a whole: its interpreter line runs a one-line ``-c`` program that reads the
  file's second line, the launcher, and runs it. Run as a script, Python would first read and
  tokenize the whole file, payload included: 0.8 ms of a 6 ms start, over a tenth of it;
* carries the module compiled (``marshal``) for the interpreter that built it, which the launcher
  reads, and the source, which it reads and compiles only on any other interpreter (a different
  minor version of Python): one comment line each, in hex (text any tool copies unharmed);
* still runs as a script (``python3 -I -S eni-ipam-cni``), the slower way;
* uses only the standard library, nothing from the eni-ipam package.

Usage: ``python3 scripts/build_cni_plugin.py --output PATH [--interpreter /usr/bin/python3]``. Build it
with the interpreter the host will run it with (the default interpreter line is ``/usr/bin/env -S
python3 -IS -c ...``) to get the compiled copy used; docs/node.md, "Installing".
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

BOOT = "import sys;f=open(sys.argv[1],'rb');f.readline();exec(f.readline())"
"""The interpreter line's program: the kernel appends the plugin's path as ``sys.argv[1]``; the file's
second line, the launcher, runs with ``f`` open after it. No double quote, backslash or ``$``: ``env
-S`` would read them."""
MAX_INTERPRETER_LINE = 127
"""Longest interpreter line every Linux reads whole (128 bytes with its newline before 5.1)."""
LAUNCHER = (
    "f=globals().get('f') or open(__file__,'rb');f.tell() or f.readline()+f.readline();"
    "from marshal import loads;from _frozen_importlib_external import MAGIC_NUMBER;"
    "m=bytes.fromhex(f.readline()[1:-1].decode());c=f.readline();"
    "c=loads(bytes.fromhex(c[1:-1].decode())) if m==MAGIC_NUMBER else "
    "compile(bytes.fromhex(f.readline()[1:-1].decode()),{filename!r},'exec',flags={flags},"
    "dont_inherit=True,optimize=2);"
    "f.close();del f,m;exec(c,{{'__name__':'__main__','__builtins__':__builtins__}})"
    "  # eni-ipam-cni {python}: see the end of this file"
)
"""The second line: read the bytecode's magic, then the module compiled for it or (another Python)
its source, and run it as ``__main__``. Run as a script, ``f`` is not given: it opens the file and
skips the first two lines itself."""
TRAILER = """# eni-ipam-cni: the eni-ipam CNI IPAM plugin (docs/node.md). Built by scripts/build_cni_plugin.py
# from eni_ipam/agent/cni.py for Python {python}. The interpreter line runs the second line, which
# reads the lines after it, each in hex: the bytecode's magic number, the module compiled for that
# magic, and its source (compiled only by another Python). This comment is never read.
"""
FUTURE = "from __future__ import annotations\n"


def build(*, interpreter: str = DEFAULT_INTERPRETER, source: Path = SOURCE) -> str:
    """The plugin file's text; compiled for this interpreter (``sys.executable``)."""
    program, _, options = interpreter.partition(" -IS")
    if options.strip():
        raise ValueError(f"the interpreter's options are the build's (-IS), got {interpreter!r}")
    if not program.startswith("/"):
        raise ValueError(f"the interpreter must be an absolute path, got {interpreter!r}")
    # Linux passes everything after the interpreter's path as ONE argument: "-IScPROGRAM" works;
    # anything with more words needs env -S to split it, and then the program is quoted for it.
    if program.startswith("/usr/bin/env -S "):
        line = f'#!{program} -IS -c "{BOOT}"'
    elif " " in program:
        raise ValueError(f"use /usr/bin/env -S for an interpreter with arguments, got {interpreter!r}")
    else:
        line = f"#!{program} -ISc{BOOT}"
    if len(line.encode()) > MAX_INTERPRETER_LINE:
        raise ValueError(
            f"the interpreter line would be {len(line.encode())} bytes, over {MAX_INTERPRETER_LINE}"
        )
    text = source.read_text(encoding="utf-8")
    # The future import is a real import at run time; the compiler flag has the same effect free.
    if text.count(FUTURE) != 1:
        raise ValueError(f"{source} must hold exactly one line {FUTURE.strip()!r}")
    text = text.replace(FUTURE, "\n")
    flags = __future__.annotations.compiler_flag
    code = compile(text, FILENAME, "exec", flags=flags, dont_inherit=True, optimize=2)
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    launcher = LAUNCHER.format(filename=FILENAME, flags=flags, python=python)
    payload = (MAGIC_NUMBER, marshal.dumps(code), text.encode())
    return "\n".join([line, launcher, *(f"#{part.hex()}" for part in payload), TRAILER.format(python=python)])


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
