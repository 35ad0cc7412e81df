"""AWS as an `eni-ipam run` plug-in: the `aws:` section is parsed by the provider, which opens on EC2."""

from __future__ import annotations

from eni_ipam.adapters.metrics import Metrics
from eni_ipam.app.providers import plugin as provider_plugin
from eni_ipam.app.runconfig import load_config_mapping
from eni_ipam.core.clock import LoopClock
from tests.providers.aws.conftest import REGION, Network


async def test_run_configuration_opens_the_aws_provider(network: Network) -> None:
    config = load_config_mapping(
        {
            "provider": "aws",
            "aws": {"region": REGION, "vpc_id": network.vpc_id},
            "settings": {"rate_limit_share": 0.5},
        }
    )
    plugin = provider_plugin(config.provider)
    metrics = Metrics()
    async with plugin.open_provider(
        config.provider_settings,
        clock=LoopClock(),
        metrics=metrics,
        rate_limit_share=config.settings.rate_limit_share,
    ) as provider:
        snapshot = await provider.resync()
        assert provider.name == "aws"
        assert network.subnet_id in snapshot.subnets
    assert (metrics.sample("eni_ipam_api_requests_total", {"operation": "DescribeSubnets"}) or 0) >= 1
