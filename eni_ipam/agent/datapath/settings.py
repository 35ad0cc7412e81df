"""The ``datapath:`` section of the agent's configuration (docs/node.md, "The node datapath").

Off by default: a host whose CNI already routes pod traffic (bridge on the primary interface, a
Docker host's ipvlan or macvlan) needs none of it, and turning it on changes the host's routing.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator

from eni_ipam.config.schema import Cidr, ConfigModel, FieldError, PositiveDuration

MAX_TABLE_BASE = 2**31 - 10_000
"""Highest base: every table id (base + 100 × card + device index) stays a valid 32-bit table id."""


class DatapathSettings(ConfigModel):
    enabled: bool = False
    """Program the node's routing for pods on every interface of its pool (decision 0036). Off: the
    plugin only hands out addresses, as for a host whose CNI routes them itself."""
    vpc_cidrs: Annotated[tuple[Cidr, ...], Field(strict=False)] = ()
    """The VPC's CIDR blocks (all of them, secondary blocks included): traffic to them keeps the pod's
    address; traffic elsewhere is SNATed to the node's primary address. Required when enabled."""
    exclude_snat_cidrs: Annotated[tuple[Cidr, ...], Field(strict=False)] = ()
    """Destinations outside the VPC that must still see the pod's own address (a peered VPC, a VPN
    to an on-premises network): not SNATed, routed like the VPC's."""
    external_snat: bool = False
    """Something outside the node translates pod addresses (a NAT gateway): no SNAT here, and traffic
    to any destination leaves through the pod's own interface."""
    route_table_base: Annotated[int, Field(ge=256, le=MAX_TABLE_BASE)] = 30_000
    """Route table of a secondary interface: base + 100 × network card + device index. 30000 keeps
    clear of the tables other software uses: 1–252, the VPC CNI's device number + 1,
    amazon-ec2-net-utils' 10000 + device number; change it where something else on the node uses
    30000–33300."""
    mtu: Annotated[int, Field(ge=576, le=65_535)] = 9001
    """MTU the pool's interfaces are brought up with: EC2's jumbo frames inside a VPC (use 1500 where
    traffic crosses a VPN or an internet gateway without path MTU discovery)."""
    interval: Annotated[PositiveDuration, Field(le=3600)] = 30.0
    """Seconds between two reconciles of the host with the plan (besides those a change of the pool's
    interfaces triggers at once): what someone changed by hand is put back within this."""
    snat_mark: Annotated[int, Field(ge=1, le=2**31)] = 0x80
    """The firewall mark (one bit) of traffic to be SNATed and routed by the main table. 0x80 is the
    VPC CNI's; kube-proxy uses 0x4000 and 0x8000, Calico and Cilium the high bits."""

    @model_validator(mode="after")
    def _consistent(self) -> DatapathSettings:
        if self.enabled and not self.vpc_cidrs:
            raise FieldError(
                "vpc_cidrs", "required with enabled: true (the VPC's CIDR blocks, e.g. [10.0.0.0/16])"
            )
        if self.snat_mark & (self.snat_mark - 1):
            raise FieldError("snat_mark", f"one bit, such as 0x80 (got {self.snat_mark:#x})")
        return self
