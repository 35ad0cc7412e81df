"""``eni-ipam-cni``: the CNI IPAM plugin that hands out addresses of the node's pool.

The container runtime (or a main plugin such as ``bridge`` or ``ptp`` delegating to it) execs this
program once per container and operation. It reads the CNI environment and the network
configuration on stdin, asks the node agent over its unix socket (``POST /v1/cni/add``, ``/del``,
``/check``; see :mod:`eni_ipam.agent.api`) and prints a CNI result or a CNI error on stdout.

Invariants:

* Pure standard library and synchronous: it starts in milliseconds and never imports aiohttp.
* Spec versions 1.0.0 and 0.4.0 (``ips[].version`` only in 0.4.0). Every failure prints the spec's
  error object (``cniVersion``, ``code``, ``msg``, ``details``) on stdout and exits non-zero; the
  message names the offending environment variable or configuration field. stderr carries
  unstructured logs, and only on failures.
* Input is validated completely before the agent is contacted: bad input never changes state.
* DEL of something the agent does not know succeeds; an unreachable agent is code 11 (try again
  later) for every command, so the runtime retries rather than leaking or double-booking an address.
* The allocation owner is ``cni:<CNI_CONTAINERID>:<CNI_IFNAME>`` (the agent derives it).
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import os
import re
import socket
import sys
from collections.abc import Mapping
from typing import Any, NoReturn, TextIO

SUPPORTED_VERSIONS = ("0.4.0", "1.0.0")
DEFAULT_SOCKET = "/run/eni-ipam/agent.sock"
MAX_SOCKET_PATH = 107
"""Longest unix socket path Linux accepts (sun_path is 108 bytes with its terminating NUL)."""
DEFAULT_POOL = "default"
FAMILIES = ("ipv4", "ipv6", "dual")
REQUEST_TIMEOUT = 30.0
"""Seconds to wait for the agent (connect + answer); runtimes time a plugin out after minutes."""

# The spec's well-known error codes (0-99) used here.
INCOMPATIBLE_VERSION = 1
UNSUPPORTED_FIELD = 2
UNKNOWN_CONTAINER = 3
INVALID_ENV = 4
IO_FAILURE = 5
DECODE_FAILURE = 6
INVALID_CONFIG = 7
TRY_AGAIN_LATER = 11
# Plugin-specific codes (100+).
AGENT_ERROR = 100
FAMILY_DISABLED = 101
UNKNOWN_POOL = 102
NOT_IN_POOL = 103
ALREADY_ALLOCATED = 104
OWNER_CONFLICT = 105
ADDRESS_MISMATCH = 106

AGENT_ERROR_CODES: Mapping[str, int] = {
    "pool_exhausted": TRY_AGAIN_LATER,
    "family_disabled": FAMILY_DISABLED,
    "unknown_pool": UNKNOWN_POOL,
    "not_in_pool": NOT_IN_POOL,
    "already_allocated": ALREADY_ALLOCATED,
    "owner_conflict": OWNER_CONFLICT,
    "address_mismatch": ADDRESS_MISMATCH,
    "not_allocated": UNKNOWN_CONTAINER,
    "allocator_error": AGENT_ERROR,
}
"""The agent API's error ``code`` → the CNI error code this plugin reports. ``bad_request`` is mapped
by its ``field``: the container's identity → 4 (invalid environment), anything else → 7; an unknown
code is 11 for a 5xx answer (the agent is not ready) and 100 otherwise."""

ENV_FIELDS = frozenset({"containerID", "ifname", "netns"})
"""Fields of an agent request that come from the CNI environment rather than the configuration."""

IPAM_KEYS = frozenset({"type", "socket", "pool", "family", "routes", "defaultRoute"})

_CONTAINER_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]*")


def container_id_problem(value: str) -> str:
    """Why ``value`` is not a valid CNI container id ("" when it is)."""
    if not value:
        return "must not be empty"
    if not _CONTAINER_ID.fullmatch(value):
        return "must start with a letter or digit, followed by letters, digits, '_', '.' or '-'"
    return ""


def ifname_problem(value: str) -> str:
    """Why ``value`` is not a valid interface name inside a container ("" when it is)."""
    if not value:
        return "must not be empty"
    if value in (".", ".."):
        return "must not be '.' or '..'"
    if len(value) > 15:
        return "must be at most 15 characters"
    if any(c in "/:" or c.isspace() for c in value):
        return "must not contain '/', ':' or whitespace"
    return ""


class CniError(Exception):
    """A failure to report as the spec's error object (``code``, ``msg``, ``details``)."""

    def __init__(self, code: int, msg: str, details: str = "") -> None:
        super().__init__(f"{code} {msg}: {details}" if details else f"{code} {msg}")
        self.code = code
        self.msg = msg
        self.details = details


