"""The Describe operations of the simulated cloud: filters and pagination as EC2 does them.

Every listing is ordered by id and paginated with the cloud's ``page_size``; each page is one call
(one request, one token from the operation's bucket). ``next_token`` is the last id of the previous
page, so a listing stays consistent when the state changes between pages: nothing is returned twice,
and what was created after the listing started may or may not appear — as on EC2.

Filters are EC2's names (``attachment.instance-id``, ``status``, ``vpc-id``, ``tag:<key>``,
``tag-key``…) with a list of values each; a value may use ``*`` and ``?`` wildcards. A filter name an
operation does not support answers ``InvalidParameterValue``, as EC2 does. Asking for ids that do
not exist answers the operation's ``…NotFound`` code.

Cost: a page builds views only for the items it returns, and an interface listing filtered by
``attachment.instance-id`` (the per-instance sync) visits only those instances' interfaces, so the
simulator stays fast with tens of thousands of interfaces.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import TypeVar

from eni_ipam.core import model
from providers.ec2.provider import InstanceInfo
from providers.sim.gate import Gate, api
from providers.sim.records import (
    InstanceRecord,
    InterfaceRecord,
    Page,
    SimError,
    SubnetRecord,
    Vpc,
)
from providers.sim.setup import CloudSetup

R = TypeVar("R")
V = TypeVar("V")

Filters = Mapping[str, Sequence[str]]
"""EC2 filters: name → accepted values (any value matches)."""

Facets = Mapping[str, str]
"""A record's value for each supported filter name (empty: the record has none)."""

_WILDCARDS = frozenset("*?[")

_SUBNET_FILTERS = ("subnet-id", "vpc-id", "availability-zone")
_GROUP_FILTERS = ("group-id", "vpc-id")
_INSTANCE_FILTERS = (
    "instance-id",
    "instance-state-name",
    "instance-type",
    "vpc-id",
    "subnet-id",
    "availability-zone",
)
_INTERFACE_FILTERS = (
    "network-interface-id",
    "attachment.instance-id",
    "attachment.attachment-id",
    "status",
    "subnet-id",
    "vpc-id",
    "availability-zone",
)


def _like(value: str, pattern: str) -> bool:
    return value == pattern if _WILDCARDS.isdisjoint(pattern) else fnmatch.fnmatchcase(value, pattern)


def _matches(facets: Facets, tags: Mapping[str, str], filters: Filters) -> bool:
    for name, wanted in filters.items():
        if name.startswith("tag:"):
            have: Collection[str] = [tags[name[4:]]] if name[4:] in tags else []
        elif name == "tag-key":
            have = list(tags)
        else:
            have = [facets[name]] if facets[name] else []
        if not any(_like(h, w) for h in have for w in wanted):
            return False
    return True


def _check_filters(filters: Filters | None, supported: Collection[str]) -> Filters:
    for name in filters or {}:
        if not (name.startswith("tag:") or name == "tag-key" or name in supported):
            raise SimError("InvalidParameterValue", f"The filter '{name}' is invalid")
    return filters or {}


def _subnet_facets(s: SubnetRecord) -> Facets:
    return {"subnet-id": s.id, "vpc-id": s.vpc_id, "availability-zone": s.zone}


def _instance_facets(i: InstanceRecord) -> Facets:
    values = (i.id, i.state, i.type, i.vpc_id, i.subnet_id, i.zone)
    return dict(zip(_INSTANCE_FILTERS, values, strict=True))


def _interface_facets(i: InterfaceRecord) -> Facets:
    values = (i.id, i.instance_id, i.attachment_id, i.status, i.subnet_id, i.vpc_id, i.zone)
    return dict(zip(_INTERFACE_FILTERS, values, strict=True))


