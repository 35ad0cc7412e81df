"""The AWS provider passes the same Provider contract as the in-memory cloud, on moto's EC2.

moto alone is too lenient for several checks (no limits, no exhaustion, random addresses, no
prefixes); :mod:`eni_ipam_testkit.moto_ec2` makes it answer as EC2 does, so every check runs here
unchanged, through boto3, botocore's HTTP layer and moto's EC2 responses.
"""

from __future__ import annotations

import pytest

from eni_ipam.core.provider import Provider
from eni_ipam.testing.provider_contract import CONTRACT_CHECKS, Check, ContractEnv
from providers.aws import AwsProvider
from providers.ec2.limits import instance_limits
from tests.providers.aws.conftest import Network
from tests.providers.aws.test_cards_and_types import dual_stack_subnet


def as_provider(provider: AwsProvider) -> Provider:
    """Statically proves that AwsProvider satisfies the Provider protocol."""
    return provider


def contract_env(network: Network, instance_type: str = "m5.large") -> ContractEnv:
    instance = network.run_instance(instance_type)
    network.run_instance("t3.medium")  # a neighbour in the same subnet
    limits = instance_limits(instance_type)
    assert limits is not None
    return ContractEnv(
        provider=as_provider(network.provider()),
        instance_id=instance,
        limits=limits,
        subnet_id=network.subnet_id,
        small_subnet_id=network.small_subnet_id,
        security_group_ids=network.security_group_ids,
        capabilities=frozenset({"prefixes", "ipv6_prefixes"}),
        ipv6_subnet_id=dual_stack_subnet(network, "10.0.96.0/24"),
        out_of_scope_instance_id=network.instance_in_another_vpc(),
    )


@pytest.mark.parametrize("check", CONTRACT_CHECKS, ids=lambda c: c.__name__)
async def test_aws_provider_passes_contract_check_on_moto(check: Check, network: Network) -> None:
    env = contract_env(network)
    try:
        await check(env)
    finally:
        env.provider.close()  # type: ignore[attr-defined]
