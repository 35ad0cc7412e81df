"""``eni-ipam-cni``: the CNI IPAM plugin that hands out addresses of the node's pool.

The container runtime (or a main plugin such as ``bridge`` or ``ptp`` delegating to it) execs this
program once per container and operation. It reads the CNI environment and the network
configuration on stdin, asks the node agent over its unix socket (``POST /v1/cni/add``, ``/del``,
``/check``, ``/gc``, ``/status``; see :mod:`eni_ipam.agent.api`) and prints a CNI result or a CNI
error on stdout.

Invariants:

* Spec versions 1.1.0, 1.0.0 and 0.4.0 (``ips[].version`` only in 0.4.0). Every failure prints the
  spec's error object (``cniVersion``, ``code``, ``msg``, ``details``) on stdout and exits non-zero;
  the message names the offending environment variable or configuration field. stderr carries
  unstructured logs, and only on failures.
* Input is validated completely before the agent is contacted: bad input never changes state.
* DEL of something the agent does not know succeeds; an unreachable agent is code 11 (try again
  later) for ADD, DEL, CHECK and GC, and code 50 (not available) for STATUS. Every call is
  idempotent, so while no whole answer comes (the socket missing or refusing, the connection cut:
  the agent restarting) it is sent again for about 2.5 s first (:data:`CONNECT_RETRIES`); STATUS
  answers within about 1.5 s whatever the agent's state.
* GC and STATUS exist from ``cniVersion`` 1.1.0: below it they are refused with code 1, as the
  reference plugins refuse them.
* A requested address (CNI_ARGS ``IP=``, the ``ips`` capability) is handed out exactly, or the ADD
  fails with a code naming why; another address is never handed out instead.
* The allocation owner is ``cni:<CNI_CONTAINERID>:<CNI_IFNAME>`` (the agent derives it).

Start-up cost is the plugin's latency (a runtime execs it for every pod), so this module imports
only interpreter built-ins on the common path: ``_json`` and ``_socket`` (the C halves of ``json``
and ``socket``; the Python halves and ``http.client`` cost 3x a bare interpreter start), with a
fallback to ``json`` where the private API differs. ``ipaddress`` is imported only to check
routes, requested and previous addresses. ``scripts/build_cni_plugin.py`` turns this file into the
installed plugin: an isolated interpreter (``-I -S``) and a cached compiled copy.
"""

from __future__ import annotations

import _socket
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: typing costs start-up time
    from collections.abc import Callable, Mapping
    from typing import Any, NoReturn, TextIO

try:  # the C half only (see the module docstring)
    import _json
except ImportError:  # pragma: no cover - an interpreter without the accelerator
    _json = None  # type: ignore[assignment]

SUPPORTED_VERSIONS = ("0.4.0", "1.0.0", "1.1.0")
DEFAULT_SOCKET = "/run/eni-ipam/agent.sock"
MAX_SOCKET_PATH = 107
"""Longest unix socket path Linux accepts (sun_path is 108 bytes with its terminating NUL)."""
DEFAULT_POOL = "default"
FAMILIES = ("ipv4", "ipv6", "dual")
REQUEST_TIMEOUT = 30.0
"""Seconds to wait for the agent (connect, and then each read); runtimes time a plugin out after
minutes."""
CONNECT_RETRIES = (0.05,) + (0.1,) * 24
"""Pauses (seconds) between attempts while the agent cannot be reached, about 2.5 s in all, before
answering code 11: its socket missing or refusing (the agent restarting serves again within about
a second of its start), or the connection cut before a whole answer (the agent stopped while the
request waited or ran). Every call is idempotent (an ADD by the same owner gets the same addresses
back, a DEL of nothing succeeds, CHECK, GC and STATUS only read or converge), so a request is sent
again whole. Attempts every 0.1 s find the agent in the short while it serves between two quick
restarts. Runtimes that never retry an ADD (podman, Docker through CNI) then see no restart. A
request the agent received but does not answer (a stopped agent) is not retried: it waits out
:data:`REQUEST_TIMEOUT`."""
STATUS_TIMEOUT = 1.0
"""STATUS's deadline for the agent's answer: a runtime polls STATUS to decide whether the node is
ready, so it gets an answer within about a second and a half whatever state the agent is in
(stopped, restarting, gone)."""
STATUS_RETRIES = (0.05, 0.1, 0.1, 0.1)
"""STATUS's pauses between attempts (0.35 s in all)."""
FLOORS = {"GC": (1, 1, 0), "STATUS": (1, 1, 0)}
"""The oldest ``cniVersion`` a command exists in: the spec added GC and STATUS in 1.1.0, and the
reference plugins' ``skel`` refuses them below it with code 1."""
MAX_ANSWER = 4 << 20
"""Largest agent answer read (bytes): a pool's addresses fit many times over."""