def _fail(code: int, msg: str, details: str = "") -> NoReturn:
    raise CniError(code, msg, details)


# --- the agent client: HTTP/1.1 over a unix socket ---------------------------------------------


class UnixHTTPConnection(http.client.HTTPConnection):
    """``http.client`` speaking to a unix socket (the Host header is a placeholder)."""

    def __init__(self, path: str, timeout: float = REQUEST_TIMEOUT) -> None:
        super().__init__("localhost", timeout=timeout)
        self.socket_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(self.socket_path)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


class AgentClient:
    def __init__(self, socket_path: str, timeout: float = REQUEST_TIMEOUT) -> None:
        self.socket_path = socket_path
        self.timeout = timeout

    def post(self, path: str, body: Mapping[str, Any]) -> tuple[int, Any]:
        """POST JSON; (status, decoded body). Unreachable/broken agent → CniError 11."""
        conn = UnixHTTPConnection(self.socket_path, self.timeout)
        try:
            conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            raw = response.read()
        except (OSError, http.client.HTTPException) as exc:
            _fail(
                TRY_AGAIN_LATER,
                "the eni-ipam agent is not reachable",
                f"{path} on {self.socket_path}: {exc or type(exc).__name__}",
            )
        finally:
            conn.close()
        try:
            return response.status, json.loads(raw)
        except (ValueError, RecursionError):
            _fail(
                AGENT_ERROR,
                "the eni-ipam agent answered something that is not JSON",
                f"{path}: {raw[:200]!r}",
            )


def _agent_error(status: int, body: Any) -> NoReturn:
    """Translate an agent error answer into the CNI error the runtime sees."""
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        _fail(AGENT_ERROR, f"the eni-ipam agent failed (HTTP {status})", json.dumps(body)[:300])
    code = str(error.get("code", ""))
    msg = str(error.get("msg", "")) or f"HTTP {status}"
    field = str(error.get("field", ""))
    if code == "bad_request":
        cni_code = INVALID_ENV if field in ENV_FIELDS else INVALID_CONFIG
        _fail(cni_code, f"the eni-ipam agent refused {field or 'the request'}", msg)
    cni_code = AGENT_ERROR_CODES.get(code, TRY_AGAIN_LATER if status >= 500 else AGENT_ERROR)
    _fail(cni_code, msg, f"agent error {code or '?'} (HTTP {status})")


# --- input -------------------------------------------------------------------------------------


class Invocation:
    """The validated environment and configuration of one call."""

    def __init__(
        self, *, command: str, version: str, container_id: str, ifname: str, netns: str, conf: dict[str, Any]
    ) -> None:
        self.command = command
        self.version = version
        self.container_id = container_id
        self.ifname = ifname
        self.netns = netns
        self.conf = conf
        ipam = conf["ipam"]
        self.socket: str = ipam.get("socket", DEFAULT_SOCKET)
        self.pool: str = ipam.get("pool", DEFAULT_POOL)
        self.family: str | None = ipam.get("family")
        self.routes: list[dict[str, str]] = [dict(r) for r in ipam.get("routes", [])]
        self.default_route: bool = ipam.get("defaultRoute", True)


def _env(environ: Mapping[str, str], name: str, required: bool) -> str:
    value = environ.get(name, "")
    if required and not value:
        _fail(INVALID_ENV, f"{name} is required for CNI_COMMAND={environ.get('CNI_COMMAND', '')}")
    return value


def parse_config(raw: str) -> dict[str, Any]:
    """Decode the network configuration and check the version (code 6 / 7 / 1)."""
    try:
        conf = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        _fail(DECODE_FAILURE, "the network configuration on stdin is not valid JSON", str(exc))
    if not isinstance(conf, dict):
        _fail(DECODE_FAILURE, "the network configuration on stdin must be a JSON object")
    version = conf.get("cniVersion")
    if not isinstance(version, str) or not version:
        _fail(INVALID_CONFIG, "cniVersion is required (a string such as 1.0.0)")
    if version not in SUPPORTED_VERSIONS:
        _fail(
            INCOMPATIBLE_VERSION,
            f"cniVersion {version} is not supported",
            f"supported versions: {', '.join(SUPPORTED_VERSIONS)}",
        )
    return conf


