"""Probes between namespaces: ``ping`` (busybox), and a TCP echo of the peer's address, so that a test
sees the source address the far end observed (what SNAT made of it).

The echo server and client are a few lines of Python run by this interpreter (``-I -S``: no site,
no environment, a start of about 20 ms), because busybox's ``nc`` can neither bind a source address
nor tell a server its peer. The server answers each connection with the peer's address and a
newline, then closes it; an IPv4 peer of its dual-stack socket reads as IPv4, not ``::ffff:…``.
"""

from __future__ import annotations

import math
import sys

BUSYBOX = "/bin/busybox"
ECHO_PORT = 7
"""The echo service's port (TCP echo's own)."""

_SERVER = """
import socket, sys
port = int(sys.argv[1])
try:
    s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("::", port))
except OSError:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port))
s.listen(128)
print("ready", flush=True)
while True:
    c, peer = s.accept()
    host = peer[0][7:] if peer[0].startswith("::ffff:") else peer[0]
    try:
        c.sendall((host + "\\n").encode())
    except OSError:
        pass
    c.close()
"""

_CLIENT = """
import socket, sys
address, port, source, timeout = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
family = socket.AF_INET6 if ":" in address else socket.AF_INET
s = socket.socket(family, socket.SOCK_STREAM)
s.settimeout(timeout)
try:
    if source:
        s.bind((source, 0))
    s.connect((address, port))
    data = b""
    while not data.endswith(b"\\n"):
        chunk = s.recv(256)
        if not chunk:
            break
        data += chunk
except OSError as e:
    print(e, file=sys.stderr)
    sys.exit(1)
sys.stdout.write(data.decode())
"""


def echo_server_argv(port: int = ECHO_PORT) -> list[str]:
    """The echo server's command line; it prints ``ready`` once it listens."""
    return [sys.executable, "-I", "-S", "-c", _SERVER, str(port)]


def echo_client_argv(address: str, port: int, source: str | None, timeout: float) -> list[str]:
    """A client of the echo server: prints what the server saw as its address, exits 1 on failure."""
    return [sys.executable, "-I", "-S", "-c", _CLIENT, address, str(port), source or "", str(timeout)]


def ping_argv(address: str, source: str | None, count: int, timeout: float) -> list[str]:
    """busybox ping: exits 0 when a reply came back within ``timeout`` seconds (whole seconds)."""
    family = "-6" if ":" in address else "-4"
    argv = [BUSYBOX, "ping", family, "-q", "-c", str(count), "-W", str(max(1, math.ceil(timeout)))]
    if source:
        argv += ["-I", source]
    return [*argv, address]
