"""The node spec as people write it: one declaration for files (snake_case) and ENIPools (camelCase).

:class:`NodeSpecFields` holds every key of a node's spec except its identity (name, instance), with
its validation; the CRD's camelCase names are its aliases (``min_allocate`` ↔ ``minAllocate``,
``subnet_ids`` ↔ ``subnetIDs``). The run configuration (``node_defaults``, ``nodes``), scenario files
and ENIPool specs all read it, and :meth:`NodeSpecFields.spec` turns it into the core's plain
:class:`~eni_ipam.core.model.NodeSpec`. A test keeps the CRD's schema and this model in step.
"""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict

from eni_ipam.core.config import EMPTY_TAGS, ConfigModel, LooseTagMap, Names, NonNegativeInt
from eni_ipam.core.model import NodeSpec

_SPECIAL_ALIASES = {"subnet_ids": "subnetIDs", "instance_id": "instanceID"}


def camel(field: str) -> str:
    """The ENIPool spec key of a spec field (``min_allocate`` → ``minAllocate``)."""
    if field in _SPECIAL_ALIASES:
        return _SPECIAL_ALIASES[field]
    head, *rest = field.split("_")
    return head + "".join(part.capitalize() for part in rest)


class NodeSpecFields(ConfigModel):
    """What a node asks of its pool (docs/settings.md, "node spec"). Zero means "default" for
    ``pre_allocate`` only; other zeroes mean "no constraint"."""

    # Files write snake_case; ENIPools are read with ``by_alias`` (camelCase) by the Kubernetes side.
    model_config = ConfigDict(alias_generator=camel, validate_by_name=True, validate_by_alias=False)

    pre_allocate: int = 0
    """Spare addresses to keep beyond those in use (0: the default, 8; negative values are used as
    they are, as in the reference operator)."""
    min_allocate: NonNegativeInt = 0
    """Addresses the pool holds at least, used or not."""
    max_allocate: NonNegativeInt = 0
    """Addresses the pool holds at most (0: the instance's maximum)."""
    max_above_watermark: NonNegativeInt = 0
    """Addresses one pass may allocate beyond the watermark, to save calls on a growing node."""
    first_interface_index: NonNegativeInt = 0
    """Interfaces below this device index are never filled nor counted (1 keeps pods off the
    primary interface)."""
    subnet_ids: Names = ()
    """Subnets new interfaces are created in, the one with most free addresses first."""
    subnet_tags: LooseTagMap = EMPTY_TAGS
    """Tags a subnet must carry to receive new interfaces (when ``subnet_ids`` is empty)."""
    security_groups: Names = ()
    """Security groups of new interfaces (empty: those of the primary interface)."""
    security_group_tags: LooseTagMap = EMPTY_TAGS
    """Tags the security groups of new interfaces must carry (when ``security_groups`` is empty)."""
    exclude_interface_tags: LooseTagMap = EMPTY_TAGS
    """An interface carrying all of these tags is neither filled nor counted."""
    disable_prefix_delegation: bool = False
    """Plain secondary addresses on this node even where /28 prefixes are enabled."""
    delete_on_termination: bool = True
    """Interfaces created for the node go with its instance."""

    def spec(self, *, name: str, instance_id: str) -> NodeSpec:
        """The core's node spec for node ``name`` on instance ``instance_id``."""
        fields = {key: getattr(self, key) for key in NodeSpecFields.model_fields}  # subclasses add more
        return NodeSpec(name=name, instance_id=instance_id, **fields)

    def under(self, defaults: NodeSpecFields) -> NodeSpecFields:
        """These fields, with ``defaults`` filling in what was not written here."""
        written = self.model_fields_set & set(NodeSpecFields.model_fields)
        return defaults.replace(**{key: getattr(self, key) for key in written})

    def as_pool_spec(self) -> dict[str, Any]:
        """The keys written here, as an ENIPool spec (camelCase, plain JSON values)."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)


SPEC_FIELDS = tuple(NodeSpecFields.model_fields)
"""Every spec key but the node's identity, in declaration order."""
