"""Profiles: node spec settings chosen by a Node's labels (the run configuration's ``profiles``).

A profile is a name, a node selector (``match_labels`` and ``match_expressions``, Kubernetes'
``LabelSelector`` in the configuration's snake_case) and a partial node spec. A node's pool follows:

* the **most specific** profile whose selector matches the node's labels: the one with the most
  label requirements (each ``match_labels`` entry and each ``match_expressions`` entry counts one),
  ties broken by name, so the choice never depends on the order of the list;
* its spec merged over ``node_defaults`` (the profile's keys win, the others are the defaults');
* ``node_defaults`` alone when no profile matches.

The choice is pure and deterministic (:meth:`ProfileSet.choose`); where it is applied (a pool's
creation, and a Node's relabelling, through the defaults' field ownership) is the node source's
business. Only the label keys the selectors name (:attr:`ProfileSet.label_keys`) are ever read.

Invariants: profile names are unique and valid label values (the pool records its profile in a
label); two profiles never have the same selector (the second would never be chosen).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from eni_ipam.config.schema import ConfigModel, FieldError
from eni_ipam.core.spec import NodeSpec

_LABEL_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
LABEL_KEY = re.compile(rf"^([a-z0-9]([-a-z0-9.]{{0,251}}[a-z0-9])?/)?{_LABEL_NAME}$")
"""A Kubernetes qualified name: a label's key, and a taint's (an optional DNS prefix and ``/``, then a
name of 1 to 63 characters)."""
_LABEL_VALUE = re.compile(rf"^({_LABEL_NAME})?$")
_PROFILE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def _label_key(key: str) -> str:
    if not LABEL_KEY.fullmatch(key):
        raise ValueError(
            f"{key!r} is not a label key (an optional DNS prefix and '/', then 1 to 63 letters, digits, "
            "'-', '_' or '.', starting and ending with a letter or digit)"
        )
    return key


def _label_value(value: str) -> str:
    if not _LABEL_VALUE.fullmatch(value):
        raise ValueError(
            f"{value!r} is not a label value (at most 63 letters, digits, '-', '_' or '.', starting and "
            "ending with a letter or digit)"
        )
    return value


def _profile_name(value: str) -> str:
    if not _PROFILE_NAME.fullmatch(value):
        raise ValueError(
            f"{value!r}: a profile name is 1 to 63 lower-case letters, digits and '-', starting and ending "
            "with a letter or digit (it is written as a label value on the pools that follow it)"
        )
    return value


LabelKey = Annotated[str, AfterValidator(_label_key)]
LabelValue = Annotated[str, AfterValidator(_label_value)]


class LabelRequirement(ConfigModel):
    """One entry of ``match_expressions``: Kubernetes' ``LabelSelectorRequirement``."""

    key: LabelKey
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: Annotated[tuple[LabelValue, ...], Field(strict=False)] = ()
    """The values of ``In`` and ``NotIn`` (at least one); none for ``Exists`` and ``DoesNotExist``."""

    @model_validator(mode="after")
    def _values_fit(self) -> LabelRequirement:
        if self.operator in ("In", "NotIn") and not self.values:
            raise FieldError("values", f"operator {self.operator} needs at least one value")
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise FieldError("values", f"operator {self.operator} takes no values")
        return self

    def matches(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.key)
        if self.operator == "In":
            return value is not None and value in self.values
        if self.operator == "NotIn":
            return value is None or value not in self.values
        if self.operator == "Exists":
            return value is not None
        return value is None  # DoesNotExist