def validate_ipam(conf: Mapping[str, Any]) -> None:
    """Check the ``ipam`` section; messages name the field (``ipam.routes[1].dst``)."""
    ipam = conf.get("ipam")
    if not isinstance(ipam, dict):
        _fail(INVALID_CONFIG, "ipam is required (an object with type eni-ipam-cni)")
    for key in ipam:
        if key not in IPAM_KEYS:
            _fail(
                UNSUPPORTED_FIELD,
                f"ipam.{key} is not a field of eni-ipam-cni",
                f"known fields: {', '.join(sorted(IPAM_KEYS))}",
            )
    sock = ipam.get("socket", DEFAULT_SOCKET)
    if not isinstance(sock, str) or not sock.startswith("/"):
        _fail(INVALID_CONFIG, f"ipam.socket must be an absolute path, got {sock!r}")
    if len(sock.encode()) > MAX_SOCKET_PATH:
        _fail(
            INVALID_CONFIG, f"ipam.socket is longer than a unix socket path may be ({MAX_SOCKET_PATH} bytes)"
        )
    pool = ipam.get("pool", DEFAULT_POOL)
    if not isinstance(pool, str) or not pool:
        _fail(INVALID_CONFIG, f"ipam.pool must be a non-empty string, got {pool!r}")
    family = ipam.get("family")
    if family is not None and family not in FAMILIES:
        _fail(INVALID_CONFIG, f"ipam.family must be one of {', '.join(FAMILIES)}, got {family!r}")
    default_route = ipam.get("defaultRoute", True)
    if not isinstance(default_route, bool):
        _fail(INVALID_CONFIG, f"ipam.defaultRoute must be true or false, got {default_route!r}")
    routes = ipam.get("routes", [])
    if not isinstance(routes, list):
        _fail(INVALID_CONFIG, "ipam.routes must be a list of {dst, gw?} objects")
    for n, route in enumerate(routes):
        where = f"ipam.routes[{n}]"
        if not isinstance(route, dict):
            _fail(INVALID_CONFIG, f"{where} must be an object with dst and an optional gw")
        for key in route:
            if key not in ("dst", "gw"):
                _fail(UNSUPPORTED_FIELD, f"{where}.{key} is not a route field (dst, gw)")
        try:
            ipaddress.ip_network(str(route.get("dst", "")), strict=False)
        except ValueError:
            _fail(
                INVALID_CONFIG, f"{where}.dst must be a network such as 10.0.0.0/8, got {route.get('dst')!r}"
            )
        if "gw" in route:
            try:
                ipaddress.ip_address(str(route["gw"]))
            except ValueError:
                _fail(INVALID_CONFIG, f"{where}.gw must be an address, got {route['gw']!r}")


def read_env(environ: Mapping[str, str]) -> tuple[str, str, str, str]:
    """(command, container id, ifname, netns) for ADD / DEL / CHECK; code 4 naming the variable."""
    command = environ.get("CNI_COMMAND", "")
    if command not in ("ADD", "DEL", "CHECK"):
        _fail(INVALID_ENV, f"CNI_COMMAND must be one of ADD, DEL, CHECK, VERSION, got {command!r}")
    container_id = _env(environ, "CNI_CONTAINERID", True)
    problem = container_id_problem(container_id)
    if problem:
        _fail(INVALID_ENV, f"CNI_CONTAINERID {problem}", repr(container_id))
    ifname = _env(environ, "CNI_IFNAME", True)
    problem = ifname_problem(ifname)
    if problem:
        _fail(INVALID_ENV, f"CNI_IFNAME {problem}", repr(ifname))
    netns = _env(environ, "CNI_NETNS", command != "DEL")
    return command, container_id, ifname, netns


def read_stdin(stdin: TextIO) -> str:
    """All of stdin, decoded as strict UTF-8 whatever the locale (code 5 / 6)."""
    buffer = getattr(stdin, "buffer", None)
    try:
        raw: str | bytes = buffer.read() if buffer is not None else stdin.read()
    except OSError as exc:
        _fail(IO_FAILURE, "cannot read the network configuration from stdin", str(exc))
    if isinstance(raw, str):
        return raw
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        _fail(DECODE_FAILURE, "the network configuration on stdin is not UTF-8", str(exc))


# --- commands ----------------------------------------------------------------------------------


def _request(inv: Invocation) -> dict[str, Any]:
    body: dict[str, Any] = {"containerID": inv.container_id, "ifname": inv.ifname, "pool": inv.pool}
    if inv.netns:
        body["netns"] = inv.netns
    if inv.family is not None:
        body["family"] = inv.family
    return body


