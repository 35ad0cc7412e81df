"""Decoding only what is read: resource classes that name just the fields the projections read.

lightkube decodes a list page or a watch event into its resource class with msgspec. Given a
generic (dict) resource, every value of a Node becomes a Python object first — its image cache,
managedFields and conditions, about 1,000 objects for a 13 KB Node — and the projection then keeps
six of them: at 100,000 Nodes that is most of a start's CPU, on the event loop. Given a class that
is a msgspec ``Struct`` naming only some fields, msgspec skips the others while it reads the bytes
(about twenty times faster, measured on a page of 500 realistic Nodes), and nothing else is made.

A view is only ever handed to a projection (:mod:`~eni_ipam.kube.projection`), as the plain data
:func:`as_data` makes of it: the same mapping a whole object would give, limited to the fields
named here. Invariants: every field a projection reads of the kind is named here (a test projects a
realistic object both ways and compares); leaves are typed ``Any`` and sections may be null, so a
value of an unexpected type is kept as it came for the conversion to refuse by name; only what the
API server's own schema refuses (a Node whose spec is a string) would fail a page.
"""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec
from lightkube.core import resource as lk


class _Metadata(msgspec.Struct, omit_defaults=True, frozen=True):
    name: Any = None
    namespace: Any = None
    uid: Any = None
    resourceVersion: Any = None
    labels: Any = None


class _NodeMetadata(_Metadata, omit_defaults=True, frozen=True):
    annotations: Any = None


class _NodeSpec(msgspec.Struct, omit_defaults=True, frozen=True):
    providerID: Any = None
    taints: Any = None


class NodeView(msgspec.Struct, lk.GlobalResource, omit_defaults=True, frozen=True):
    """A Node as the controller reads it (:func:`~eni_ipam.kube.projection.project_node`)."""

    _api_info: ClassVar[lk.ApiInfo] = lk.ApiInfo(  # type: ignore[misc]
        resource=lk.ResourceDef("", "v1", "Node"), plural="nodes", verbs=["get", "list", "watch"]
    )
    apiVersion: Any = None
    kind: Any = None
    metadata: _NodeMetadata | None = _NodeMetadata()
    spec: _NodeSpec | None = _NodeSpec()


def as_data(view: msgspec.Struct) -> dict[str, Any]:
    """A decoded view as plain data, its absent fields left out (as in the object it was read from)."""
    data: dict[str, Any] = msgspec.to_builtins(view)
    return data