class NodeSelector(ConfigModel):
    """Which Nodes a profile is for: all of ``match_labels`` and all of ``match_expressions`` hold.
    An empty selector matches every Node (the least specific profile of all)."""

    match_labels: dict[LabelKey, LabelValue] = {}
    """Labels the Node carries with exactly these values."""
    match_expressions: Annotated[tuple[LabelRequirement, ...], Field(strict=False)] = ()
    """Requirements (``In``, ``NotIn``, ``Exists``, ``DoesNotExist``) the Node's labels meet."""

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.match_labels.items()) and all(
            r.matches(labels) for r in self.match_expressions
        )

    @property
    def specificity(self) -> int:
        """The number of label requirements: the more, the more specific."""
        return len(self.match_labels) + len(self.match_expressions)

    def label_keys(self) -> frozenset[str]:
        """The label keys the selector reads."""
        return frozenset(self.match_labels) | {r.key for r in self.match_expressions}

    def canonical(self) -> tuple[object, ...]:
        """The selector written one way (equal for selectors that say the same)."""
        return (
            tuple(sorted(self.match_labels.items())),
            tuple(sorted((r.key, r.operator, tuple(sorted(set(r.values)))) for r in self.match_expressions)),
        )


class Profile(ConfigModel):
    """An entry of ``profiles``: node spec keys for the Nodes its selector matches."""

    name: Annotated[str, AfterValidator(_profile_name)]
    """What pools following it say (the ``eni-ipam.io/profile`` label, the Profile column)."""
    node_selector: NodeSelector
    """The Nodes it is for (``{}``: every Node)."""
    spec: NodeSpec = NodeSpec()
    """Node spec keys, merged over ``node_defaults`` (these win)."""


def check_profiles(profiles: Sequence[Profile], path: str = "profiles") -> None:
    """Refuse two profiles of one name, or of one selector (the second would never be chosen).

    Raises:
        FieldError: naming the second entry (``profiles[1].name``).
    """
    names: dict[str, int] = {}
    selectors: dict[tuple[object, ...], str] = {}
    for n, profile in enumerate(profiles):
        if profile.name in names:
            raise FieldError(
                f"{path}[{n}].name",
                f"profile {profile.name} is listed twice (also {path}[{names[profile.name]}])",
            )
        names[profile.name] = n
        canonical = profile.node_selector.canonical()
        if canonical in selectors:
            raise FieldError(
                f"{path}[{n}].node_selector",
                f"the same selector as profile {selectors[canonical]}'s: one of the two would never be "
                "chosen (merge their specs, or make one selector more specific)",
            )
        selectors[canonical] = profile.name


def merged(defaults: NodeSpec | None, spec: NodeSpec) -> NodeSpec:
    """``spec``'s written keys over ``defaults``' written keys; the keys written in either are the
    result's written keys (what a pool created from it carries, :meth:`NodeSpec.as_pool_spec`)."""
    values = {key: getattr(defaults, key) for key in defaults.model_fields_set} if defaults else {}
    values.update({key: getattr(spec, key) for key in spec.model_fields_set})
    return NodeSpec.model_construct(set(values), **values)


class ProfileSet:
    """The profiles of a run, ordered most specific first, each merged over ``node_defaults``."""

    def __init__(self, profiles: Sequence[Profile] = (), defaults: NodeSpec | None = None) -> None:
        self.defaults = defaults
        self.profiles = tuple(sorted(profiles, key=lambda p: (-p.node_selector.specificity, p.name)))
        """Most specific first, ties by name: the order they are tried in."""
        self._specs = {p.name: merged(defaults, p.spec) for p in self.profiles}
        self.label_keys: frozenset[str] = frozenset(
            k for p in self.profiles for k in p.node_selector.label_keys()
        )
        """Every label key a selector reads: the only labels of a Node worth keeping."""

    def __bool__(self) -> bool:
        return bool(self.profiles)

    def select(self, labels: Mapping[str, str]) -> Profile | None:
        """The profile a Node with ``labels`` follows, or None (it follows ``node_defaults``)."""
        return next((p for p in self.profiles if p.node_selector.matches(labels)), None)

    def choose(self, labels: Mapping[str, str]) -> tuple[str, NodeSpec | None]:
        """``(profile name, spec keys)`` for a Node with ``labels``: ``("", node_defaults)`` when no
        profile matches."""
        profile = self.select(labels)
        if profile is None:
            return "", self.defaults
        return profile.name, self._specs[profile.name]