# The spec's well-known error codes (0-99) used here.
INCOMPATIBLE_VERSION = 1
UNSUPPORTED_FIELD = 2
UNKNOWN_CONTAINER = 3
INVALID_ENV = 4
IO_FAILURE = 5
DECODE_FAILURE = 6
INVALID_CONFIG = 7
TRY_AGAIN_LATER = 11
NOT_AVAILABLE = 50
"""STATUS: the plugin cannot serve ADDs (agent unreachable or not ready, pool exhausted)."""
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
    "pool_withheld": TRY_AGAIN_LATER,
    "not_ready": TRY_AGAIN_LATER,
    "state_unwritable": TRY_AGAIN_LATER,
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
code is 11 for a 5xx answer (the agent is not ready) and 100 otherwise. STATUS reports every
failure to serve as 50."""

ENV_FIELDS = frozenset({"containerID", "ifname", "netns", "podUID", "podNamespace", "podName"})
"""Fields of an agent request that come from the CNI environment rather than the configuration."""

IPAM_KEYS = frozenset({"type", "socket", "pool", "family", "routes", "defaultRoute"})
COMMANDS = ("ADD", "DEL", "CHECK", "GC", "STATUS", "VERSION")
POD_ARGS = {"K8S_POD_UID": "podUID", "K8S_POD_NAMESPACE": "podNamespace", "K8S_POD_NAME": "podName"}
"""CNI_ARGS keys (set by the kubelet's runtime, and by podman) recorded with the allocation."""
VALID_ATTACHMENTS = "cni.dev/valid-attachments"

MAX_CONTAINER_ID = 256
"""Longest container id (runtimes use 64 hexadecimal digits); it is saved with every change."""
_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")


def container_id_problem(value: str) -> str:
    """Why ``value`` is not a valid CNI container id ("" when it is)."""
    if not value:
        return "must not be empty"
    if len(value) > MAX_CONTAINER_ID:
        return f"must be at most {MAX_CONTAINER_ID} characters"
    if not value[0].isascii() or not value[0].isalnum() or not _ID_CHARS.issuperset(value):
        return "must start with a letter or digit, followed by letters, digits, '_', '.' or '-'"
    return ""


def ifname_problem(value: str) -> str:
    """Why ``value`` is not a valid interface name inside a container ("" when it is)."""
    if not value:
        return "must not be empty"
    if value in (".", ".."):
        return "must not be '.' or '..'"
    if len(value.encode(errors="surrogateescape")) > 15:
        return "must be at most 15 bytes (the kernel's IFNAMSIZ)"
    if any(c in "/:\0" or c.isspace() for c in value):
        return "must not contain '/', ':', NUL or whitespace"
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


# --- JSON on the C accelerator alone ---------------------------------------------------------


def dumps(value: Any) -> str:
    """``json.dumps(value)`` (same text) for the JSON types this plugin writes."""
    if isinstance(value, str):
        return _quote(value)
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return int.__repr__(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_quote(str(k))}: {dumps(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(dumps(v) for v in value) + "]"
    raise TypeError(f"not JSON: {type(value).__name__}")  # pragma: no cover - plugin bug


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


MAX_DIGITS = 4300
"""Longest integer read from JSON, in digits: Python's own limit for turning text into an int
(``sys.get_int_max_str_digits``), past which ``int`` raises without saying where the number was.
No field of a network configuration or of the agent's API takes a number anywhere near it."""


class HugeInteger(ValueError):
    """A JSON document holds an integer of more than :data:`MAX_DIGITS` digits; ``field`` says where
    (``ipam.routes[0].metric``; empty: the document is that number)."""

    def __init__(self, field: str, digits: int) -> None:
        self.reason = f"an integer of {digits} digits: no field takes one"
        super().__init__(f"{field or 'the document'}: {self.reason}")
        self.field = field
        self.digits = digits


class _Huge:
    """Where :func:`parse_int` met an integer too long to read (found again by :func:`_check_integers`)."""

    __slots__ = ("digits",)

    def __init__(self, digits: int) -> None:
        self.digits = digits


_HUGE: list[_Huge] = []
"""The markers of the document being decoded (one decode at a time: the plugin is one thread, the
agent decodes on its event loop)."""


def parse_int(text: str) -> Any:
    """JSON's integers; one too long for Python is marked, not raised, so that the error can name its
    field once the document is read."""
    digits = len(text) - text.startswith("-")
    if digits > MAX_DIGITS:
        marker = _Huge(digits)
        _HUGE.append(marker)
        return marker
    return int(text)


def _check_integers(value: Any) -> Any:
    """``value``, or HugeInteger naming the first integer :func:`parse_int` marked in it."""
    if not _HUGE:
        return value
    _HUGE.clear()
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:  # depth first, in document order; no recursion (the document may be deep)
        path, item = stack.pop()
        if isinstance(item, _Huge):
            raise HugeInteger(path, item.digits)
        if isinstance(item, dict):
            children = [(f"{path}.{key}" if path else str(key), child) for key, child in item.items()]
        elif isinstance(item, list):
            children = [(f"{path}[{n}]", child) for n, child in enumerate(item)]
        else:
            continue
        stack.extend(reversed(children))
    return value  # pragma: no cover - a marker is always in the document it was made for


def load_json(text: str | bytes) -> Any:
    """``json.loads(text)`` for the agent's own endpoints; an integer too long to read is a
    :class:`HugeInteger` naming its field rather than Python's bare ValueError."""
    import json

    _HUGE.clear()
    return _check_integers(json.loads(text, parse_int=parse_int))


class _Context:
    """What ``_json.make_scanner`` reads from ``json.JSONDecoder`` (strict, plain types)."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = staticmethod(parse_int)
    parse_constant = staticmethod(_no_constant)


def _quote(text: str) -> str:
    if _json is None:  # pragma: no cover
        import json

        return json.dumps(text)
    return _json.encode_basestring_ascii(text)


def _scanner() -> Callable[[str, int], tuple[Any, int]] | None:
    try:
        scanner: Any = _json.make_scanner if _json is not None else None
        return scanner(_Context()) if scanner is not None else None
    except Exception:  # pragma: no cover - a private API that changed: use json
        return None


_SCAN = _scanner()
_SPACE = " \t\n\r"


def loads(text: str) -> Any:
    """``json.loads(text)``; raises ValueError (or RecursionError) on anything else, HugeInteger for
    an integer too long to read."""
    if _SCAN is None:  # pragma: no cover
        return load_json(text)
    _HUGE.clear()
    start = len(text) - len(text.lstrip(_SPACE))
    try:
        value, end = _SCAN(text, start)
    except StopIteration as exc:
        raise ValueError(f"expecting a value at character {exc.value}") from None
    if text[end:].strip(_SPACE):
        raise ValueError(f"extra data at character {end}")
    return _check_integers(value)


# --- the agent client: HTTP/1.1 over a unix socket, one request per connection ----------------


def _unreachable(path: str, socket_path: str, exc: BaseException) -> NoReturn:
    _fail(
        TRY_AGAIN_LATER,
        "the eni-ipam agent is not reachable",
        f"{path} on {socket_path}: {exc or type(exc).__name__}",
    )


def _http_body(raw: bytes) -> tuple[int, bytes]:
    """(status, body) of a complete HTTP/1.x answer; ValueError when it is not one."""
    head, sep, body = raw.partition(b"\r\n\r\n")
    if not sep:
        raise ValueError("the answer ended inside its headers")
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
        raise ValueError(f"not an HTTP status line: {lines[0][:80]!r}")
    chunked, length = False, -1
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value.strip())
        elif name == b"transfer-encoding":
            chunked = b"chunked" in value.lower()
    if chunked:
        body = _unchunk(body)
    elif length >= 0:
        if len(body) < length:
            raise ValueError(f"the answer ended after {len(body)} of {length} bytes")
        body = body[:length]
    return int(parts[1]), body


def _unchunk(data: bytes) -> bytes:
    out: list[bytes] = []
    while True:
        size_line, sep, data = data.partition(b"\r\n")
        if not sep:
            raise ValueError("the chunked answer ended early")
        size = int(size_line.split(b";", 1)[0], 16)
        if size == 0:
            return b"".join(out)
        if len(data) < size + 2:
            raise ValueError("the chunked answer ended inside a chunk")
        out.append(data[:size])
        data = data[size + 2 :]


class AgentClient:
    def __init__(
        self,
        socket_path: str,
        timeout: float = REQUEST_TIMEOUT,
        retries: tuple[float, ...] = CONNECT_RETRIES,
    ) -> None:
        self.socket_path = socket_path
        self.timeout = timeout
        self.retries = retries

    def post(self, path: str, body: Mapping[str, Any]) -> tuple[int, Any]:
        """POST JSON; (status, decoded body). Unreachable/broken agent → CniError 11, after
        ``retries`` pauses while no whole answer came (see :data:`CONNECT_RETRIES`)."""
        payload = dumps(body).encode()
        request = (
            f"POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n"
        ).encode() + payload
        for pause in (*self.retries, None):
            try:
                status, raw = self._exchange(request)
                break
            except _NoAnswer as exc:
                if pause is None:
                    _unreachable(path, self.socket_path, exc.cause)
                import time  # a built-in module; only a restart's path pays for it

                time.sleep(pause)
            except OSError as exc:  # a timeout: the agent took the request and does not answer
                _unreachable(path, self.socket_path, exc)
        try:
            return status, loads(raw.decode("utf-8"))
        except (ValueError, RecursionError):
            _fail(
                AGENT_ERROR,
                "the eni-ipam agent answered something that is not JSON",
                f"{path}: {raw[:200]!r}",
            )

    def _exchange(self, request: bytes) -> tuple[int, bytes]:
        """One connection: the request sent, the whole answer read. _NoAnswer when the socket is
        missing or refuses, or the connection ends before a whole answer; other OSErrors (a
        timeout) propagate."""
        chunks: list[bytes] = []
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(self.socket_path)
            sock.sendall(request)
            size = 0
            while size <= MAX_ANSWER:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
        except (FileNotFoundError, ConnectionRefusedError, ConnectionResetError, BrokenPipeError) as exc:
            raise _NoAnswer(exc) from None
        finally:
            sock.close()
        try:
            return _http_body(b"".join(chunks))
        except ValueError as exc:  # nothing, or cut short: the agent went away while answering
            raise _NoAnswer(exc) from None


class _NoAnswer(Exception):
    """No whole answer came from the agent; sending the request again is safe."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


def _agent_error(status: int, body: Any) -> NoReturn:
    """Translate an agent error answer into the CNI error the runtime sees."""
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        _fail(AGENT_ERROR, f"the eni-ipam agent failed (HTTP {status})", dumps(body)[:300])
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
        self,
        *,
        command: str,
        version: str,
        container_id: str,
        ifname: str,
        netns: str,
        conf: dict[str, Any],
        args: Mapping[str, list[str]] | None = None,
    ) -> None:
        self.command = command
        self.version = version
        self.container_id = container_id
        self.ifname = ifname
        self.netns = netns
        self.conf = conf
        self.args = args or {}
        ipam = conf["ipam"]
        self.socket: str = ipam.get("socket", DEFAULT_SOCKET)
        self.pool: str = ipam.get("pool", DEFAULT_POOL)
        self.family: str | None = ipam.get("family")
        self.routes: list[dict[str, str]] = [dict(r) for r in ipam.get("routes", [])]
        self.default_route: bool = ipam.get("defaultRoute", True)
        name = conf.get("name")
        self.network: str = name if isinstance(name, str) else ""


def _env(environ: Mapping[str, str], name: str, required: bool) -> str:
    value = environ.get(name, "")
    if required and not value:
        _fail(INVALID_ENV, f"{name} is required for CNI_COMMAND={environ.get('CNI_COMMAND', '')}")
    return value


def parse_config(raw: str) -> dict[str, Any]:
    """Decode the network configuration and check the version (code 6 / 7 / 1)."""
    try:
        conf = loads(raw)
    except HugeInteger as exc:  # valid JSON, but no field takes such a number: say which field
        _fail(INVALID_CONFIG, f"the network configuration on stdin: {exc}")
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


def _check_network(value: Any, where: str) -> None:
    import ipaddress

    try:
        ipaddress.ip_network(str(value), strict=False)
    except ValueError:
        _fail(INVALID_CONFIG, f"{where} must be a network such as 10.0.0.0/8, got {value!r}")


def _check_address(value: Any, code: int, where: str) -> str:
    """The canonical address of ``value`` (``10.0.0.5`` or ``10.0.0.5/24``), or error ``code``."""
    import ipaddress

    if isinstance(value, str):
        try:
            return str(ipaddress.ip_interface(value).ip)
        except ValueError:
            pass
    _fail(code, f"{where} must be an address such as 10.0.0.5 or 10.0.0.5/24, got {value!r}")


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
    if len(sock.encode()) > MAX_SOCKET_PATH or "\0" in sock:
        _fail(
            INVALID_CONFIG,
            f"ipam.socket must be a unix socket path: at most {MAX_SOCKET_PATH} bytes, no NUL",
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
        _check_network(route.get("dst", ""), f"{where}.dst")
        if "gw" in route and "/" in str(route["gw"]):
            _fail(INVALID_CONFIG, f"{where}.gw must be an address, got {route['gw']!r}")
        if "gw" in route:
            _check_address(route["gw"], INVALID_CONFIG, f"{where}.gw")


def parse_args(raw: str) -> dict[str, list[str]]:
    """CNI_ARGS (``K=V;K2=V2``) → {key: [values]}; a repeated key keeps every value (code 4)."""
    args: dict[str, list[str]] = {}
    for n, pair in enumerate(raw.split(";")):
        if not pair:
            continue
        key, sep, value = pair.partition("=")
        if not sep or not key:
            _fail(INVALID_ENV, f"CNI_ARGS item {n + 1} must be KEY=VALUE, got {pair[:100]!r}")
        args.setdefault(key, []).append(value)
    return args


def requested_addresses(inv: Invocation) -> list[str]:
    """The addresses the runtime asks for: CNI_ARGS ``IP=`` (comma-separated, repeatable) and the
    ``ips`` capability (``runtimeConfig.ips``), canonical and without duplicates."""
    asked: list[str] = []
    for value in inv.args.get("IP", []):
        for item in value.split(","):
            asked.append(_check_address(item.strip(), INVALID_ENV, "CNI_ARGS IP"))
    runtime = inv.conf.get("runtimeConfig")
    ips = runtime.get("ips") if isinstance(runtime, dict) else None
    if ips is not None:
        if not isinstance(ips, list):
            _fail(INVALID_CONFIG, f"runtimeConfig.ips must be a list of addresses, got {ips!r}")
        for n, item in enumerate(ips):
            asked.append(_check_address(item, INVALID_CONFIG, f"runtimeConfig.ips[{n}]"))
    return list(dict.fromkeys(asked))


def read_env(environ: Mapping[str, str]) -> tuple[str, str, str, str]:
    """(command, container id, ifname, netns); code 4 naming the variable. GC and STATUS are about
    the network, not a container: they need none of the three."""
    command = environ.get("CNI_COMMAND", "")
    if command not in COMMANDS:
        _fail(INVALID_ENV, f"CNI_COMMAND must be one of {', '.join(COMMANDS)}, got {command!r}")
    if command in ("GC", "STATUS"):
        return command, "", "", ""
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
        v6 = ":" in address
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
    body = _request(inv)
    requested = requested_addresses(inv)
    if requested:
        body["ips"] = requested
    if inv.network:
        body["network"] = inv.network
    for arg, field in POD_ARGS.items():
        values = inv.args.get(arg)
        if values and values[-1]:
            body[field] = values[-1]
    status, answer = client.post("/v1/cni/add", body)
    if status != 200:
        _agent_error(status, answer)
    ips = answer.get("ips") if isinstance(answer, dict) else None
    if not isinstance(ips, list) or not ips:
        _fail(AGENT_ERROR, "the eni-ipam agent answered ADD without addresses", dumps(answer)[:300])
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
        out.append(_check_address(address, INVALID_CONFIG, f"prevResult.ips[{n}].address"))
    return out


def cmd_check(inv: Invocation, client: AgentClient) -> None:
    body = _request(inv)
    body["ips"] = _prev_addresses(inv.conf["prevResult"])
    status, answer = client.post("/v1/cni/check", body)
    if status != 200:
        _agent_error(status, answer)


def cmd_gc(inv: Invocation, client: AgentClient) -> None:
    """Release every address of this network whose attachment the runtime no longer lists."""
    raw = inv.conf.get(VALID_ATTACHMENTS, [])
    if not isinstance(raw, list):
        _fail(INVALID_CONFIG, f"{VALID_ATTACHMENTS} must be a list of {{containerID, ifname}}")
    valid: list[dict[str, str]] = []
    for n, item in enumerate(raw):
        where = f"{VALID_ATTACHMENTS}[{n}]"
        if not isinstance(item, dict):
            _fail(INVALID_CONFIG, f"{where} must be an object with containerID and ifname")
        container_id, ifname = item.get("containerID"), item.get("ifname")
        if not isinstance(container_id, str) or container_id_problem(container_id):
            _fail(INVALID_CONFIG, f"{where}.containerID must be a container id, got {container_id!r}")
        if not isinstance(ifname, str) or ifname_problem(ifname):
            _fail(INVALID_CONFIG, f"{where}.ifname must be an interface name, got {ifname!r}")
        valid.append({"containerID": container_id, "ifname": ifname})
    if not inv.network:
        _fail(INVALID_CONFIG, "name (the network's) is required for GC: only its addresses are collected")
    body = {"network": inv.network, "pool": inv.pool, "validAttachments": valid}
    status, answer = client.post("/v1/cni/gc", body)
    if status != 200:
        _agent_error(status, answer)


def cmd_status(inv: Invocation, client: AgentClient) -> None:
    """Succeed when an ADD can be served now; code 50 (with the reason) otherwise."""
    try:
        status, answer = client.post("/v1/cni/status", {"pool": inv.pool})
        if status != 200:
            _agent_error(status, answer)
    except CniError as exc:
        if exc.code in (INVALID_CONFIG, INVALID_ENV, UNSUPPORTED_FIELD):
            raise
        raise CniError(NOT_AVAILABLE, exc.msg, exc.details) from None


def version_info(version: str) -> dict[str, Any]:
    return {"cniVersion": version, "supportedVersions": list(SUPPORTED_VERSIONS)}


def _input_version(raw: str) -> str:
    """VERSION's answer names the configuration's version when it is one this plugin speaks."""
    try:
        conf = loads(raw) if raw.strip() else None
    except (ValueError, RecursionError):
        conf = None
    version = conf.get("cniVersion") if isinstance(conf, dict) else None
    return version if version in SUPPORTED_VERSIONS else SUPPORTED_VERSIONS[-1]


def run(environ: Mapping[str, str], stdin: TextIO, stdout: TextIO, stderr: TextIO) -> int:
    """One plugin invocation; returns the exit code (0 success, 1 with an error object printed)."""
    version = SUPPORTED_VERSIONS[-1]
    command = environ.get("CNI_COMMAND", "")
    output: dict[str, Any] | None = None
    try:
        # Read first: an error names the configuration's version whenever it has a supported one.
        raw = read_stdin(stdin)
        version = _input_version(raw)
        if command == "VERSION":
            output = version_info(version)
        else:
            command, container_id, ifname, netns = read_env(environ)
            args = parse_args(environ.get("CNI_ARGS", ""))
            conf = parse_config(raw)
            version = conf["cniVersion"]
            floor = FLOORS.get(command)
            if floor is not None and tuple(int(part) for part in version.split(".")) < floor:
                _fail(
                    INCOMPATIBLE_VERSION,
                    f"config version does not allow {command}",
                    f"cniVersion {version}: {command} needs {'.'.join(map(str, floor))} or later",
                )
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
                args=args,
            )
            if command == "STATUS":
                client = AgentClient(inv.socket, STATUS_TIMEOUT, STATUS_RETRIES)
            else:
                client = AgentClient(inv.socket)
            if command == "ADD":
                output = cmd_add(inv, client)
            elif command == "DEL":
                cmd_del(inv, client)
            elif command == "CHECK":
                cmd_check(inv, client)
            elif command == "GC":
                cmd_gc(inv, client)
            else:
                cmd_status(inv, client)
    except CniError as exc:
        error: dict[str, Any] = {"cniVersion": version, "code": exc.code, "msg": exc.msg}
        if exc.details:
            error["details"] = exc.details
        stdout.write(dumps(error) + "\n")
        # One log line per failure whatever the input holds: values from the runtime are escaped.
        ident = dumps(environ.get("CNI_CONTAINERID", ""))
        details = f" ({dumps(exc.details)})" if exc.details else ""
        what = f"{dumps(command or '?')} {ident}"
        stderr.write(f"eni-ipam-cni: {what}: error {exc.code}: {dumps(exc.msg)}{details}\n")
        return 1
    if output is not None:
        stdout.write(dumps(output) + "\n")
    return 0


def main() -> int:
    """Console entry point (``eni-ipam-cni``)."""
    import os

    return run(os.environ, sys.stdin, sys.stdout, sys.stderr)


if __name__ == "__main__":
    from posix import _exit, environ

    # os.environ without importing os: the raw environment, decoded as os.environ decodes it.
    _status = run(
        {k.decode(errors="surrogateescape"): v.decode(errors="surrogateescape") for k, v in environ.items()},
        sys.stdin,
        sys.stdout,
        sys.stderr,
    )
    # Everything is said: exit without tearing the interpreter down (a plugin's latency is its
    # whole life, and nothing is left to clean up).
    sys.stdout.flush()
    sys.stderr.flush()
    _exit(_status)
