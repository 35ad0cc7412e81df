"""The Describe operations of the EC2 front end: requests in, whole XML answers out.

Each call passes the in-memory cloud's :class:`~providers.sim.gate.Gate` under its EC2 name, with
the request the cloud's own Describe operation would see (``interface_ids``, ``filters``,
``next_token``…), so it is counted, can meet an injected fault, spends a server-side token and
waits the injected latency exactly like the cloud's own call. The state change the gate runs is the
whole listing *and its rendering*: nothing can change the cloud between the selection and the XML.

EC2's rules, as the AWS provider meets them:

* ``MaxResults`` is bounded (5 to 1000; DescribeInstanceTypes 5 to 100) and refused together with
  explicit ids (``InvalidParameterCombination``); without it every item comes in one answer;
* ``NextToken`` is opaque (the operation and the last id of the previous page); one from another
  operation, or not one of ours, is refused (``InvalidNextToken``);
* explicit ids that do not exist answer the operation's ``…NotFound`` code; an unknown filter name
  answers ``InvalidParameterValue`` (:func:`~eni_ipam_testkit.ec2_wire.tables.compile_filters`);
* DescribeInstances answers one reservation per instance; DescribeInstanceTypes refuses the whole
  request when one type does not exist (``InvalidInstanceType``), naming the unknown ones.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TypeVar

from eni_ipam_testkit.ec2_wire import render
from eni_ipam_testkit.ec2_wire.query import Query
from eni_ipam_testkit.ec2_wire.tables import (
    GROUP_FILTERS,
    INSTANCE_FILTERS,
    INTERFACE_FILTERS,
    SUBNET_FILTERS,
    VPC_FILTERS,
    Fragments,
    Getter,
    Table,
    Tables,
    compile_filters,
    known,
    take_page,
)
from providers.sim.cloud import SimCloud
from providers.sim.records import SimError

R = TypeVar("R")
Handler = Callable[[Query, str], Awaitable[bytes]]
"""An operation: the parsed request and the request id in, the whole XML answer out."""

LISTING_BOUNDS = (5, 1000)
INSTANCE_TYPE_BOUNDS = (5, 100)
_NO_TAGS: Mapping[str, str] = {}


def encode_token(action: str, last: str) -> str:
    return base64.urlsafe_b64encode(f"{action}\n{last}".encode()).decode()


def decode_token(action: str, token: str) -> str:
    """The last id of the previous page.

    Raises:
        SimError: ``InvalidNextToken`` for a token this operation did not hand out.
    """
    try:
        kind, _, last = base64.urlsafe_b64decode(token.encode()).decode().partition("\n")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        kind, last = "", ""
    if kind != action or not last:
        raise SimError("InvalidNextToken", f"The token '{token}' is invalid")
    return last


def page_size(q: Query, ids: Sequence[str], ids_name: str, bounds: tuple[int, int]) -> int | None:
    """The request's ``MaxResults`` (``None``: no paging).

    Raises:
        SimError: ``InvalidParameterCombination`` with explicit ids; ``InvalidParameterValue``
            outside ``bounds``.
    """
    if not q.has("MaxResults"):
        return None
    if ids:
        raise SimError(
            "InvalidParameterCombination",
            f"The parameter {ids_name} cannot be used with the parameter maxResults",
        )
    size = q.integer("MaxResults")
    low, high = bounds
    if not low <= size <= high:
        raise SimError(
            "InvalidParameterValue",
            f"Value ( {size} ) for parameter maxResults is invalid. "
            f"Expecting a value between {low} and {high}.",
        )
    return size


class Describer:
    """The Describe handlers over one cloud (see the module docstring)."""

    def __init__(
        self,
        cloud: SimCloud,
        tables: Tables,
        fragments: Fragments,
        instance_tags: Callable[[str], Mapping[str, str]],
    ) -> None:
        self.cloud = cloud
        self.tables = tables
        self.fragments = fragments
        self.renderer = fragments.renderer
        self._instance_tags = instance_tags

    def handlers(self) -> dict[str, Handler]:
        return {
            "DescribeVpcs": self.describe_vpcs,
            "DescribeSubnets": self.describe_subnets,
            "DescribeSecurityGroups": self.describe_security_groups,
            "DescribeInstances": self.describe_instances,
            "DescribeNetworkInterfaces": self.describe_network_interfaces,
            "DescribeInstanceTypes": self.describe_instance_types,
        }

    async def _listing(
        self,
        q: Query,
        rid: str,
        *,
        ids_param: str,
        ids_name: str,
        request_key: str,
        table: Table[R],
        getters: Mapping[str, Getter[R]],
        tags: Callable[[R], Mapping[str, str]],
        not_found: tuple[str, str],
        set_name: str,
        item: Callable[[R], bytes],
        candidates: Callable[[Mapping[str, Sequence[str]]], Iterable[str] | None] = lambda _: None,
    ) -> bytes:
        q.accept({ids_param, "Filter", "MaxResults", "NextToken"}, {"IncludeManagedResources"})
        action = q.action
        ids = q.strings(ids_param)
        filters = q.filters()
        size = page_size(q, ids, ids_name, LISTING_BOUNDS)
        token = q.params.get("NextToken") or None
        after = decode_token(action, token) if token else None

        def apply() -> bytes:
            keep = compile_filters(filters, getters, tags)
            listed = known(ids, table.rows, *not_found) if ids else candidates(filters)
            if listed is None:
                keys = table.after(after)
            else:
                keys = (k for k in listed if after is None or k > after)
            items, last = take_page(keys, table.rows, keep, size)
            self.fragments.prune()
            parts = [f"<{set_name}>".encode(), *(item(r) for r in items), f"</{set_name}>".encode()]
            if last is not None:
                parts.append(render.element("nextToken", encode_token(action, last)))
            return render.document(action, rid, parts)

        request = {request_key: tuple(ids), "filters": filters, "next_token": token}
        return await self.cloud.gate.run(action, apply, request=request)

    async def describe_network_interfaces(self, q: Query, rid: str) -> bytes:
        def by_instance(filters: Mapping[str, Sequence[str]]) -> Iterable[str] | None:
            # The per-instance sync: only the named instances' interfaces are worth filtering.
            owners = self.tables.exact_values(filters, "attachment.instance-id")
            return None if owners is None else self.tables.interfaces_of(owners)

        return await self._listing(
            q,
            rid,
            ids_param="NetworkInterfaceId",
            ids_name="networkInterfaceIdSet",
            request_key="interface_ids",
            table=self.tables.interfaces,
            getters=INTERFACE_FILTERS,
            tags=lambda r: r.tags,
            not_found=("InvalidNetworkInterfaceID.NotFound", "networkInterface ID"),
            set_name="networkInterfaceSet",
            item=self.fragments.interface,
            candidates=by_instance,
        )

    async def describe_instances(self, q: Query, rid: str) -> bytes:
        return await self._listing(
            q,
            rid,
            ids_param="InstanceId",
            ids_name="instancesSet",
            request_key="instance_ids",
            table=self.tables.instances,
            getters=INSTANCE_FILTERS,
            tags=lambda r: self._instance_tags(r.id),
            not_found=("InvalidInstanceID.NotFound", "instance ID"),
            set_name="reservationSet",
            item=self.fragments.reservation,
        )

    async def describe_subnets(self, q: Query, rid: str) -> bytes:
        return await self._listing(
            q,
            rid,
            ids_param="SubnetId",
            ids_name="subnetIds",
            request_key="subnet_ids",
            table=self.tables.subnets,
            getters=SUBNET_FILTERS,
            tags=lambda r: r.tags,
            not_found=("InvalidSubnetID.NotFound", "subnet ID"),
            set_name="subnetSet",
            item=self.renderer.subnet,  # never cached: the free count changes with every assign
        )

    async def describe_security_groups(self, q: Query, rid: str) -> bytes:
        return await self._listing(
            q,
            rid,
            ids_param="GroupId",
            ids_name="groupIds",
            request_key="group_ids",
            table=self.tables.groups,
            getters=GROUP_FILTERS,
            tags=lambda r: r.tags,
            not_found=("InvalidGroup.NotFound", "security group"),
            set_name="securityGroupInfo",
            item=self.renderer.security_group,
        )

    async def describe_vpcs(self, q: Query, rid: str) -> bytes:
        return await self._listing(
            q,
            rid,
            ids_param="VpcId",
            ids_name="vpcIds",
            request_key="vpc_ids",
            table=self.tables.vpcs,
            getters=VPC_FILTERS,
            tags=lambda _: _NO_TAGS,
            not_found=("InvalidVpcID.NotFound", "vpc ID"),
            set_name="vpcSet",
            item=self.renderer.vpc,
        )

    async def describe_instance_types(self, q: Query, rid: str) -> bytes:
        """The cloud's instance-type limits as EC2's ``InstanceTypeInfo`` (no filters: the provider
        asks by name, and EC2's instance-type filters are about hardware the cloud does not model)."""
        q.accept({"InstanceType", "MaxResults", "NextToken"}, {"Filter", "IncludeUnsupportedInRegion"})
        names = q.strings("InstanceType")
        size = page_size(q, names, "InstanceTypes", INSTANCE_TYPE_BOUNDS)
        token = q.params.get("NextToken") or None
        after = decode_token(q.action, token) if token else None

        def apply() -> bytes:
            limits = self.cloud.limits
            unknown = [n for n in names if n not in limits]
            if unknown:
                raise SimError(
                    "InvalidInstanceType",
                    f"The following supplied instance types do not exist: [{', '.join(unknown)}]",
                )
            keys = sorted(set(names) or limits)
            chosen = [k for k in keys if after is None or k > after]
            last = None
            if size is not None and len(chosen) > size:
                chosen, last = chosen[:size], chosen[size - 1]
            parts = [b"<instanceTypeSet>", *(self.renderer.instance_type(n, limits[n]) for n in chosen)]
            parts.append(b"</instanceTypeSet>")
            if last is not None:
                parts.append(render.element("nextToken", encode_token(q.action, last)))
            return render.document(q.action, rid, parts)

        return await self.cloud.gate.run(q.action, apply, request={"instance_types": tuple(names)})
