"""The EC2 client's model cut down to the calls the provider makes.

Role: botocore keeps, for the life of a client, the whole EC2 service model (every one of EC2's
several hundred operations and their shapes, 43 MB of Python objects) and the endpoints of every
AWS service (21 MB), loaded from JSON: two thirds of what the controller holds at 1,000 nodes, and
the same in every replica. The provider makes :data:`OPERATIONS` and nothing else.
:class:`LeanLoader`, botocore's ``data_loader`` component for the clients :func:`make_client
<providers.aws.client.make_client>` makes, hands botocore the EC2 model with only those operations
and the shapes they reach, without documentation, and the endpoints of EC2 and of the services the
credential chain calls (STS, SSO). Everything else botocore loads (paginators, endpoint rules,
partitions, other services' models) is loaded as before.

Invariant: a call outside :data:`OPERATIONS` on such a client fails as an unknown method
(``AttributeError``): a new call is added to the list (``tests/providers/aws/test_lean.py`` checks
that every call the provider's code names is there).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import botocore.loaders

OPERATIONS = (
    "AssignIpv6Addresses",
    "AssignPrivateIpAddresses",
    "AttachNetworkInterface",
    "CreateNetworkInterface",
    "DeleteNetworkInterface",
    "DescribeInstanceTypes",
    "DescribeInstances",
    "DescribeNetworkInterfaces",
    "DescribeSecurityGroups",
    "DescribeSubnets",
    "DescribeVpcs",
    "DetachNetworkInterface",
    "ModifyNetworkInterfaceAttribute",
    "UnassignPrivateIpAddresses",
)
"""Every EC2 call the provider makes (providers/aws/api.py)."""

ENDPOINT_SERVICES = frozenset({"ec2", "sts", "portal.sso", "oidc"})
"""The services whose endpoints are kept: EC2, and those the credential chain may call (STS for a
role or a web identity, SSO and its OIDC service for an SSO profile)."""


def prune_service(model: Mapping[str, Any], operations: Iterable[str]) -> dict[str, Any]:
    """``model`` (a botocore service model) with only ``operations`` (those it has) and the shapes
    they reach, with no documentation. ``model`` itself is not changed."""
    shapes = model["shapes"]
    kept_operations = {
        name: _undocumented(op) for name in operations if (op := model["operations"].get(name)) is not None
    }
    stack = [
        ref["shape"]
        for op in kept_operations.values()
        for ref in (op.get("input"), op.get("output"), *op.get("errors", ()))
        if ref
    ]
    kept: dict[str, Any] = {}
    while stack:
        name = stack.pop()
        if name in kept:
            continue
        shape = kept[name] = _undocumented(shapes[name])
        members = shape.get("members", {}).values()
        stack.extend(
            ref["shape"]
            for ref in (*members, shape.get("member"), shape.get("key"), shape.get("value"))
            if ref
        )
    return {**model, "operations": kept_operations, "shapes": {n: kept[n] for n in shapes if n in kept}}


def _undocumented(part: Mapping[str, Any]) -> dict[str, Any]:
    """``part`` (an operation or a shape) without its documentation, its members' either."""
    out = {k: v for k, v in part.items() if k != "documentation"}
    if isinstance(members := out.get("members"), Mapping):
        out["members"] = {
            name: {k: v for k, v in ref.items() if k != "documentation"} for name, ref in members.items()
        }
    return out


def prune_endpoints(endpoints: Mapping[str, Any], services: Iterable[str]) -> dict[str, Any]:
    """botocore's endpoints data with only ``services`` in each partition."""
    keep = frozenset(services)
    return {
        **endpoints,
        "partitions": [
            {**p, "services": {n: s for n, s in p.get("services", {}).items() if n in keep}}
            for p in endpoints.get("partitions", ())
        ],
    }


class LeanLoader(botocore.loaders.Loader):  # type: ignore[misc]
    """botocore's loader, handing out the EC2 service model and the endpoints pruned (see the
    module docstring); what it pruned is not kept beside."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lean: dict[tuple[Any, ...], Any] = {}
        self._endpoints_pruned = False

    def load_service_model(self, service_name: str, type_name: str, api_version: str | None = None) -> Any:
        if (service_name, type_name) != ("ec2", "service-2"):
            return super().load_service_model(service_name, type_name, api_version)
        key = (service_name, type_name, api_version)
        if key not in self._lean:
            before = set(self._cache)
            whole = super().load_service_model(service_name, type_name, api_version)
            self._lean[key] = prune_service(whole, OPERATIONS)
            for cached in set(self._cache) - before:  # the whole model, as loaded and as merged
                del self._cache[cached]
        return self._lean[key]

    def load_data_with_path(self, name: str) -> Any:
        found = super().load_data_with_path(name)
        if name != "endpoints":
            return found
        key = ("load_data_with_path", name)
        data, path = found
        if not self._endpoints_pruned:
            found = (prune_endpoints(data, ENDPOINT_SERVICES), path)
            self._cache[key] = found
            self._endpoints_pruned = True
        return found


def lean_session(session: Any) -> None:
    """Make the clients ``session`` (a botocore session) creates from now on use :class:`LeanLoader`."""
    default = session.get_component("data_loader")
    session.register_component(
        "data_loader",
        LeanLoader(extra_search_paths=default.search_paths, include_default_search_paths=False),
    )
