"""Scenario files: parsing and strict validation (docs/scenarios.md is the user-facing spec).

The format is a stable interface: keys are only ever added. The document is read by the project's
configuration layer (:mod:`eni_ipam.config.schema`): the operator settings and the node spec
(:class:`~eni_ipam.core.spec.NodeSpec`) are the very models the run configuration uses, and the
cloud's section (``cloud:`` or ``generic:``) and its ``cloud`` steps are read by the models of the
emulator registered for that section (:mod:`eni_ipam.simulator.emulation`). Every error is a
:class:`~eni_ipam.errors.ConfigError` whose ``field`` names the offending key
(``steps[3].expect.node1.available``), raised before anything runs; the document itself is never
changed.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, TypeAdapter, ValidationError, model_validator

from eni_ipam.config.files import load_yaml_file, plain_data_problem
from eni_ipam.config.schema import (
    ConfigModel,
    Duration,
    FieldError,
    Name,
    NonNegativeInt,
    Number,
    config_error,
    join,
    kind,
    short,
    validate,
)
from eni_ipam.core.profiles import LabelKey, LabelValue, Profile, ProfileSet, check_profiles
from eni_ipam.core.settings import Settings
from eni_ipam.core.spec import DEFAULT_SPEC, SPEC_FIELDS, NodeResource, NodeSpec
from eni_ipam.errors import ConfigError
from eni_ipam.simulator.emulation import Emulator, emulator

ScenarioError = ConfigError
"""A scenario file is invalid: the same error as any other configuration (``path`` is ``field``)."""

NODE_SPEC_KEYS = frozenset(SPEC_FIELDS)
"""The node spec keys a node entry (and a ``set`` step) may carry."""
STEP_KINDS = ("converge", "advance", "expect", "set", "cloud", "add_node", "remove_node")


# -- the document ----------------------------------------------------------------------------------


class NodeDocument(NodeSpec):
    """An entry of ``nodes:`` (or an ``add_node`` step): a node, its instance and its usage."""

    name: Name
    instance: Name | None = None
    """The cloud instance; optional with ``generic:`` (the node is its own instance)."""
    used: NonNegativeInt = 0
    """Addresses the node's pods use (may exceed the pool)."""
    pending_pods: NonNegativeInt = 0
    """Pods scheduled to the node, waiting for an address (drive surge allocation)."""
    labels: dict[LabelKey, LabelValue] = {}
    """The Node's labels: they choose its profile (``profiles``)."""


class NodeChange(NodeSpec):
    """What a ``set`` step changes of one node: any spec key, ``used``, ``pending_pods``, ``agent``."""

    used: NonNegativeInt | None = None
    pending_pods: NonNegativeInt | None = None
    agent: Literal["up", "down"] | None = None
    """``down``: the node's agent stops answering the release handshake (nothing of the node is
    released) until a later step says ``up``."""
    labels: dict[LabelKey, LabelValue] | None = None
    """The Node's labels from now on (all of them): a relabelled node follows its new profile."""

    def changes(self) -> dict[str, Any]:
        return {key: getattr(self, key) for key in self.model_fields_set if key != "labels"}


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"([^"]*)"\s*,?')


def parse_sample(text: str) -> tuple[str, dict[str, str]]:
    """``eni_ipam_nodes{category="total"}`` → (``eni_ipam_nodes``, {category: total})."""
    m = _SAMPLE.match(text.strip())
    if not m:
        raise ValueError(f"not a metric sample name: {text!r}")
    return m.group(1), dict(_LABEL.findall(m.group(2) or ""))


_SLOT = re.compile(r"^(0|[1-9][0-9]{0,2})/(0|[1-9][0-9]{0,2})$")


def slot_name(value: Any) -> str:
    """Where an interface is attached, in one written form: its device index on network card 0
    (``3``, ``"3"`` and ``"0/3"`` are ``"3"``), ``"<card>/<index>"`` on another card (``"1/0"``).

    Raises:
        ValueError: neither a non-negative device index nor ``<network card>/<device index>``.
    """
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return str(value)
    if isinstance(value, str) and (value.isdigit() or _SLOT.fullmatch(value)):
        card, _, index = value.rpartition("/")
        return f"{int(card)}/{int(index)}" if card and int(card) else str(int(index))
    raise ValueError(f"{short(value)}: write a device index, or <network card>/<device index> (1/0)")


