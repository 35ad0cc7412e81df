"""What ``eni-ipam run`` checks of a loaded configuration before it starts anything, and what
``run --check`` checks besides: the files it will read, the ports it will bind, the instance types
it names.

The configuration's values were validated when it was loaded (:func:`eni_ipam.app.runconfig.
load_config`); these checks need the machine: a kubeconfig on disk, a service account mounted, a
port another process holds, a provider's credential files, the limits tables. They have no side
effect (files are read, ports are bound and closed at once, no cloud and no API server is
reached), and every problem is collected, so that one ``run --check`` lists them all: a
:class:`~eni_ipam.errors.ConfigErrors` names each field and its fix.

``run`` makes the same checks except the ports' (it binds them itself, a moment later, and says so
when it cannot); docs/configuration.md, "What --check checks", lists them.
"""

from __future__ import annotations

import dataclasses
import errno
import socket
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from eni_ipam.app.providers import plugin
from eni_ipam.app.runconfig import ENV_PREFIX, RunConfigBase
from eni_ipam.config.suggest import closest
from eni_ipam.errors import ConfigError, combine

INSTANCE_TYPE_LABELS = ("node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type")
"""The Node labels whose values are instance types (the kubelet sets both; the beta one is older)."""


@dataclasses.dataclass(frozen=True)
class Findings:
    """What the checks found besides errors: notes worth a line, which do not stop anything."""

    notes: tuple[str, ...] = ()


def check_configuration(
    config: RunConfigBase,
    *,
    ports: bool,
    environ: Mapping[str, str] | None = None,
    found: Sequence[ConfigError] = (),
) -> Findings:
    """Check what ``config`` needs of this machine; ``ports``: also that its ports can be bound.
    ``found``: problems already known (:func:`~eni_ipam.app.runconfig.read_config`'s), listed first.

    Raises:
        ConfigError: every problem found (:class:`~eni_ipam.errors.ConfigErrors` for several), each
            naming its field and the fix.
    """
    environ = environ if environ is not None else {}
    errors: list[ConfigError] = list(found)
    notes: list[str] = []
    if config.node_source == "kubernetes":
        from eni_ipam.kube.api import load_kubeconfig  # the Kubernetes client, only when it is used

        try:
            load_kubeconfig(config.kubernetes.kubeconfig)
        except ConfigError as exc:
            errors.extend(_attributed(exc, "kubernetes.kubeconfig", environ))
    chosen = plugin(config.provider)
    try:
        chosen.check(config.provider_settings)
    except ConfigError as exc:
        errors.extend(exc.errors)
    type_errors, type_notes = _instance_types(config, getattr(chosen, "instance_types", None))
    errors += type_errors
    notes += type_notes
    if ports:
        errors += _ports(config, environ)
    problem = combine(errors)
    if problem is not None:
        raise problem
    return Findings(notes=tuple(notes))


def _attributed(exc: ConfigError, field: str, environ: Mapping[str, str]) -> list[ConfigError]:
    variable = ENV_PREFIX + field.upper().replace(".", "__")
    if not any(name.upper() == variable for name in environ):
        return list(exc.errors)
    return [ConfigError(e.field, f"{e.message} (set by {variable})") for e in exc.errors]


def _named_types(config: RunConfigBase) -> Iterator[tuple[str, str]]:
    """``(field, instance type)`` for every instance type the configuration names: the values of
    the instance-type label in ``kubernetes.node_selector`` and in the profiles' selectors."""
    for label in INSTANCE_TYPE_LABELS:
        if label in config.kubernetes.node_selector:
            yield f"kubernetes.node_selector.{label}", config.kubernetes.node_selector[label]
    for n, profile in enumerate(config.profiles):
        selector = profile.node_selector
        for label, value in selector.match_labels.items():
            if label in INSTANCE_TYPE_LABELS:
                yield f"profiles[{n}].node_selector.match_labels.{label}", value
        for m, requirement in enumerate(selector.match_expressions):
            if requirement.key in INSTANCE_TYPE_LABELS:
                for k, value in enumerate(requirement.values):
                    yield f"profiles[{n}].node_selector.match_expressions[{m}].values[{k}]", value


def _instance_types(config: RunConfigBase, known_types: Any) -> tuple[list[ConfigError], list[str]]:
    """Instance types named but unknown: errors when the provider's table is all it knows (a
    misspelt type selects no Node, silently), notes with the closest known type when the provider
    asks the cloud about the others (``aws.update_limits_via_api``: a type newer than the table)."""
    answer = known_types(config.provider_settings) if known_types is not None else None
    if answer is None:
        return [], []
    table, complete = answer
    errors: list[ConfigError] = []
    notes: list[str] = []
    for field, value in _named_types(config):
        if value in table:
            continue
        close = closest(value, table)
        if not complete:
            if close is not None:
                notes.append(f"{field}: {value!r} is not in the limits table; did you mean {close!r}?")
            continue
        hint = f" (did you mean {close!r}?)" if close else ""
        errors.append(
            ConfigError(
                field,
                f"unknown instance type {value!r}{hint}: provider {config.provider} knows no limits of "
                "it, so a Node of that type would get no address; name a known type",
            )
        )
    return errors, notes


def _ports(config: RunConfigBase, environ: Mapping[str, str]) -> list[ConfigError]:
    """Bind the endpoint's and the probes' ports together, then close them: a port another process
    holds (or the two settings naming one port) is refused now rather than when ``run`` binds."""
    server = config.server
    listeners = (("port", server.host, server.port), ("probe_port", server.probe_host, server.probe_port))
    errors: list[ConfigError] = []
    held: list[socket.socket] = []
    try:
        for key, host, port in listeners:
            if port == 0:
                continue  # the kernel picks a free one
            try:
                held.append(_bind(host, port))
            except OSError as exc:
                errors.append(_bind_error(key, host, port, exc, environ, server_port=server.port))
    finally:
        for sock in held:
            sock.close()
    return errors


def _bind(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` as the server binds it (``SO_REUSEADDR``, as asyncio does on
    POSIX: a port in TIME_WAIT is free, one a process listens on is not)."""
    family, kind, proto, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(1)  # what conflicts with another listener under SO_REUSEADDR is listen, not bind
    except BaseException:
        sock.close()
        raise
    return sock


def _bind_error(
    key: str, host: str, port: int, exc: OSError, environ: Mapping[str, str], *, server_port: int
) -> ConfigError:
    variable = f"{ENV_PREFIX}SERVER__{key.upper()}"
    fix = (
        f"choose a free port with --port, server.port or {variable}"
        if key == "port"
        else f"choose a free port with server.probe_port or {variable} (0: one the kernel picks)"
    )
    if isinstance(exc, socket.gaierror) or exc.errno == errno.EADDRNOTAVAIL:
        where = "host" if key == "port" else "probe_host"
        return ConfigError(
            f"server.{where}",
            f"cannot listen on {host}: not an address of this machine ({exc.strerror or exc}); "
            "0.0.0.0 listens on every interface",
        )
    if exc.errno == errno.EADDRINUSE and key == "probe_port" and port == server_port:
        cause = "server.port is the same port; the probes need one of their own (decision 0043)"
    elif exc.errno == errno.EADDRINUSE:
        cause = "another process listens on it"
    elif exc.errno == errno.EACCES:
        cause = "a port below 1024 needs privileges"
    else:
        cause = exc.strerror or str(exc)
    set_by = f" (set by {variable})" if any(name.upper() == variable for name in environ) else ""
    return ConfigError(f"server.{key}", f"cannot listen on {host}:{port}: {cause}{set_by}; {fix}")
