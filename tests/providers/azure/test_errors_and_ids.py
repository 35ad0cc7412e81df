"""ARM errors translate into the project's error tree (never an azure-core type), and ARM ids are
normalized and parsed the way the provider relies on."""

from __future__ import annotations

import json
from typing import Any

import pytest
from azure.core.exceptions import (
    ClientAuthenticationError,
    DecodeError,
    HttpResponseError,
    IncompleteReadError,
    ResourceNotFoundError,
    ServiceRequestError,
    ServiceResponseError,
)
from azure.core.rest import HttpRequest

from eni_ipam.core import errors
from eni_ipam_testkit.fake_azure import FakeResponse
from providers.azure import ids
from providers.azure.errors import ARM_ERRORS, translate

OP = "NetworkInterfaces.CreateOrUpdate"


def answer(status: int, body: Any, headers: dict[str, str] | None = None) -> FakeResponse:
    request = HttpRequest("PUT", "https://management.azure.com/x")
    return FakeResponse(request, status, json.dumps(body).encode(), headers or {})


def arm_error(
    status: int, code: str, headers: dict[str, str] | None = None, kind: type = HttpResponseError
) -> Any:
    return kind(response=answer(status, {"error": {"code": code, "message": f"{code} happened"}}, headers))


@pytest.mark.parametrize(
    ("status", "code", "expected"),
    [
        (400, "SubnetIsFull", errors.SubnetExhausted),
        (409, "QuotaExceeded", errors.QuotaExceeded),
        (400, "subnetisfull", errors.SubnetExhausted),
        (404, "ResourceNotFound", errors.NotFound),
        (404, "ResourceGroupNotFound", errors.NotFound),
        (404, "SomethingElse", errors.NotFound),
        (403, "AuthorizationFailed", errors.Unauthorized),
        (403, "Forbidden", errors.Unauthorized),
        (401, "InvalidAuthenticationToken", errors.Unauthorized),
        (429, "TooManyRequests", errors.Throttled),
        (429, "SubscriptionRequestsThrottled", errors.Throttled),
        (429, "Unheard", errors.Throttled),
        (429, "RetryableErrorDueToAnotherOperation", errors.TransientError),
        (409, "AnotherOperationInProgress", errors.TransientError),
        (409, "Conflict", errors.TransientError),
        (409, "OperationNotAllowed", errors.InvalidRequest),
        (412, "PreconditionFailed", errors.TransientError),
        (500, "InternalServerError", errors.TransientError),
        (503, "Whatever", errors.TransientError),
        (400, "NicInUse", errors.InvalidRequest),
        (400, "InvalidRequestFormat", errors.InvalidRequest),
        (400, "NoSuchCode", errors.ProviderError),
    ],
)
def test_arm_answers_translate_by_code_then_by_status(status: int, code: str, expected: type) -> None:
    result = translate(arm_error(status, code), OP)
    assert type(result) is expected
    assert isinstance(result, errors.ProviderError)
    assert (result.code, result.operation, result.message) == (code, OP, f"{code} happened")


def test_throttled_and_transient_errors_carry_retry_after() -> None:
    throttled = translate(arm_error(429, "TooManyRequests", {"Retry-After": "17"}), OP)
    assert isinstance(throttled, errors.Throttled) and throttled.retry_after == 17
    locked = translate(arm_error(429, "RetryableErrorDueToAnotherOperation", {"retry-after-ms": "1500"}), OP)
    assert isinstance(locked, errors.TransientError) and locked.retry_after == 1.5
    refused = translate(arm_error(400, "SubnetIsFull", {"Retry-After": "3"}), OP)
    assert isinstance(refused, errors.SubnetExhausted) and refused.retry_after is None


def test_sdk_error_types_translate_too() -> None:
    assert type(translate(arm_error(404, "NotFound", kind=ResourceNotFoundError), OP)) is errors.NotFound
    no_token = translate(ClientAuthenticationError("no workload identity token"), OP)
    assert type(no_token) is errors.Unauthorized and no_token.code == "ClientAuthenticationError"
    for exc in (ServiceRequestError("refused"), ServiceResponseError("reset")):
        assert type(translate(exc, OP)) is errors.TransientError
    assert translate(ValueError("not Azure's"), OP) is None


def test_a_failed_operation_is_classified_by_its_details_when_its_code_is_generic() -> None:
    body = {
        "status": "Failed",
        "error": {
            "code": "NetworkingClientError",
            "message": "outer",
            "details": [{"code": "SubnetIsFull", "message": "Subnet nodes is full"}],
        },
    }
    result = translate(HttpResponseError(response=answer(200, body)), OP)
    assert isinstance(result, errors.SubnetExhausted)
    assert (result.code, result.message) == ("SubnetIsFull", "Subnet nodes is full")