class DescribeOps(CloudSetup):
    """DescribeVpcs, DescribeSubnets, DescribeSecurityGroups, DescribeInstances, DescribeNetworkInterfaces."""

    gate: Gate
    page_size: int

    def _page(
        self,
        table: Mapping[str, R],
        ids: Iterable[str],
        keep: Callable[[R], bool],
        view: Callable[[R], V],
        next_token: str | None,
    ) -> Page[V]:
        """The page after ``next_token`` of the records of ``ids`` that ``keep`` accepts, in id order."""
        chosen: list[tuple[str, R]] = []
        for id in sorted(i for i in ids if next_token is None or i > next_token):
            record = table[id]
            if not keep(record):
                continue
            if len(chosen) == self.page_size:
                return Page(tuple(view(r) for _, r in chosen), chosen[-1][0])
            chosen.append((id, record))
        return Page(tuple(view(r) for _, r in chosen), None)

    @staticmethod
    def _known(ids: Sequence[str], table: Mapping[str, object], code: str, noun: str) -> None:
        for id in ids:
            if id not in table:
                raise SimError(code, f"The {noun} '{id}' does not exist")

    @api("DescribeVpcs")
    def describe_vpcs(self, *, vpc_ids: Sequence[str] = (), next_token: str | None = None) -> Page[Vpc]:
        """One page of VPCs.

        Raises:
            SimError: ``InvalidVpcID.NotFound`` for an unknown id in ``vpc_ids``.
        """
        self._known(vpc_ids, self._vpcs, "InvalidVpcID.NotFound", "vpc ID")
        return self._page(self._vpcs, vpc_ids or self._vpcs, lambda _: True, lambda v: v, next_token)

    @api("DescribeSubnets")
    def describe_subnets(
        self, *, subnet_ids: Sequence[str] = (), filters: Filters | None = None, next_token: str | None = None
    ) -> Page[model.Subnet]:
        """One page of subnets; filters ``subnet-id``, ``vpc-id``, ``availability-zone``, tags.

        Raises:
            SimError: ``InvalidSubnetID.NotFound``; ``InvalidParameterValue`` for an unknown filter.
        """
        wanted = _check_filters(filters, _SUBNET_FILTERS)
        self._known(subnet_ids, self._subnets, "InvalidSubnetID.NotFound", "subnet ID")
        return self._page(
            self._subnets,
            subnet_ids or self._subnets,
            lambda s: _matches(_subnet_facets(s), s.tags, wanted),
            SubnetRecord.view,
            next_token,
        )

    @api("DescribeSecurityGroups")
    def describe_security_groups(
        self, *, group_ids: Sequence[str] = (), filters: Filters | None = None, next_token: str | None = None
    ) -> Page[model.SecurityGroup]:
        """One page of security groups; filters ``group-id``, ``vpc-id``, tags.

        Raises:
            SimError: ``InvalidGroup.NotFound``; ``InvalidParameterValue`` for an unknown filter.
        """
        wanted = _check_filters(filters, _GROUP_FILTERS)
        self._known(group_ids, self._groups, "InvalidGroup.NotFound", "security group")
        return self._page(
            self._groups,
            group_ids or self._groups,
            lambda g: _matches({"group-id": g.id, "vpc-id": g.vpc_id}, g.tags, wanted),
            lambda g: g,
            next_token,
        )

    @api("DescribeInstances")
    def describe_instances(
        self,
        *,
        instance_ids: Sequence[str] = (),
        filters: Filters | None = None,
        next_token: str | None = None,
    ) -> Page[InstanceInfo]:
        """One page of instances (terminated ones included, as EC2 shows them for a while).

        Filters: ``instance-id``, ``instance-state-name``, ``instance-type``, ``vpc-id``, ``subnet-id``,
        ``availability-zone``.

        Raises:
            SimError: ``InvalidInstanceID.NotFound``; ``InvalidParameterValue`` for an unknown filter.
        """
        wanted = _check_filters(filters, _INSTANCE_FILTERS)
        self._known(instance_ids, self._instances, "InvalidInstanceID.NotFound", "instance ID")
        return self._page(
            self._instances,
            instance_ids or self._instances,
            lambda i: _matches(_instance_facets(i), {}, wanted),
            InstanceRecord.info,
            next_token,
        )

    @api("DescribeNetworkInterfaces")
    def describe_network_interfaces(
        self,
        *,
        interface_ids: Sequence[str] = (),
        filters: Filters | None = None,
        next_token: str | None = None,
    ) -> Page[model.Interface]:
        """One page of interfaces.

        Filters: ``network-interface-id``, ``attachment.instance-id``, ``attachment.attachment-id``,
        ``status`` (``available`` / ``in-use``), ``subnet-id``, ``vpc-id``, ``availability-zone``, tags.
        A detached interface has ``instance_id == ""`` and ``device_index == -1``.

        Raises:
            SimError: ``InvalidNetworkInterfaceID.NotFound``; ``InvalidParameterValue`` for an unknown
                filter.
        """
        wanted = _check_filters(filters, _INTERFACE_FILTERS)
        self._known(
            interface_ids, self._interfaces, "InvalidNetworkInterfaceID.NotFound", "networkInterface ID"
        )
        return self._page(
            self._interfaces,
            interface_ids or self._interface_candidates(wanted),
            lambda i: _matches(_interface_facets(i), i.tags, wanted),
            InterfaceRecord.view,
            next_token,
        )

    def _interface_candidates(self, wanted: Filters) -> Iterable[str]:
        """Interfaces worth filtering: only the named instances' when the filter names them exactly."""
        owners = wanted.get("attachment.instance-id")
        if owners is None or any(not _WILDCARDS.isdisjoint(o) for o in owners):
            return self._interfaces
        return {i for o in owners if o in self._instances for i in self._instances[o].interface_ids()}
