"""Builders shared by the in-memory cloud's tests."""

from __future__ import annotations

from collections.abc import Mapping

from eni_ipam.core.clock import LoopClock
from eni_ipam.core.model import Interface
from eni_ipam.core.ratelimit import Bucket
from providers.sim.cloud import SimCloud

ZONE = "us-east-1a"


def make_cloud(
    *,
    buckets: Mapping[str, Bucket] | None = None,
    page_size: int = 1000,
    available: int | None = None,
) -> SimCloud:
    """A cloud with vpc-1 (10.0.0.0/16): s-1 (/24, capped by ``available``), s-small (/28) and
    s-other (another zone), and security group sg-1. Unthrottled unless ``buckets`` is given."""
    cloud = SimCloud(LoopClock(), buckets=buckets, page_size=page_size)
    cloud.add_vpc("vpc-1", "10.0.0.0/16")
    cloud.add_subnet("s-1", vpc="vpc-1", zone=ZONE, cidr="10.0.0.0/24", available=available)
    cloud.add_subnet("s-small", vpc="vpc-1", zone=ZONE, cidr="10.0.1.0/28")
    cloud.add_subnet("s-other", vpc="vpc-1", zone="us-east-1b", cidr="10.0.2.0/24")
    cloud.add_security_group("sg-1", vpc="vpc-1")
    return cloud


def primary_id(cloud: SimCloud, instance_id: str) -> str:
    """Id of the instance's interface at device index 0."""
    primary = cloud.instance_view(instance_id).primary()
    assert primary is not None
    return primary.id


def interface(cloud: SimCloud, interface_id: str) -> Interface:
    """The interface as the cloud holds it now (it must exist)."""
    view = cloud.interface_view(interface_id)
    assert view is not None, f"{interface_id} does not exist"
    return view
