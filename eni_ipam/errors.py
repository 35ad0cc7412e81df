"""The one exception tree of eni-ipam: its root, and the errors of bad input every layer reads.

Callers never see a cloud SDK's or a client library's exception types: every boundary translates
and chains the original as ``__cause__``. Each family lives in the package that raises it::

    EniIpamError                  eni_ipam.errors (this module)
    ├── ConfigError               bad configuration, scenario file, node spec, command-line option;
    │   │                         ``field`` names the bad value
    │   └── ConfigErrors          several at once (``errors``), the first one's ``field`` and ``message``
    ├── NotImplementedYet         a documented part that is not built yet
    ├── NotReady                  eni_ipam.core.errors: the cloud view is not synced yet; mutations
    │                             are refused
    ├── LimitsUnknown             eni_ipam.core.errors: the instance type's limits are unknown; the
    │                             node is left alone
    ├── Fenced                    eni_ipam.core.errors: mutations are stopped (shutting down, or the
    │   │                         lease was lost)
    │   └── Lapsed                the last lease renewal is older than the renew deadline (a paused
    │                             process): refused until a renewal succeeds
    ├── ProviderError             eni_ipam.core.errors: the cloud said no (``code``, ``operation``)
    │   ├── Throttled             rate limited (RequestLimitExceeded, Throttling, 429); back off
    │   ├── TransientError        5xx, timeouts, InternalError; retry later
    │   ├── NotFound              the interface / instance / subnet does not exist (any more)
    │   ├── InstanceNotRunning    the instance is stopping, stopped or terminated
    │   ├── InstanceOutOfScope    the instance is outside the configured VPC, tags or resource groups
    │   ├── DeviceIndexInUse      attach raced another interface at that device index
    │   ├── InvalidRequest        the request was malformed (a bug, or a value the cloud refuses)
    │   ├── Unauthorized          missing permission
    │   └── CapacityError         a limit was hit; the plan must change, retrying will not help
    │       ├── InterfaceLimitExceeded     per-interface address/prefix limit
    │       ├── AttachmentLimitExceeded    per-instance interface limit
    │       ├── SubnetExhausted            the subnet has too few free addresses
    │       ├── PrefixesExhausted          the subnet has no free aligned /28 (InsufficientCidrBlocks)
    │       └── QuotaExceeded              an account's quota (EC2's interfaces per Region)
    ├── KubeError                 eni_ipam.kube.errors: the Kubernetes API said no (``code``, ``reason``)
    │   ├── KubeNotFound          404
    │   ├── KubeConflict          409: stale resourceVersion (re-read and retry), or AlreadyExists
    │   ├── KubeGone              410: the watched resourceVersion is too old; relist
    │   ├── KubeInvalid           422: the object was refused (schema); names the field
    │   ├── KubeForbidden         401/403: RBAC
    │   ├── KubeThrottled         429: back off (``retry_after``)
    │   └── KubeUnavailable       5xx, connection refused or dropped; retry later
    ├── AllocatorError            eni_ipam.agent.errors: the node-local allocator refused
    │   ├── FamilyDisabled        the address family (ipv4/ipv6) is not enabled
    │   ├── FamilyNotInPool       the pool has no address of that family at all (only the other's)
    │   ├── UnknownPool           no pool of that name
    │   ├── NotInPool             the address is not in the pool (or is excluded, or held for release)
    │   ├── AlreadyAllocated      the address has an owner already
    │   ├── NotAllocated          release of an address nobody holds
    │   ├── PoolExhausted         no free address left in the pool for that family
    │   │   └── PoolWithheld      none free now: withheld while a source that may hold them is unread
    │   ├── ExpirationMismatch    stop-expiration with a UUID that is not the address's timer
    │   ├── StateNotWritten       the state file could not be written; the change was undone
    │   └── CorruptState          the allocator's state file is unreadable or invalid (``path``)
    └── DockerUnreachable         eni_ipam.agent.docker: Docker's API gave no usable view
"""

from __future__ import annotations

from collections.abc import Sequence


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

    @property
    def errors(self) -> tuple[ConfigError, ...]:
        """Every problem this error reports, one per field: this one alone (:class:`ConfigErrors`
        holds several)."""
        return (self,)


class ConfigErrors(ConfigError):
    """Several configuration problems found at once (``run --check`` lists them all, so that a
    configuration is fixed in one round rather than one field per run).

    ``field`` and ``message`` are the first problem's, so code that reads one error reads the same
    one it always did; ``errors`` holds all of them in the order found, each a :class:`ConfigError`,
    and ``str()`` is one ``field: message`` line per problem.
    """

    def __init__(self, errors: Sequence[ConfigError]) -> None:
        flat = tuple(e for error in errors for e in error.errors)
        if not flat:
            raise ValueError("ConfigErrors needs at least one error")
        super().__init__(flat[0].field, flat[0].message)
        self.args = ("\n".join(str(e) for e in flat),)
        self._errors = flat

    @property
    def errors(self) -> tuple[ConfigError, ...]:
        return self._errors


def combine(errors: Sequence[ConfigError]) -> ConfigError | None:
    """One error for ``errors``: None for none, the error itself for one, :class:`ConfigErrors`
    for several."""
    flat = [e for error in errors for e in error.errors]
    if not flat:
        return None
    return flat[0] if len(flat) == 1 else ConfigErrors(flat)


class NotImplementedYet(EniIpamError, NotImplementedError):
    """A part of eni-ipam that is documented but not built yet."""