Slot = Annotated[str, BeforeValidator(slot_name)]
"""Where an interface is attached, as an expectation names it (:func:`slot_name`)."""


def _group_or_groups(value: Any) -> Any:
    """One security group id or a list of them: a lone id is a list of one."""
    return [value] if isinstance(value, str) else value


class NodeExpectation(ConfigModel):
    """What an ``expect`` step checks of one node (docs/scenarios.md, "expect")."""

    available: NonNegativeInt | None = None
    used: NonNegativeInt | None = None
    needed: NonNegativeInt | None = None
    excess: NonNegativeInt | None = None
    interfaces: NonNegativeInt | None = None
    prefixes: NonNegativeInt | None = None
    running: bool | None = None
    addresses_by_index: dict[Slot, NonNegativeInt] | None = None
    subnet_by_index: dict[Slot, Name] | None = None
    security_groups_by_index: (
        dict[
            Slot,
            Annotated[tuple[Name, ...], BeforeValidator(_group_or_groups), Field(strict=False)],
        ]
        | None
    ) = None
    release_ips: NonNegativeInt | None = None
    ipv6_prefixes: NonNegativeInt | None = None
    """IPv6 prefixes on the pool's interfaces (1: the node has its /80)."""
    message_contains: str | None = None
    """Text the node's status message holds (why it is not progressing)."""


_API_CALLS: TypeAdapter[dict[str, int]] = TypeAdapter(dict[str, NonNegativeInt], config={"strict": True})
_METRICS: TypeAdapter[dict[str, float | None]] = TypeAdapter(
    dict[str, Number | None], config={"strict": True}
)
"""A sample's expected value; ``null``: no such series is exported."""


def _mapping(value: Any) -> Any:
    """A section read later by its emulator's model: here only a mapping."""
    if not isinstance(value, Mapping):
        raise ValueError(f"expected a mapping, got {kind(value)}")
    return value


def _expect(value: Any) -> Any:
    """An ``expect`` step: ``api_calls``, ``metrics`` and node names (checked against the scenario
    later, when the nodes of that step are known)."""
    if not isinstance(value, Mapping):
        raise ValueError(f"expected a mapping, got {kind(value)}")
    for key, fields in value.items():
        try:
            if key == "api_calls":
                _API_CALLS.validate_python(fields)
            elif key == "metrics":
                _METRICS.validate_python(fields)
                for sample in fields:
                    try:
                        parse_sample(str(sample))
                    except ValueError as exc:
                        raise FieldError(f"metrics.{sample}", str(exc)) from None
            else:
                NodeExpectation.model_validate(fields)
        except ValidationError as exc:
            inner = config_error(exc, path=str(key), model=NodeExpectation, data=fields)
            raise FieldError(inner.field, inner.message) from None
    return value


