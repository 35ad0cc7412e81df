"""The driver on the agent's socket: Docker's plugin protocol over HTTP.

Every call is ``POST /<Method>`` with a JSON body (``/Plugin.Activate``, ``/IpamDriver.*``), answered with
``Content-Type: application/vnd.docker.plugins.v1+json``; a refusal is ``{"Err": message}`` with a
non-200 status. This module only checks the bodies' shape and maps refusals to statuses; what the
answers mean is :mod:`~eni_ipam.agent.libnetwork.driver`'s.

Invariants:

* Handlers call the driver synchronously on the event loop, so two requests never interleave.
* A body that is not JSON, not an object, or with a missing or mistyped field is answered 400 with an
  ``Err`` naming the problem before the driver is called: nothing changes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import structlog
from aiohttp import web

from eni_ipam.agent.cni import HugeInteger, load_json
from eni_ipam.errors import EniIpamError

from .driver import LibnetworkDriver
from .protocol import IpamRequestError, invalid

log = structlog.get_logger("eni_ipam.agent.libnetwork")

CONTENT_TYPE = "application/vnd.docker.plugins.v1+json"

Body = dict[str, Any]
Handler = Callable[[Body], Mapping[str, Any]]


def _string(body: Body, field: str) -> str:
    value = body.get(field)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise invalid(f"field {field} must be a string, got {type(value).__name__}")
    return value


def _bool(body: Body, field: str) -> bool:
    value = body.get(field)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise invalid(f"field {field} must be a boolean, got {type(value).__name__}")
    return value


MAX_OPTIONS = 64
"""Most entries of a request's ``Options`` (a pool's are saved in the registry with every change)."""
MAX_OPTION_KEY = 256
"""Longest option name (Docker's own are under 40 characters)."""
MAX_OPTION_VALUE = 4096
"""Longest option value."""


def _options(body: Body, field: str = "Options") -> dict[str, str]:
    value = body.get(field)
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise invalid(f"field {field} must be an object of strings")
    if len(value) > MAX_OPTIONS:
        raise invalid(f"field {field} has {len(value)} entries, more than the limit of {MAX_OPTIONS}")
    for key, option in value.items():
        if len(key) > MAX_OPTION_KEY:
            raise invalid(
                f"field {field} has a key of {len(key)} characters, longer than the limit of {MAX_OPTION_KEY}"
            )
        if len(option) > MAX_OPTION_VALUE:
            raise invalid(
                f"field {field}[{key!r}] has {len(option)} characters, longer than the limit of "
                f"{MAX_OPTION_VALUE}"
            )
    return dict(value)


def _required(body: Body, field: str) -> str:
    value = _string(body, field)
    if not value:
        raise invalid(f"field {field} is required")
    return value


def _reply(data: Mapping[str, Any], status: int = 200) -> web.Response:
    return web.json_response(dict(data), status=status, content_type=CONTENT_TYPE)


def _endpoint(
    method: str, handler: Handler, *, payload: bool
) -> Callable[[web.Request], Awaitable[web.Response]]:
    """``payload``: the method takes arguments; the others also accept an empty or ``null`` body."""

    async def serve(request: web.Request) -> web.Response:
        raw = await request.read()
        try:
            try:
                body = load_json(raw) if raw.strip() else None
            except HugeInteger as exc:
                raise invalid(f"{method}: {exc}") from None
            except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError included
                raise invalid(f"{method}: malformed JSON body: {exc or 'nested too deeply'}") from None
            if body is None and not payload:
                body = {}
            if not isinstance(body, dict):
                raise invalid(f"{method}: the body must be a JSON object, got {type(body).__name__}")
            return _reply(handler(body))
        except IpamRequestError as exc:
            log.info("libnetwork_request_refused", method=method, error=exc.message, status=exc.status)
            return _reply({"Err": exc.message}, exc.status)
        except EniIpamError as exc:
            log.error("libnetwork_request_failed", method=method, error=str(exc))
            return _reply({"Err": f"{method}: {exc}"}, 500)

    return serve


def add_routes(app: web.Application, driver: LibnetworkDriver) -> None:
    """Serve ``driver`` on ``app``: ``/Plugin.Activate`` and the ``/IpamDriver.*`` methods."""

    def request_pool(body: Body) -> Mapping[str, Any]:
        grant = driver.request_pool(
            address_space=_string(body, "AddressSpace"),
            pool=_string(body, "Pool"),
            sub_pool=_string(body, "SubPool"),
            options=_options(body),
            v6=_bool(body, "V6"),
        )
        return {"PoolID": grant.pool_id, "Pool": grant.pool, "Data": grant.data}

    def release_pool(body: Body) -> Mapping[str, Any]:
        driver.release_pool(_required(body, "PoolID"))
        return {}

    def request_address(body: Body) -> Mapping[str, Any]:
        address, data = driver.request_address(
            _required(body, "PoolID"), _string(body, "Address"), _options(body)
        )
        return {"Address": address, "Data": data}

    def release_address(body: Body) -> Mapping[str, Any]:
        driver.release_address(_required(body, "PoolID"), _required(body, "Address"))
        return {}

    routes: Iterable[tuple[str, Handler, bool]] = (
        ("Plugin.Activate", lambda _: {"Implements": ["IpamDriver"]}, False),
        ("IpamDriver.GetCapabilities", lambda _: driver.capabilities(), False),
        ("IpamDriver.GetDefaultAddressSpaces", lambda _: driver.default_address_spaces(), False),
        ("IpamDriver.RequestPool", request_pool, True),
        ("IpamDriver.ReleasePool", release_pool, True),
        ("IpamDriver.RequestAddress", request_address, True),
        ("IpamDriver.ReleaseAddress", release_address, True),
        ("IpamDriver.DiscoverNew", lambda _: {}, False),
        ("IpamDriver.DiscoverDelete", lambda _: {}, False),
    )
    for method, handler, payload in routes:
        app.router.add_post(f"/{method}", _endpoint(method, handler, payload=payload))
