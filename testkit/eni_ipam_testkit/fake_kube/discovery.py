"""Discovery documents: ``/version``, ``/api``, ``/apis``, their group versions, and aggregated discovery.

Built from the types the server serves at the time of the request, so a CustomResourceDefinition
appears in discovery from the moment it is stored. Two forms, as kube-apiserver answers them:

* legacy: ``APIVersions`` at ``/api``, ``APIGroupList`` at ``/apis``, ``APIGroup`` at
  ``/apis/<group>`` and ``APIResourceList`` at ``/api/v1`` and ``/apis/<group>/<version>`` (each
  resource with its verbs, short names, categories, scope and kind, and ``<plural>/status`` for a
  status subresource);
* aggregated (``apidiscovery.k8s.io/v2`` ``APIGroupDiscoveryList``), answered at ``/api`` and
  ``/apis`` when the ``Accept`` header asks for it first, as kubectl 1.34 and helm do. The response's
  ``Content-Type`` names the kind, which is how client-go tells the two forms apart.

A group's preferred version is its highest by Kubernetes' version ordering (v1 > v1beta1 > v1alpha1).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final

from eni_ipam_testkit.fake_kube.openapi import KUBERNETES_VERSION
from eni_ipam_testkit.fake_kube.resources import JSON, STATUS_VERBS, ResourceType

AGGREGATED_CONTENT_TYPE: Final = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
_KUBE_VERSION: Final = re.compile(r"^v(\d+)(?:(alpha|beta)(\d+))?$")


def version_info() -> JSON:
    """What ``/version`` answers (helm reads the Kubernetes version for ``.Capabilities``)."""
    major, minor, _ = KUBERNETES_VERSION.lstrip("v").split(".")
    return {
        "major": major,
        "minor": minor,
        "emulationMajor": major,
        "emulationMinor": minor,
        "gitVersion": KUBERNETES_VERSION,
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.24.0",
        "compiler": "gc",
        "platform": "linux/amd64",
    }


def version_priority(version: str) -> tuple[int, int, int, str]:
    """Sort key: GA before beta before alpha, higher numbers first, then other names alphabetically."""
    match = _KUBE_VERSION.match(version)
    if match is None:
        return (3, 0, 0, version)
    stage = {None: 0, "beta": 1, "alpha": 2}[match[2]]
    return (stage, -int(match[1]), -int(match[3] or 0), version)


def accepts_aggregated(accept: str) -> bool:
    """Whether the first acceptable form in an ``Accept`` header is aggregated discovery v2."""
    for entry in accept.split(","):
        params = dict(part.strip().split("=", 1) for part in entry.split(";")[1:] if "=" in part)
        if params.get("g") == "apidiscovery.k8s.io" and params.get("as") == "APIGroupDiscoveryList":
            if params.get("v") == "v2":
                return True
            continue  # an older version of the form this server does not speak: look further
        return False
    return False


def _groups(types: Iterable[ResourceType]) -> dict[str, dict[str, list[ResourceType]]]:
    groups: dict[str, dict[str, list[ResourceType]]] = {}
    for rtype in types:
        groups.setdefault(rtype.group, {}).setdefault(rtype.version, []).append(rtype)
    for versions in groups.values():
        for members in versions.values():
            members.sort(key=lambda t: t.plural)
    return {
        group: dict(sorted(versions.items(), key=lambda item: version_priority(item[0])))
        for group, versions in groups.items()
    }


def api_versions(server_address: str) -> JSON:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    }


def api_group(group: str, versions: Iterable[str]) -> JSON:
    ordered = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": group,
        "versions": ordered,
        "preferredVersion": ordered[0],
    }


def api_group_list(types: Iterable[ResourceType]) -> JSON:
    groups = [api_group(g, versions) for g, versions in _groups(types).items() if g]
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [{k: v for k, v in g.items() if k not in ("kind", "apiVersion")} for g in groups],
    }


def group_document(group: str, types: Iterable[ResourceType]) -> JSON | None:
    versions = _groups(types).get(group)
    return api_group(group, versions) if group and versions else None


def resource_list(group: str, version: str, types: Iterable[ResourceType]) -> JSON | None:
    """The ``APIResourceList`` of one group version, or None when it is not served."""
    members = _groups(types).get(group, {}).get(version)
    if not members:
        return None
    resources: list[JSON] = []
    for rtype in members:
        entry: JSON = {
            "name": rtype.plural,
            "singularName": rtype.singular_name,
            "namespaced": rtype.namespaced,
            "kind": rtype.kind,
            "verbs": list(rtype.verbs),
        }
        if rtype.short_names:
            entry["shortNames"] = list(rtype.short_names)
        if rtype.categories:
            entry["categories"] = list(rtype.categories)
        resources.append(entry)
        if rtype.status_subresource:
            resources.append(
                {
                    "name": f"{rtype.plural}/status",
                    "singularName": "",
                    "namespaced": rtype.namespaced,
                    "kind": rtype.kind,
                    "verbs": list(STATUS_VERBS),
                }
            )
    group_version = f"{group}/{version}" if group else version
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    }


def _resource_discovery(rtype: ResourceType) -> JSON:
    kind = {"group": rtype.group, "version": rtype.version, "kind": rtype.kind}
    entry: JSON = {
        "resource": rtype.plural,
        "responseKind": kind,
        "scope": "Namespaced" if rtype.namespaced else "Cluster",
        "singularResource": rtype.singular_name,
        "verbs": list(rtype.verbs),
    }
    if rtype.short_names:
        entry["shortNames"] = list(rtype.short_names)
    if rtype.categories:
        entry["categories"] = list(rtype.categories)
    if rtype.status_subresource:
        entry["subresources"] = [{"subresource": "status", "responseKind": kind, "verbs": list(STATUS_VERBS)}]
    return entry


def aggregated(types: Iterable[ResourceType], *, legacy: bool) -> JSON:
    """The ``APIGroupDiscoveryList`` of the core group (``legacy``, at ``/api``) or of the others."""
    items = []
    for group, versions in _groups(types).items():
        if (group == "") != legacy:
            continue
        items.append(
            {
                "metadata": {"name": group, "creationTimestamp": None},
                "versions": [
                    {
                        "version": version,
                        "resources": [_resource_discovery(t) for t in members],
                        "freshness": "Current",
                    }
                    for version, members in versions.items()
                ],
            }
        )
    return {
        "kind": "APIGroupDiscoveryList",
        "apiVersion": "apidiscovery.k8s.io/v2",
        "metadata": {},
        "items": items,
    }