class StepDocument(ConfigModel):
    """One step: exactly one of its kinds (docs/scenarios.md, "steps")."""

    converge: Duration | None = None
    advance: Duration | None = None
    expect: Annotated[Mapping[str, Any], BeforeValidator(_expect)] | None = None
    set: dict[str, NodeChange] | None = None
    cloud: Annotated[Mapping[str, Any], BeforeValidator(_mapping)] | None = None
    """Read by the emulator's change model once the scenario's section is known."""
    add_node: NodeDocument | None = None
    remove_node: Name | None = None

    @model_validator(mode="before")
    @classmethod
    def _one_kind(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            raise ValueError(f"expected a mapping, got {kind(data)}")
        if len(data) != 1:
            raise ValueError(f"a step has exactly one of: {', '.join(STEP_KINDS)}")
        (key,) = data
        if key not in STEP_KINDS:
            raise FieldError(str(key), f"unknown step (known: {', '.join(STEP_KINDS)})")
        return data

    @property
    def kind(self) -> str:
        (key,) = self.model_fields_set
        return key


SECTIONS = ("cloud", "generic")
"""The sections that declare a scenario's cloud: the in-memory EC2, or the generic provider."""


class ScenarioDocument(ConfigModel):
    settings: Settings = Settings()
    """Operator-wide settings, as in the run configuration."""
    cloud: Annotated[Mapping[str, Any], BeforeValidator(_mapping)] | None = None
    """The in-memory EC2 (exactly one of ``cloud`` and ``generic``)."""
    generic: Annotated[Mapping[str, Any], BeforeValidator(_mapping)] | None = None
    """The generic provider's section instead of a cloud."""
    node_defaults: NodeSpec = NodeSpec()
    """Spec keys of every node that neither its profile nor its entry writes, as in the run
    configuration."""
    profiles: Annotated[tuple[Profile, ...], Field(strict=False)] = ()
    """Spec keys by node labels, as in the run configuration: a node follows the most specific
    profile its ``labels`` match; the keys its entry (or a ``set`` step) writes win over both."""
    nodes: Annotated[tuple[NodeDocument, ...], Field(strict=False)] = ()
    steps: Annotated[tuple[StepDocument, ...], Field(strict=False)] = ()
    seed: NonNegativeInt = 0
    """Seeds backoff jitter, so runs are reproducible."""

    @model_validator(mode="after")
    def _one_section(self) -> ScenarioDocument:
        if (self.cloud is None) == (self.generic is None):
            raise FieldError("cloud", "required: exactly one of cloud (the in-memory EC2) and generic")
        check_profiles(self.profiles)
        return self

    @property
    def section(self) -> str:
        return "cloud" if self.cloud is not None else "generic"


class _LiveNodes:
    """The nodes that exist at each step, for the references steps make."""

    def __init__(self, emulator: Emulator, declaration: Any, profiles: ProfileSet | None = None) -> None:
        self.emulator = emulator
        self.declaration = declaration
        self.profiles = profiles or ProfileSet()
        self.written: dict[str, dict[str, Any]] = {}
        """Node name → the spec keys its entry and its ``set`` steps wrote (they win over profiles)."""
        self.labels: dict[str, dict[str, str]] = {}
        """Node name → its labels as they stand."""
        self.specs: dict[str, NodeSpec] = {}
        """A node entry's or a step's path and the node's name → its spec, profiles applied."""
        self.declared = emulator.instances(declaration)
        """The instances a node may name; None: any (a node is its own instance)."""
        self.instances: dict[str, str] = {}
        """Node name → its instance."""
        self.changes: dict[str, Any] = {}
        """A ``cloud`` step's path → its change, validated."""

    def add(self, node: NodeDocument, path: str) -> None:
        if node.name in self.instances:
            raise FieldError(f"{path}.name", f"duplicate node {node.name!r}")
        instance = node.instance
        if self.declared is None:
            instance = instance or node.name  # a generic node is its own instance
        elif instance is None:
            raise FieldError(f"{path}.instance", "required")
        elif instance not in self.declared:
            raise FieldError(f"{path}.instance", f"unknown instance {instance!r}")
        owner = next((name for name, i in self.instances.items() if i == instance), None)
        if owner is not None:
            raise FieldError(
                f"{path}.instance",
                f"instance {instance} is node {owner}'s already: two nodes on one instance would "
                "hand out the same addresses",
            )
        self.instances[node.name] = instance
        self.written[node.name] = {key: getattr(node, key) for key in node.model_fields_set & NODE_SPEC_KEYS}
        self.labels[node.name] = dict(node.labels)
        self.specs[f"{path}/{node.name}"] = self.resolve(node.name)

    def resolve(self, name: str) -> NodeSpec:
        """Node ``name``'s spec: the keys written for it over its profile's (or ``node_defaults``)."""
        _, defaults = self.profiles.choose(self.labels[name])
        return (defaults or DEFAULT_SPEC).replace(**self.written[name]).fields()

    def known(self, name: str, path: str) -> None:
        if name not in self.instances:
            raise FieldError(path, f"unknown node {name!r}")

    def step(self, step: StepDocument, path: str) -> None:
        where = f"{path}.{step.kind}"
        if step.add_node is not None:
            self.add(step.add_node, where)
        elif step.remove_node is not None:
            self.known(step.remove_node, where)
            del self.instances[step.remove_node]
        elif step.set is not None:
            for name, changed in step.set.items():
                self.known(name, f"{where}.{name}")
                self.written[name].update(
                    {key: getattr(changed, key) for key in changed.model_fields_set & NODE_SPEC_KEYS}
                )
                if changed.labels is not None:
                    self.labels[name] = dict(changed.labels)
                self.specs[f"{where}/{name}"] = self.resolve(name)
        elif step.expect is not None:
            for key in step.expect:
                if key not in ("api_calls", "metrics") and key not in self.instances:
                    raise FieldError(
                        f"{where}.{key}", "not a node of the scenario at this step, nor api_calls / metrics"
                    )
        elif step.cloud is not None:
            if self.emulator.CHANGE is None:
                raise FieldError(where, "the generic provider has no cloud to change")
            change = validate(self.emulator.CHANGE, step.cloud, path=where)
            try:
                self.emulator.check_change(self.declaration, change)
            except FieldError as exc:
                raise FieldError(join(where, exc.field), exc.message) from None
            self.changes[where] = change


# -- what the simulator runs -----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Step:
    kind: str
    value: Any
    """converge / advance: seconds; set: {node: {key: value}}; add_node: a :class:`NodeResource`;
    remove_node: a name; cloud: the emulator's change; expect: the expectations as written."""
    path: str


@dataclasses.dataclass(frozen=True)
class Scenario:
    settings: Settings
    section: str
    """The section that declares the cloud: ``cloud`` (the in-memory EC2) or ``generic``."""
    declaration: Any
    """That section, validated by its emulator's model."""
    nodes: tuple[NodeResource, ...]
    steps: tuple[Step, ...]
    seed: int = 0

    @property
    def cloud(self) -> Any:
        """The ``cloud:`` declaration, or None for a generic-provider scenario."""
        return self.declaration if self.section == "cloud" else None

    @property
    def generic(self) -> Any:
        """The ``generic:`` section, or None for a scenario on the in-memory EC2."""
        return self.declaration if self.section == "generic" else None


def _entry(node: NodeDocument, spec: NodeSpec) -> NodeResource:
    return NodeResource(
        name=node.name,
        instance_id=node.instance or node.name,
        spec=spec,
        used=node.used,
        pending_pods=node.pending_pods,
    )


def _step(step: StepDocument, path: str, live: _LiveNodes) -> Step:
    kind_ = step.kind
    where = join(path, kind_)
    if step.cloud is not None:
        return Step(kind_, live.changes[where], where)
    if step.add_node is not None:
        return Step(kind_, _entry(step.add_node, live.specs[f"{where}/{step.add_node.name}"]), where)
    if step.set is not None:
        # The spec as it stands after the step (keys written, labels and profiles applied).
        return Step(
            kind_,
            {
                name: {**change.changes(), "spec": live.specs[f"{where}/{name}"]}
                for name, change in step.set.items()
            },
            where,
        )
    return Step(kind_, getattr(step, kind_), where)


def parse_scenario(data: Any) -> Scenario:
    """Validate plain data (a loaded YAML document) into a :class:`Scenario`. The document is never
    changed.

    Raises:
        ConfigError: the first problem; ``field`` is the offending key's path (``""`` for the whole
            document).
    """
    problem = plain_data_problem(data)
    if problem:
        raise ConfigError("", f"the scenario {problem}")
    document = validate(ScenarioDocument, data)
    section = document.section
    cloud = emulator(section)
    declaration = validate(cloud.DECLARATION, getattr(document, section), path=section)
    live = _LiveNodes(cloud, declaration, ProfileSet(document.profiles, document.node_defaults))
    try:
        for n, node in enumerate(document.nodes):
            live.add(node, f"nodes[{n}]")
        for n, step in enumerate(document.steps):
            live.step(step, f"steps[{n}]")
    except FieldError as exc:
        raise ConfigError(exc.field, exc.message) from None
    return Scenario(
        settings=document.settings,
        section=section,
        declaration=declaration,
        nodes=tuple(
            _entry(node, live.specs[f"nodes[{n}]/{node.name}"]) for n, node in enumerate(document.nodes)
        ),
        steps=tuple(_step(s, f"steps[{n}]", live) for n, s in enumerate(document.steps)),
        seed=document.seed,
    )


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate the scenario file ``path``. Raises ConfigError as :func:`parse_scenario`
    (``field`` ``""`` when the file cannot be read or is not YAML)."""
    try:
        data = load_yaml_file(path)
    except ValueError as exc:
        raise ConfigError("", str(exc)) from None
    return parse_scenario(data)
