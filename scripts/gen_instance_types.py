#!/usr/bin/env python3
"""Generate providers/ec2/instance_types.json, the EC2 instance-type network table.

The table maps every instance type to the network limits the simulated cloud
enforces:

    {"source": "...",
     "types": {"m5.large": {"adapters": 3, "ipv4": 10, "ipv6": 10,
                            "hypervisor": "nitro", "bare_metal": false}, ...}}

``adapters`` is the maximum number of network interfaces of the *default*
network card (the ``NetworkCards`` entry whose index is
``DefaultNetworkCardIndex``; ``MaximumNetworkInterfaces`` when the type lists no
cards).  ``hypervisor`` is "nitro", "xen" or "" (bare metal or unknown).  A type
of several network cards also has ``cards``: each card's maximum interfaces, by
card index.

Inputs (exactly one of):

  --from-api --regions us-east-1,us-west-2
      Call EC2 DescribeInstanceTypes with a paginator in every region (needs
      boto3 and AWS credentials) and merge the results.
  --from-file PATH [PATH ...]
      Read saved ``aws ec2 describe-instance-types`` output: a JSON object with
      an ``InstanceTypes`` list, or a JSON list of such pages.  Several files are
      merged.  Without either option the committed snapshot
      scripts/data/describe-instance-types.json is used.

``--check`` regenerates the table in memory and exits 1 when it differs from the
file at ``--output`` (default: the shipped table), 0 when it matches.

Only the standard library is needed, except boto3 for ``--from-api``.
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUTPUT = REPO_ROOT / "providers" / "ec2" / "instance_types.json"
DEFAULT_INPUT = REPO_ROOT / "scripts" / "data" / "describe-instance-types.json"

# The conversion of one DescribeInstanceTypes record is shared with the AWS provider, which reads the
# same records from the API at run time; the package needs only the standard library.
sys.path.insert(0, str(REPO_ROOT))
from providers.ec2.limits import ROW_KEYS  # noqa: E402
from providers.ec2.limits import InstanceTypeError as InputError  # noqa: E402
from providers.ec2.limits import convert_instance_type as convert_record  # noqa: E402

__all__ = ["ROW_KEYS", "InputError", "convert_record"]

# Optional top-level key of a saved input file describing where its data came
# from; it becomes the table's "source" unless --source is given.
SOURCE_KEY = "_source"


# --------------------------------------------------------------------------
# Conversion
# --------------------------------------------------------------------------


def convert_records(records: Iterable[tuple[str, Any]]) -> dict[str, dict]:
    """Convert ``(path, record)`` pairs and merge them into one table.

    The same type may appear several times (several regions or pages); the
    copies must agree, otherwise the input is rejected.
    """
    types: dict[str, dict] = {}
    seen_at: dict[str, str] = {}
    for path, record in records:
        name, row = convert_record(record, path)
        if name in types and types[name] != row:
            raise InputError(
                f"{path}: conflicting data for {name}: {json.dumps(row, sort_keys=True)} "
                f"vs {json.dumps(types[name], sort_keys=True)} from {seen_at[name]}"
            )
        types.setdefault(name, row)
        seen_at.setdefault(name, path)
    if not types:
        raise InputError("no instance types in input")
    return types


def _page_records(doc: Any, prefix: str) -> Iterable[tuple[str, Any]]:
    """Yield ``(path, record)`` for one parsed file (a page or a list of pages)."""
    if isinstance(doc, list):
        pages = [(f"{prefix}[{i}].", page) for i, page in enumerate(doc)]
    else:
        pages = [(prefix, doc)]
    for page_prefix, page in pages:
        where = page_prefix.rstrip(".") or "top level"
        if not isinstance(page, dict):
            raise InputError(f"{where}: expected an object with an InstanceTypes list")
        if "InstanceTypes" not in page:
            raise InputError(f"{page_prefix}InstanceTypes: missing")
        items = page["InstanceTypes"]
        if not isinstance(items, list):
            raise InputError(f"{page_prefix}InstanceTypes: expected a list")
        for i, record in enumerate(items):
            yield f"{page_prefix}InstanceTypes[{i}]", record


def _doc_sources(doc: Any) -> list[str]:
    pages = doc if isinstance(doc, list) else [doc]
    out = []
    for page in pages:
        if isinstance(page, dict) and isinstance(page.get(SOURCE_KEY), str):
            out.append(page[SOURCE_KEY])
    return out


def load_files(paths: list[Path]) -> tuple[dict[str, dict], str]:
    """Read saved DescribeInstanceTypes JSON files; return (types, source).

    Error messages start with the file name, then the field path, e.g.
    ``data.json: InstanceTypes[12].NetworkInfo.Ipv4AddressesPerInterface: missing``.
    """
    records: list[tuple[str, Any]] = []
    sources: list[str] = []
    for path in paths:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from None
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}: invalid JSON: {exc}") from None
        try:
            records.extend((f"{path}: {where}", rec) for where, rec in _page_records(doc, ""))
        except InputError as exc:
            raise InputError(f"{path}: {exc}") from None
        for src in _doc_sources(doc):
            if src not in sources:
                sources.append(src)
    types = convert_records(records)
    source = " ".join(sources) if sources else "EC2 DescribeInstanceTypes (saved output)"
    return types, source


def fetch_api(regions: list[str]) -> tuple[dict[str, dict], str]:
    """Call DescribeInstanceTypes in every region and merge the results."""
    try:
        import boto3  # optional dependency, only needed for --from-api
    except ImportError:
        raise InputError("--from-api needs boto3 (pip install boto3)") from None

    aws_errors: tuple[type[BaseException], ...]
    try:
        from botocore.exceptions import BotoCoreError, ClientError

        aws_errors = (BotoCoreError, ClientError)
    except ImportError:  # a boto3 stand-in without botocore
        aws_errors = ()

    records: list[tuple[str, Any]] = []
    for region in regions:
        try:
            client = boto3.session.Session(region_name=region).client("ec2")
            paginator = client.get_paginator("describe_instance_types")
            for page_no, page in enumerate(paginator.paginate()):
                for i, record in enumerate(page.get("InstanceTypes", [])):
                    records.append((f"{region}: page {page_no}: InstanceTypes[{i}]", record))
        except aws_errors as exc:
            raise InputError(f"{region}: DescribeInstanceTypes failed: {exc}") from None
    types = convert_records(records)
    source = "EC2 DescribeInstanceTypes API, regions: " + ", ".join(sorted(regions))
    return types, source


# --------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------


def render(types: dict[str, dict], source: str) -> str:
    """Deterministic JSON text: types sorted by name, one row per line."""
    lines = ["{", f'  "source": {json.dumps(source)},', '  "types": {']
    names = sorted(types)
    for n, name in enumerate(names):
        row = types[name]
        fields = ", ".join(f"{json.dumps(k)}: {json.dumps(row[k])}" for k in ROW_KEYS if k in row)
        comma = "," if n < len(names) - 1 else ""
        lines.append(f"    {json.dumps(name)}: {{{fields}}}{comma}")
    lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Generate the EC2 instance-type network table for providers/sim.",
    )
    src = p.add_mutually_exclusive_group()
    src.add_argument(
        "--from-api", action="store_true", help="call EC2 DescribeInstanceTypes (needs boto3 and credentials)"
    )
    src.add_argument(
        "--from-file",
        nargs="+",
        type=Path,
        metavar="PATH",
        help="saved 'aws ec2 describe-instance-types' JSON output (merged)",
    )
    p.add_argument(
        "--regions", default="", help="comma-separated regions for --from-api, e.g. us-east-1,us-west-2"
    )
    p.add_argument(
        "--output",
        type=Path,
        default=DEFAULT_OUTPUT,
        help="table to write or check (default: %(default)s); '-' writes to stdout",
    )
    p.add_argument(
        "--source", default=None, help="text for the table's 'source' field (default: taken from the input)"
    )
    p.add_argument(
        "--check",
        action="store_true",
        help="do not write; exit 1 if the generated table differs from --output",
    )
    args = p.parse_args(argv)
    regions = [r.strip() for r in args.regions.split(",") if r.strip()]
    if args.from_api and not regions:
        p.error("--from-api needs --regions")
    if regions and not args.from_api:
        p.error("--regions is only used with --from-api")
    args.region_list = regions
    if not args.from_api and not args.from_file:
        args.from_file = [DEFAULT_INPUT]
    if args.check and str(args.output) == "-":
        p.error("--check needs a file for --output")
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    try:
        if args.from_api:
            types, source = fetch_api(args.region_list)
        else:
            types, source = load_files(args.from_file)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.source is not None:
        source = args.source
    text = render(types, source)

    if args.check:
        try:
            current = args.output.read_text(encoding="utf-8")
        except OSError:
            print(f"check failed: {args.output} does not exist", file=sys.stderr)
            return 1
        if current == text:
            print(f"{args.output} is up to date ({len(types)} instance types)")
            return 0
        diff = difflib.unified_diff(
            current.splitlines(keepends=True),
            text.splitlines(keepends=True),
            fromfile=str(args.output),
            tofile="generated",
            n=0,
        )
        sys.stderr.writelines(list(diff)[:40])
        print(f"check failed: {args.output} is out of date; rerun {Path(__file__).name}", file=sys.stderr)
        return 1

    if str(args.output) == "-":
        sys.stdout.write(text)
    else:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text, encoding="utf-8")
        print(f"wrote {args.output} ({len(types)} instance types)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
