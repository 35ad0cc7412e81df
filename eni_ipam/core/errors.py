"""The domain's errors: what a provider raises, and why the reconciler refuses a mutation.

Every provider translates its cloud's failures into :class:`ProviderError` and its subclasses at its
boundary, chaining the original as ``__cause__``, and raises :class:`LimitsUnknown` for an instance
type it knows no limits of; the reconciler raises :class:`NotReady` (a pass before the first
resync) and the mutation fence :class:`Fenced`. The whole tree, with the other packages' families,
is drawn in :mod:`eni_ipam.errors`.
"""

from __future__ import annotations

from eni_ipam.errors import EniIpamError


class NotReady(EniIpamError):
    """The initial full resync has not succeeded yet, so no mutation may run."""


class LimitsUnknown(EniIpamError):
    """No limits are known for an instance type; nodes of that type are not touched."""

    def __init__(self, instance_type: str) -> None:
        super().__init__(f"limits of instance type {instance_type!r} are unknown")
        self.instance_type = instance_type


class Fenced(EniIpamError):
    """A mutation was refused because mutations are stopped: the process is shutting down, or
    this replica lost (or never held) the leader lease."""


class Lapsed(Fenced):
    """A mutation was refused because this replica cannot prove it still leads: its last lease
    renewal is older than the renew deadline (the process was paused, or renewals are failing).

    Unlike its parent it is temporary: once a renewal succeeds, mutations pass again; if another
    replica took the lease meanwhile, the fence closes for good for this term."""


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


class InstanceOutOfScope(ProviderError):
    """The instance exists, but outside the provider's configured scope: another VPC, without the
    configured instance tags, another resource group. Its node is refused (never planned): a Node's
    providerID must not reach further than the listings do."""

    def __init__(self, instance_id: str, check: str, *, operation: str = "") -> None:
        super().__init__(
            f"instance {instance_id} is outside the configured scope: {check}",
            code="InstanceOutOfScope",
            operation=operation,
        )
        self.instance_id = instance_id
        self.check = check
        """Which check failed, in words (``its VPC vpc-2 is not the configured vpc-1``)."""


class InstanceNotRunning(ProviderError):
    """The instance is not running, so its interfaces cannot change."""


class DeviceIndexInUse(ProviderError):
    """Another interface is attached at the requested device index."""


class InvalidRequest(ProviderError):
    """The cloud rejected the request's parameters."""


class AddressInUse(InvalidRequest):
    """An address named in the request is held by another interface (EC2's
    ``InvalidIPAddress.InUse``): taken meanwhile, or by an interface the listing cannot see."""


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


class QuotaExceeded(CapacityError):
    """An account's quota was reached (EC2's network interfaces per Region, an Azure subscription's
    quota): no node's plan can change it; a higher quota, or deleting interfaces, does. A class of its
    own, so that the failure's reason names the quota rather than a limit of the node."""
