"""Azure errors → the project's error tree (:mod:`eni_ipam.core.errors`): one table and one translator.

ARM answers failures with an HTTP status and a body ``{"error": {"code", "message", "details"}}``;
a failed long-running operation ends with the same error object in its status document. The code
decides first (:data:`ARM_ERRORS`, matched case-insensitively, since resource providers are not
consistent about case); when the code is unknown, the HTTP status decides:

=========================  ============================================================
404                        :class:`~eni_ipam.core.errors.NotFound`
401, 403                   :class:`~eni_ipam.core.errors.Unauthorized`
429                        :class:`~eni_ipam.core.errors.Throttled` (``retry_after`` from the answer)
408, 412, 5xx              :class:`~eni_ipam.core.errors.TransientError`
anything else              plain :class:`~eni_ipam.core.errors.ProviderError`, keeping the code
=========================  ============================================================

The ``details`` of an error are looked at too, nested ones included:

* a capacity code among them (``SubnetIsFull``) always decides, whatever the top-level code: Compute
  and Network wrap what went wrong in generic codes (``InternalExecutionError``,
  ``NetworkingClientError``), and only the detail says that retrying will not help;
* otherwise, when the top-level code is unknown, the first known code among them decides.

A long-running operation that ends ``Canceled`` or ``Failed`` without an error object becomes
``TransientError`` with that status as its code (nothing says that retrying cannot help). An answer
whose body cannot be read (``DecodeError``, ``IncompleteReadError``: cut off or not JSON) is a
``TransientError`` too. Exceptions raised before an answer exists: ``ClientAuthenticationError`` (no
token: workload identity not set up, expired secret) → ``Unauthorized``; ``ServiceRequestError`` /
``ServiceResponseError`` (connection refused, reset, read timeout) → ``TransientError``. Callers
never see an azure-core exception type; the original is chained as ``__cause__``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Any

from azure.core.exceptions import (
    AzureError,
    ClientAuthenticationError,
    DecodeError,
    HttpResponseError,
    ServiceRequestError,
    ServiceResponseError,
)

from eni_ipam.core import errors
from eni_ipam.errors import EniIpamError

_Table = dict[str, type[errors.ProviderError]]


def _codes(kind: type[errors.ProviderError], *codes: str) -> _Table:
    return {code.lower(): kind for code in codes}


ARM_ERRORS: Mapping[str, type[errors.ProviderError]] = MappingProxyType(
    {
        **_codes(
            errors.Throttled,
            "TooManyRequests",
            "SubscriptionRequestsThrottled",
            "TenantRequestsThrottled",
            "ResourceRequestsThrottled",
            "OperationThrottled",
        ),
        # Network answers 429 RetryableErrorDueToAnotherOperation when the resource is locked by
        # another operation: a conflict that clears, not a quota.
        **_codes(
            errors.TransientError,
            "RetryableErrorDueToAnotherOperation",
            "RetryableError",
            "AnotherOperationInProgress",
            "OperationPreempted",
            "Canceled",
            "InternalServerError",
            "InternalOperationError",
            "NetworkingInternalOperationError",
            "InternalExecutionError",
            "ServiceUnavailable",
            "GatewayTimeout",
            "ReferencedResourceNotProvisioned",
            "PreconditionFailed",
            "OperationTimeout",
            # 409 Conflict: the resource is busy with another change (a generic code; the specific
            # ones, such as AnotherOperationInProgress, are above).
            "Conflict",
        ),
        **_codes(
            errors.NotFound,
            "ResourceNotFound",
            "NotFound",
            "ResourceGroupNotFound",
            "ParentResourceNotFound",
            "SubscriptionNotFound",
        ),
        **_codes(errors.SubnetExhausted, "SubnetIsFull"),
        # A subscription's quota (network interfaces, among others): what a higher quota fixes.
        **_codes(errors.QuotaExceeded, "QuotaExceeded"),
        **_codes(
            errors.InvalidRequest,
            "InvalidRequestFormat",
            "InvalidRequestContent",
            "InvalidParameter",
            "BadRequest",
            "InvalidResourceReference",
            "LinkedInvalidPropertyId",
            "InvalidResourceId",
            "PropertyChangeNotAllowed",
            "PrivateIPAddressInUse",
            "PrivateIPAddressNotInSubnet",
            "NicInUse",
            # 409: the operation is not allowed on the resource in its current state or by policy
            # (quota, a lock); retrying the same request does not help.
            "OperationNotAllowed",
        ),
        **_codes(
            errors.Unauthorized,
            "AuthorizationFailed",
            "LinkedAuthorizationFailed",
            "AuthenticationFailed",
            "InvalidAuthenticationToken",
            "InvalidAuthenticationTokenTenant",
            "ExpiredAuthenticationToken",
        ),
    }
)
"""Every ARM error code eni-ipam gives a meaning to (lowercased), by the class it becomes."""


def error_class(code: str, status: int | None) -> type[errors.ProviderError]:
    """The class an ARM error ``code`` (with its HTTP ``status``) translates to."""
    known = ARM_ERRORS.get(code.lower())
    if known is not None:
        return known
    if status == 404:
        return errors.NotFound
    if status in (401, 403):
        return errors.Unauthorized
    if status == 429:
        return errors.Throttled
    if status is not None and (status in (408, 412) or status >= 500):
        return errors.TransientError
    return errors.ProviderError


def retry_after(headers: Mapping[str, str] | None) -> float | None:
    """Seconds an answer asked us to wait (``Retry-After`` in seconds, or the millisecond headers)."""
    if not headers:
        return None
    for name, scale in (("retry-after-ms", 0.001), ("x-ms-retry-after-ms", 0.001), ("retry-after", 1.0)):
        raw = headers.get(name)
        if raw is None:
            continue
        try:
            return max(float(raw) * scale, 0.0)
        except ValueError:
            continue  # an HTTP date: rare on ARM; the caller backs off on its own
    return None


def _document(exc: HttpResponseError) -> Mapping[str, Any]:
    """The JSON answer (``{}`` when there is none, or it is not an object)."""
    response = exc.response
    if response is None:
        return {}
    try:
        document = json.loads(response.text())
    except Exception:
        return {}
    return document if isinstance(document, Mapping) else {}


def _error_body(document: Mapping[str, Any]) -> Mapping[str, Any]:
    """The ``error`` object of an answer (the answer itself when it has none)."""
    body = document.get("error", document)
    return body if isinstance(body, Mapping) else {}


def _details(body: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    """The error's ``details``, depth first, nested ones included."""
    for detail in body.get("details") or ():
        if isinstance(detail, Mapping):
            yield detail
            yield from _details(detail)