def build_result(version: str, ips: list[dict[str, Any]], inv: Invocation) -> dict[str, Any]:
    """The IPAM result (no ``interfaces``, no ``ips[].interface``) in the shape of ``version``."""
    result_ips: list[dict[str, Any]] = []
    routes: list[dict[str, str]] = []
    for ip in ips:
        address, prefix, gateway = str(ip["address"]), int(ip["prefixLength"]), str(ip.get("gateway") or "")
        entry: dict[str, Any] = {}
        v6 = ipaddress.ip_address(address).version == 6
        if version == "0.4.0":
            entry["version"] = "6" if v6 else "4"
        entry["address"] = f"{address}/{prefix}"
        if gateway:
            entry["gateway"] = gateway
            if inv.default_route:
                routes.append({"dst": "::/0" if v6 else "0.0.0.0/0", "gw": gateway})
        result_ips.append(entry)
    routes.extend(inv.routes)
    return {"cniVersion": version, "ips": result_ips, "routes": routes, "dns": {}}


def cmd_add(inv: Invocation, client: AgentClient) -> dict[str, Any]:
    status, body = client.post("/v1/cni/add", _request(inv))
    if status != 200:
        _agent_error(status, body)
    ips = body.get("ips") if isinstance(body, dict) else None
    if not isinstance(ips, list) or not ips:
        _fail(AGENT_ERROR, "the eni-ipam agent answered ADD without addresses", json.dumps(body)[:300])
    try:
        return build_result(inv.version, ips, inv)
    except (KeyError, TypeError, ValueError) as exc:
        _fail(AGENT_ERROR, "the eni-ipam agent answered ADD with a malformed address", repr(exc))


def cmd_del(inv: Invocation, client: AgentClient) -> None:
    status, body = client.post("/v1/cni/del", _request(inv))
    if status != 200:
        _agent_error(status, body)


def _prev_addresses(prev: Mapping[str, Any]) -> list[str]:
    ips = prev.get("ips", [])
    if not isinstance(ips, list):
        _fail(INVALID_CONFIG, "prevResult.ips must be a list")
    out: list[str] = []
    for n, ip in enumerate(ips):
        address = ip.get("address") if isinstance(ip, dict) else None
        try:
            out.append(str(ipaddress.ip_interface(str(address)).ip))
        except ValueError:
            _fail(
                INVALID_CONFIG,
                f"prevResult.ips[{n}].address must be an address in CIDR form, got {address!r}",
            )
    return out


def cmd_check(inv: Invocation, client: AgentClient) -> None:
    body = _request(inv)
    body["ips"] = _prev_addresses(inv.conf["prevResult"])
    status, answer = client.post("/v1/cni/check", body)
    if status != 200:
        _agent_error(status, answer)


def version_info() -> dict[str, Any]:
    return {"cniVersion": SUPPORTED_VERSIONS[-1], "supportedVersions": list(SUPPORTED_VERSIONS)}


def run(environ: Mapping[str, str], stdin: TextIO, stdout: TextIO, stderr: TextIO) -> int:
    """One plugin invocation; returns the exit code (0 success, 1 with an error object printed)."""
    version = SUPPORTED_VERSIONS[-1]
    command = environ.get("CNI_COMMAND", "")
    output: dict[str, Any] | None = None
    try:
        if command == "VERSION":
            output = version_info()
        else:
            command, container_id, ifname, netns = read_env(environ)
            conf = parse_config(read_stdin(stdin))
            version = conf["cniVersion"]
            validate_ipam(conf)
            if command == "CHECK" and not isinstance(conf.get("prevResult"), dict):
                _fail(INVALID_CONFIG, "prevResult is required for CHECK (the result of the previous ADD)")
            inv = Invocation(
                command=command,
                version=version,
                container_id=container_id,
                ifname=ifname,
                netns=netns,
                conf=conf,
            )
            client = AgentClient(inv.socket)
            if command == "ADD":
                output = cmd_add(inv, client)
            elif command == "DEL":
                cmd_del(inv, client)
            else:
                cmd_check(inv, client)
    except CniError as exc:
        error: dict[str, Any] = {"cniVersion": version, "code": exc.code, "msg": exc.msg}
        if exc.details:
            error["details"] = exc.details
        json.dump(error, stdout)
        stdout.write("\n")
        # One log line per failure whatever the input holds: values from the runtime are escaped.
        ident = json.dumps(environ.get("CNI_CONTAINERID", ""))
        details = f" ({json.dumps(exc.details)})" if exc.details else ""
        what = f"{json.dumps(command or '?')} {ident}"
        print(f"eni-ipam-cni: {what}: error {exc.code}: {json.dumps(exc.msg)}{details}", file=stderr)
        return 1
    if output is not None:
        json.dump(output, stdout)
        stdout.write("\n")
    return 0


def main() -> int:
    """Console entry point (``eni-ipam-cni``)."""
    return run(os.environ, sys.stdin, sys.stdout, sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