def test_a_capacity_code_in_the_details_decides_over_a_known_generic_code() -> None:
    body = {
        "status": "Failed",
        "error": {
            "code": "InternalExecutionError",
            "message": "outer",
            "details": [
                {"code": "InternalServerError", "message": "wrapped"},
                {"code": "NetworkingClientError", "details": [{"code": "SubnetIsFull", "message": "full"}]},
            ],
        },
    }
    result = translate(HttpResponseError(response=answer(200, body)), OP)
    assert isinstance(result, errors.SubnetExhausted)
    assert (result.code, result.message) == ("SubnetIsFull", "full")


def test_a_known_code_whose_details_say_nothing_more_is_kept() -> None:
    body = {
        "error": {
            "code": "InternalExecutionError",
            "message": "outer",
            "details": [{"code": "InvalidParameter", "message": "inner"}],
        }
    }
    result = translate(HttpResponseError(response=answer(200, body)), OP)
    assert type(result) is errors.TransientError and result.code == "InternalExecutionError"


@pytest.mark.parametrize("status", ["Canceled", "Failed"])
def test_an_operation_that_ended_without_an_error_object_is_transient(status: str) -> None:
    result = translate(HttpResponseError(response=answer(200, {"status": status, "name": "op"})), OP)
    assert type(result) is errors.TransientError
    assert (result.code, result.operation) == (status, OP)


@pytest.mark.parametrize("kind", [DecodeError, IncompleteReadError])
def test_an_answer_that_cannot_be_read_is_transient(kind: type[HttpResponseError]) -> None:
    request = HttpRequest("GET", "https://management.azure.com/x")
    cut = FakeResponse(request, 200, b'{"value": [{"na', {})
    result = translate(kind("the body was cut off", response=cut), OP)
    assert type(result) is errors.TransientError and result.code == kind.__name__


def test_error_table_keys_are_lowercase() -> None:
    assert all(code == code.lower() for code in ARM_ERRORS)


SUB = "00000000-0000-4000-8000-000000000001"
RG = f"/subscriptions/{SUB}/resourceGroups/MC_rg"


def test_ids_are_normalized_lowercase_without_trailing_slash() -> None:
    vm = f"{RG}/providers/Microsoft.Compute/virtualMachines/Node-1/"
    assert ids.normalize(vm) == vm.rstrip("/").lower()
    assert ids.same(vm, vm.upper())


def test_instance_ids_parse_for_standalone_and_scale_set_vms_only() -> None:
    vm = ids.parse_instance(f"{RG}/providers/Microsoft.Compute/virtualMachines/Node-1")
    assert vm == ids.VmRef(SUB, "mc_rg", "node-1")
    assert vm is not None and vm.id == f"{RG}/providers/Microsoft.Compute/virtualMachines/Node-1".lower()
    ss = ids.parse_instance(
        f"{RG}/providers/Microsoft.Compute/virtualMachineScaleSets/aks-pool-vmss/virtualMachines/3"
    )
    assert ss == ids.ScaleSetVmRef(SUB, "mc_rg", "aks-pool-vmss", "3")
    for other in ("i-0123456789abcdef0", f"{RG}/providers/Microsoft.Network/networkInterfaces/nic", ""):
        assert ids.parse_instance(other) is None


def test_nic_ids_parse_for_standalone_and_scale_set_nics() -> None:
    nic = ids.parse_nic(f"{RG}/providers/Microsoft.Network/networkInterfaces/Nic-A")
    assert nic == ids.NicRef(SUB, "mc_rg", "nic-a") and nic is not None and not nic.in_scale_set
    ss_nic_id = (
        f"{RG}/providers/Microsoft.Compute/virtualMachineScaleSets/pool/virtualMachines/0/networkInterfaces/n"
    )
    ss_nic = ids.parse_nic(ss_nic_id)
    assert ss_nic is not None and ss_nic.in_scale_set and ss_nic.id == ss_nic_id.lower()
    assert ss_nic.vm.id == ss_nic_id.lower().rsplit("/networkinterfaces/", 1)[0]
    assert ids.parse_nic("eni-0123") is None


def test_subnet_ids_name_their_virtual_network() -> None:
    vnet = f"{RG}/providers/Microsoft.Network/virtualNetworks/Hub"
    assert ids.vnet_of_subnet(f"{vnet}/subnets/Nodes") == vnet.lower()
    assert ids.vnet_of_subnet(vnet) == ""
    assert ids.parse_vnet(vnet) == ids.VnetRef(SUB, "mc_rg", "hub")
