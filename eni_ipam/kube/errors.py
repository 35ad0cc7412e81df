"""The Kubernetes API's answers, as errors (drawn with the whole tree in :mod:`eni_ipam.errors`).

:mod:`eni_ipam.kube.api` translates lightkube's and the HTTP client's exceptions into these; nothing
outside :mod:`eni_ipam.kube` sees a client library's types.
"""

from __future__ import annotations

from eni_ipam.errors import EniIpamError


class KubeError(EniIpamError):
    """The Kubernetes API refused or failed a request. ``code`` is the HTTP status (0: no answer)."""

    def __init__(self, message: str, *, code: int = 0, reason: str = "", retry_after: float | None = None):
        super().__init__(f"{code} {reason}: {message}" if code else message)
        self.code = code
        self.reason = reason
        self.message = message
        self.retry_after = retry_after


class KubeNotFound(KubeError):
    """The object does not exist (or no longer does)."""


class KubeConflict(KubeError):
    """The object changed since it was read (or already exists): re-read and retry."""


class KubeGone(KubeError):
    """The resourceVersion a watch asked for is too old: list again."""


class KubeInvalid(KubeError):
    """The API server refused the object (schema validation); the message names the field."""


class KubeForbidden(KubeError):
    """Authentication or RBAC refused the request."""


class KubeThrottled(KubeError):
    """The API server asked to back off (429); ``retry_after`` seconds when it said how long."""


class KubeUnavailable(KubeError):
    """The API server failed (5xx) or could not be reached; retry later."""