def _code_and_message(exc: HttpResponseError, body: Mapping[str, Any]) -> tuple[str, str]:
    code = str(body.get("code") or (exc.error.code if exc.error is not None else "") or "")
    message = str(body.get("message") or (exc.error.message if exc.error is not None else "") or exc.message)
    details = [d for d in _details(body) if str(d.get("code", "")).lower() in ARM_ERRORS]
    for detail in details:
        if issubclass(ARM_ERRORS[str(detail["code"]).lower()], errors.CapacityError):
            return str(detail["code"]), str(detail.get("message") or message)
    if code.lower() not in ARM_ERRORS and details:
        return str(details[0]["code"]), str(details[0].get("message") or message)
    return code, message


def _ended_without_error(document: Mapping[str, Any]) -> str:
    """``Canceled`` or ``Failed`` when the answer is a long-running operation's status document that
    ended so without an error object; ``""`` otherwise."""
    status = str(document.get("status") or "")
    if status.lower() in ("canceled", "failed") and not isinstance(document.get("error"), Mapping):
        return status
    return ""


def translate(exc: BaseException, operation: str) -> EniIpamError | None:
    """Map an azure-core exception to the project's error tree (``None``: not azure-core's)."""
    if isinstance(exc, ClientAuthenticationError) and exc.response is None:
        return errors.Unauthorized(str(exc.message), code=type(exc).__name__, operation=operation)
    if isinstance(exc, DecodeError) and (exc.status_code or 0) < 400:
        return errors.TransientError(
            f"the answer could not be read: {exc.message}", code=type(exc).__name__, operation=operation
        )
    if isinstance(exc, HttpResponseError):
        status = exc.status_code
        document = _document(exc)
        ended = _ended_without_error(document)
        if ended:
            return errors.TransientError(
                f"the operation ended {ended} without saying why", code=ended, operation=operation
            )
        code, message = _code_and_message(exc, _error_body(document))
        kind = error_class(code, status)
        headers = getattr(exc.response, "headers", None)
        wait = retry_after(headers) if issubclass(kind, errors.Throttled | errors.TransientError) else None
        return kind(message, code=code or f"HTTP{status}", operation=operation, retry_after=wait)
    if isinstance(exc, ServiceRequestError | ServiceResponseError):
        return errors.TransientError(str(exc.message), code=type(exc).__name__, operation=operation)
    if isinstance(exc, AzureError):
        return errors.ProviderError(str(exc.message), code=type(exc).__name__, operation=operation)
    return None
