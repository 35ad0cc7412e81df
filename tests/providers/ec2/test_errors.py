import pytest

from eni_ipam.core import errors
from providers.ec2.errors import EC2_ERRORS, error_class, translate_ec2

PREFIXES_MESSAGE = (
    "There aren't sufficient free Ipv4 addresses or prefixes in the subnet to satisfy the request."
)

TABLE = [
    ("RequestLimitExceeded", "Request limit exceeded.", errors.Throttled),
    ("Throttling", "Rate exceeded", errors.Throttled),
    ("ThrottlingException", "Rate exceeded", errors.Throttled),
    ("EC2ThrottledException", "throttled", errors.Throttled),
    ("InternalError", "An internal error has occurred.", errors.TransientError),
    ("InternalFailure", "failure", errors.TransientError),
    ("ServiceUnavailable", "unavailable", errors.TransientError),
    ("Unavailable", "unavailable", errors.TransientError),
    ("InvalidNetworkInterfaceID.NotFound", "The networkInterface ID 'eni-1' does not exist", errors.NotFound),
    ("InvalidNetworkInterfaceId.Malformed", "Invalid id: 'x'", errors.NotFound),
    ("InvalidInstanceID.NotFound", "The instance ID 'i-1' does not exist", errors.NotFound),
    ("InvalidInstanceID.Malformed", "Invalid id: 'x'", errors.NotFound),
    ("InvalidSubnetID.NotFound", "The subnet ID 's-1' does not exist", errors.NotFound),
    ("InvalidGroup.NotFound", "The security group 'sg-1' does not exist", errors.NotFound),
    ("InvalidAttachmentID.NotFound", "The attachment ID 'a' does not exist", errors.NotFound),
    ("IncorrectInstanceState", "Instance 'i-1' is not 'running'.", errors.InstanceNotRunning),
    (
        "AttachmentLimitExceeded",
        "Interface count 4 exceeds the limit for m5.large",
        errors.AttachmentLimitExceeded,
    ),
    (
        "PrivateIpAddressLimitExceeded",
        "Number of private addresses will exceed limit.",
        errors.InterfaceLimitExceeded,
    ),
    ("InsufficientFreeAddressesInSubnet", "not enough free addresses", errors.SubnetExhausted),
    ("InsufficientCidrBlocks", "not enough free cidr blocks", errors.PrefixesExhausted),
    ("InvalidParameterValue", PREFIXES_MESSAGE, errors.PrefixesExhausted),
    (
        "InvalidParameterValue",
        "Instance 'i-1' already has an interface attached at device index '1'.",
        errors.DeviceIndexInUse,
    ),
    ("InvalidParameterValue", "Instance 'i-1' is not 'running'.", errors.InstanceNotRunning),
    ("InvalidParameterValue", "Some of the specified addresses are not assigned", errors.InvalidRequest),
    ("InvalidParameterCombination", "both given", errors.InvalidRequest),
    ("MissingParameter", "missing", errors.InvalidRequest),
    ("IdempotentParameterMismatch", "different parameters", errors.InvalidRequest),
    ("InvalidNetworkInterface.InUse", "Interface: [eni-1] in use.", errors.InvalidRequest),
    ("OperationNotPermitted", "cannot be detached", errors.InvalidRequest),
    ("UnauthorizedOperation", "You are not authorized", errors.Unauthorized),
    ("AuthFailure", "AWS was not able to validate the provided access credentials", errors.Unauthorized),
    ("NetworkInterfaceLimitExceeded", "account quota", errors.QuotaExceeded),
]


@pytest.mark.parametrize(("code", "message", "kind"), TABLE, ids=[f"{c}:{k.__name__}" for c, _, k in TABLE])
def test_ec2_code_translates_to_its_error_class(
    code: str, message: str, kind: type[errors.ProviderError]
) -> None:
    err = translate_ec2(code, message, "AssignPrivateIpAddresses")
    assert type(err) is kind
    assert (err.code, err.message, err.operation) == (code, message, "AssignPrivateIpAddresses")


def test_unknown_code_becomes_plain_provider_error_keeping_code_and_message() -> None:
    err = translate_ec2("SomethingNew", "the cloud grew a feature", "CreateNetworkInterface")
    assert type(err) is errors.ProviderError
    assert (err.code, err.message, err.operation) == (
        "SomethingNew",
        "the cloud grew a feature",
        "CreateNetworkInterface",
    )
    assert "SomethingNew" in str(err) and "CreateNetworkInterface" in str(err)


def test_message_rules_apply_only_to_their_code() -> None:
    assert error_class("InternalError", PREFIXES_MESSAGE) is errors.TransientError


def test_message_rules_ignore_case() -> None:
    assert error_class("InvalidParameterValue", PREFIXES_MESSAGE.upper()) is errors.PrefixesExhausted


def test_table_maps_every_code_to_a_provider_error_subclass() -> None:
    assert EC2_ERRORS, "the table is empty"
    for code, kind in EC2_ERRORS.items():
        assert issubclass(kind, errors.ProviderError), code
        assert type(translate_ec2(code, "", "Op")) is kind, code
