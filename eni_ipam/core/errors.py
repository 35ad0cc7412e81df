"""The one exception tree of eni-ipam.

Callers never see a cloud SDK's exception types: every provider translates at its boundary and
chains the original as ``__cause__``. The tree::

    EniIpamError
    ├── ConfigError               bad configuration or scenario file; ``field`` names the bad value
    ├── NotReady                  the cloud view is not synced yet; mutations are refused
    ├── LimitsUnknown             the instance type's limits are unknown; the node is left alone
    ├── NotImplementedYet         a documented part that is not built yet
    ├── Fenced                    mutations are stopped (shutting down, or the lease was lost)
    ├── AllocatorError            the node-local allocator refused (``address``, ``pool``)
    │   ├── FamilyDisabled        the address family (ipv4/ipv6) is not enabled
    │   ├── UnknownPool           no pool of that name
    │   ├── NotInPool             the address is not in the pool (or is excluded, or held for release)
    │   ├── AlreadyAllocated      the address has an owner already
    │   ├── NotAllocated          release of an address nobody holds
    │   ├── PoolExhausted         no free address left in the pool for that family
    │   ├── ExpirationMismatch    stop-expiration with a UUID that is not the address's timer
    │   └── CorruptState          the allocator's state file is unreadable or invalid (``path``)
    ├── KubeError                 the Kubernetes API said no (``code``, ``reason``)
    │   ├── KubeNotFound          404
    │   ├── KubeConflict          409: stale resourceVersion (re-read and retry), or AlreadyExists
    │   ├── KubeGone              410: the watched resourceVersion is too old; relist
    │   ├── KubeInvalid           422: the object was refused (schema); names the field
    │   ├── KubeForbidden         401/403: RBAC
    │   ├── KubeThrottled         429: back off (``retry_after``)
    │   └── KubeUnavailable       5xx, connection refused or dropped; retry later
    └── ProviderError             the cloud said no (``code``, ``operation``, ``message``)
        ├── Throttled             rate limited (RequestLimitExceeded, Throttling, 429); back off
        ├── TransientError        5xx, timeouts, InternalError; retry later
        ├── NotFound              the interface / instance / subnet does not exist (any more)
        ├── InstanceNotRunning    the instance is stopping, stopped or terminated
        ├── DeviceIndexInUse      attach raced another interface at that device index
        ├── InvalidRequest        the request was malformed (a bug, or a value the cloud refuses)
        ├── Unauthorized          missing permission
        └── CapacityError         a limit was hit; the plan must change, retrying will not help
            ├── InterfaceLimitExceeded     per-interface address/prefix limit
            ├── AttachmentLimitExceeded    per-instance interface limit
            ├── SubnetExhausted            the subnet has too few free addresses
            └── PrefixesExhausted          the subnet has no free aligned /28 (InsufficientCidrBlocks)
"""

from __future__ import annotations


class EniIpamError(Exception):
    """Base of every error eni-ipam raises on purpose."""


class ConfigError(EniIpamError):
    """A configuration value is invalid: a run configuration, an agent configuration, a scenario
    file, a node spec, a command-line option. ``field`` is the path of the bad value
    (``settings.gc_interval``, ``steps[3].expect.node1.available``; empty for a whole document)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field
        self.message = message

    @property
    def path(self) -> str:
        """The same as ``field`` (the name scenario files use)."""
        return self.field


ScenarioError = ConfigError
"""A scenario file is invalid: the same error as any other configuration (``path`` is ``field``)."""


class NotReady(EniIpamError):
    """The initial full resync has not succeeded yet, so no mutation may run."""


class LimitsUnknown(EniIpamError):
    """No limits are known for an instance type; nodes of that type are not touched."""

    def __init__(self, instance_type: str) -> None:
        super().__init__(f"limits of instance type {instance_type!r} are unknown")
        self.instance_type = instance_type


class NotImplementedYet(EniIpamError, NotImplementedError):
    """A part of eni-ipam that is documented but not built yet."""


class Fenced(EniIpamError):
    """A mutation was refused because mutations are stopped: the process is shutting down, or
    this replica lost (or never held) the leader lease."""


class AllocatorError(EniIpamError):
    """The node-local allocator refused a request. ``address`` and ``pool`` say which, when known."""

    def __init__(self, message: str, *, address: str = "", pool: str = "") -> None:
        super().__init__(message)
        self.address = address
        self.pool = pool


class FamilyDisabled(AllocatorError):
    """The address family is not enabled on this node (the seed's ErrIPv4Disabled / ErrIPv6Disabled)."""


class UnknownPool(AllocatorError):
    """No pool of that name exists on this node."""


class NotInPool(AllocatorError):
    """The address is not available in the pool: not a member, excluded, or held for release."""


class AlreadyAllocated(AllocatorError):
    """The address is allocated to an owner already."""


class NotAllocated(AllocatorError):
    """The address is not allocated, so it cannot be released."""


class PoolExhausted(AllocatorError):
    """No free address of the requested family is left in the pool."""


class ExpirationMismatch(AllocatorError):
    """The UUID does not name the address's running expiration timer."""


class StateNotWritten(AllocatorError):
    """The allocator's state file could not be written (a full or failing disk): the change was
    undone, nothing was handed out or released; try again later."""


class CorruptState(AllocatorError):
    """The allocator's state file cannot be trusted: unreadable, not JSON, another format version,
    a checksum mismatch, or an invalid entry. ``path`` names the file."""

    def __init__(self, message: str, *, path: str = "") -> None:
        super().__init__(message)
        self.path = path


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


class ProviderError(EniIpamError):
    """The cloud refused or failed a call.

    ``code`` is the cloud's own error code (``InsufficientCidrBlocks``), kept verbatim even when the
    code is unknown to eni-ipam; ``operation`` the API operation (``AssignPrivateIpAddresses``).
    """

    def __init__(
        self, message: str, *, code: str = "", operation: str = "", retry_after: float | None = None
    ) -> None:
        super().__init__(f"{operation}: {code}: {message}" if operation else f"{code}: {message}")
        self.code = code
        self.operation = operation
        self.message = message
        self.retry_after = retry_after
        """Seconds the cloud asked us to wait before retrying (Azure's ``Retry-After``), when it said."""


class Throttled(ProviderError):
    """The cloud rate-limited the call; retry after backing off."""


class TransientError(ProviderError):
    """A server-side or network failure that may succeed when retried.

    A mutating call that fails this way may still have taken effect (a timeout, a lost answer;
    code ``OutcomeUnknown`` when the provider could not settle it): callers re-read before relying
    on their view."""


class NotFound(ProviderError):
    """The named resource does not exist (or no longer does)."""


class InstanceNotRunning(ProviderError):
    """The instance is not running, so its interfaces cannot change."""


class DeviceIndexInUse(ProviderError):
    """Another interface is attached at the requested device index."""


class InvalidRequest(ProviderError):
    """The cloud rejected the request's parameters."""


class Unauthorized(ProviderError):
    """The credentials lack a permission the call needs."""


class CapacityError(ProviderError):
    """A hard limit was hit; the same request will keep failing until the state changes."""


class InterfaceLimitExceeded(CapacityError):
    """The interface cannot hold more addresses or prefixes."""


class AttachmentLimitExceeded(CapacityError):
    """The instance cannot attach more interfaces."""


class SubnetExhausted(CapacityError):
    """The subnet has fewer free addresses than requested."""


class PrefixesExhausted(CapacityError):
    """The subnet has no free aligned /28 block left (fragmentation or exhaustion)."""
