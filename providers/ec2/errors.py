"""EC2 error codes → the project's error tree (:mod:`eni_ipam.core.errors`), in one table.

Every provider that speaks EC2 (the boto3 provider and the in-memory sim) translates through
:func:`translate_ec2`, so a code means the same thing whichever cloud produced it. The reconciler
decides on error *classes* (back off on :class:`~eni_ipam.core.errors.Throttled`, change the plan on a
:class:`~eni_ipam.core.errors.CapacityError`), never on code strings; the code is kept verbatim on the
error for metrics and logs.

EC2 overloads ``InvalidParameterValue``: a few of its messages mean a specific, actionable condition
(the reference operator matches the same substrings), so :data:`MESSAGE_RULES` is consulted before
:data:`EC2_ERRORS`. Unknown codes become a plain :class:`~eni_ipam.core.errors.ProviderError` keeping the
code and message, never a guess.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from eni_ipam.core import errors

_Table = dict[str, type[errors.ProviderError]]


def _codes(kind: type[errors.ProviderError], *codes: str) -> _Table:
    return dict.fromkeys(codes, kind)


EC2_ERRORS: Mapping[str, type[errors.ProviderError]] = MappingProxyType(
    {
        # Throttling: botocore's throttling codes that EC2 (and its endpoints) can answer.
        **_codes(
            errors.Throttled,
            "RequestLimitExceeded",
            "Throttling",
            "ThrottlingException",
            "ThrottledException",
            "RequestThrottled",
            "RequestThrottledException",
            "TooManyRequestsException",
            "EC2ThrottledException",
        ),
        **_codes(
            errors.TransientError,
            "InternalError",
            "InternalFailure",
            "ServiceUnavailable",
            "Unavailable",
            "RequestTimeout",
            "RequestTimeoutException",
        ),
        # A malformed id names nothing that exists: callers asking "does it exist?" get "no".
        **_codes(
            errors.NotFound,
            "InvalidNetworkInterfaceID.NotFound",
            "InvalidNetworkInterfaceID.Malformed",
            "InvalidNetworkInterfaceId.Malformed",
            "InvalidInstanceID.NotFound",
            "InvalidInstanceID.Malformed",
            "InvalidSubnetID.NotFound",
            "InvalidSubnetID.Malformed",
            "InvalidGroup.NotFound",
            "InvalidGroupId.Malformed",
            "InvalidSecurityGroupID.NotFound",
            "InvalidAttachmentID.NotFound",
            "InvalidAttachmentID.Malformed",
            "InvalidVpcID.NotFound",
            "InvalidVpcID.Malformed",
        ),
        **_codes(errors.InstanceNotRunning, "IncorrectInstanceState"),
        **_codes(errors.AttachmentLimitExceeded, "AttachmentLimitExceeded"),
        **_codes(errors.InterfaceLimitExceeded, "PrivateIpAddressLimitExceeded"),
        **_codes(errors.SubnetExhausted, "InsufficientFreeAddressesInSubnet"),
        **_codes(errors.PrefixesExhausted, "InsufficientCidrBlocks"),
        # The account's interface quota: a hard limit, but not one of the per-node limits.
        **_codes(errors.QuotaExceeded, "NetworkInterfaceLimitExceeded"),
        **_codes(
            errors.InvalidRequest,
            "InvalidParameterValue",
            "InvalidParameterCombination",
            "InvalidParameter",
            "MissingParameter",
            "UnknownParameter",
            "IdempotentParameterMismatch",
            "InvalidNetworkInterface.InUse",
            "OperationNotPermitted",
            "UnsupportedOperation",
            "InvalidNextToken",
            "InvalidInstanceType",
            "ValidationError",
        ),
        **_codes(errors.AddressInUse, "InvalidIPAddress.InUse"),
        **_codes(
            errors.Unauthorized,
            "UnauthorizedOperation",
            "AuthFailure",
            "InvalidClientTokenId",
            "SignatureDoesNotMatch",
            "AccessDenied",
            "AccessDeniedException",
            "OptInRequired",
        ),
    }
)
"""Every EC2 error code eni-ipam gives a meaning to, by the class it becomes."""

MESSAGE_RULES: tuple[tuple[str, str, type[errors.ProviderError]], ...] = (
    # (code, lower-case message substring, class); the first match wins.
    (
        "InvalidParameterValue",
        "there aren't sufficient free ipv4 addresses or prefixes",
        errors.PrefixesExhausted,
    ),
    ("InvalidParameterValue", "interface attached at device", errors.DeviceIndexInUse),
    ("InvalidParameterValue", "is not 'running'", errors.InstanceNotRunning),
    # An address named in PrivateIpAddresses that another interface holds (EC2's documented code is
    # InvalidIPAddress.InUse; some answers say it under InvalidParameterValue).
    ("InvalidParameterValue", "already in use", errors.AddressInUse),
    ("InvalidParameterValue", "already been assigned", errors.AddressInUse),
)
"""Messages that give an overloaded code a specific meaning, checked before :data:`EC2_ERRORS`."""


def error_class(code: str, message: str = "") -> type[errors.ProviderError]:
    """The error class an EC2 ``code`` (with its ``message``) translates to."""
    lowered = message.lower()
    for rule_code, needle, kind in MESSAGE_RULES:
        if code == rule_code and needle in lowered:
            return kind
    return EC2_ERRORS.get(code, errors.ProviderError)


def translate_ec2(code: str, message: str, operation: str) -> errors.ProviderError:
    """Translate one EC2 error into the project's error tree.

    Args:
        code: EC2's error code (``InsufficientCidrBlocks``), kept verbatim on the result.
        message: EC2's error message; some ``InvalidParameterValue`` messages refine the class.
        operation: the EC2 operation that failed (``AssignPrivateIpAddresses``).

    Returns:
        An instance of the matching :class:`~eni_ipam.core.errors.ProviderError` subclass, or of
        ``ProviderError`` itself for a code eni-ipam does not know.
    """
    return error_class(code, message)(message, code=code, operation=operation)
