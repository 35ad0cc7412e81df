"""Scenario files: parsing and strict validation (docs/scenarios.md is the user-facing spec).

The format is a stable interface: keys are only ever added. The document is read by the project's
configuration layer (:mod:`eni_ipam._infra.config`): the operator settings, the node spec
(:class:`~eni_ipam.core.spec.NodeSpec`), the cloud declaration
(:mod:`providers.sim.declaration`) and the generic provider's settings are the very models the
run configuration uses. Every error is a :class:`~eni_ipam.errors.ConfigError` whose ``field``
names the offending key (``steps[3].expect.node1.available``), raised before anything runs; the
document itself is never changed.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, TypeAdapter, ValidationError, model_validator

from eni_ipam._infra.config import (
    ConfigModel,
    Duration,
    FieldError,
    Name,
    NonNegativeInt,
    Number,
    PositiveInt,
    config_error,
    join,
    kind,
    validate,
)
from eni_ipam._infra.files import load_yaml_file, plain_data_problem
from eni_ipam.core.fields import LooseTagMap
from eni_ipam.core.settings import Settings
from eni_ipam.core.spec import SPEC_FIELDS, NodeResource, NodeSpec
from eni_ipam.errors import ConfigError
from providers.generic.settings import GenericSettings
from providers.sim.declaration import CloudDeclaration

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


class NodeChange(NodeSpec):
    """What a ``set`` step changes of one node: any spec key, ``used``, ``pending_pods``."""

    used: NonNegativeInt | None = None
    pending_pods: NonNegativeInt | None = None

    def changes(self) -> dict[str, Any]:
        return {key: getattr(self, key) for key in self.model_fields_set}


class SubnetChange(ConfigModel):
    available: NonNegativeInt | None = None
    tags: LooseTagMap | None = None


class InstanceChange(ConfigModel):
    state: Literal["running", "stopped", "terminated"]


class Fault(ConfigModel):
    count: PositiveInt = 1
    """How many calls of the operation fail."""
    code: Name
    """The EC2 error code they fail with."""
    message: str = ""


class CloudChange(ConfigModel):
    """A ``cloud`` step: change the cloud under the reconciler."""

    subnets: dict[str, SubnetChange] = {}
    instances: dict[str, InstanceChange] = {}
    fail: dict[str, Fault] = {}
    latency: dict[str, Duration] = {}


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"([^"]*)"\s*,?')


def parse_sample(text: str) -> tuple[str, dict[str, str]]:
    """``eni_ipam_nodes{category="total"}`` → (``eni_ipam_nodes``, {category: total})."""
    m = _SAMPLE.match(text.strip())
    if not m:
        raise ValueError(f"not a metric sample name: {text!r}")
    return m.group(1), dict(_LABEL.findall(m.group(2) or ""))


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
    addresses_by_index: dict[NonNegativeInt, NonNegativeInt] | None = None
    subnet_by_index: dict[NonNegativeInt, Name] | None = None
    security_groups_by_index: (
        dict[
            NonNegativeInt,
            Annotated[tuple[Name, ...], BeforeValidator(_group_or_groups), Field(strict=False)],
        ]
        | None
    ) = None
    release_ips: NonNegativeInt | None = None


_API_CALLS: TypeAdapter[dict[str, int]] = TypeAdapter(dict[str, NonNegativeInt], config={"strict": True})
_METRICS: TypeAdapter[dict[str, float | None]] = TypeAdapter(
    dict[str, Number | None], config={"strict": True}
)
"""A sample's expected value; ``null``: no such series is exported."""


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
    cloud: CloudChange | None = None
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


class ScenarioDocument(ConfigModel):
    settings: Settings = Settings()
    """Operator-wide settings, as in the run configuration."""
    cloud: CloudDeclaration | None = None
    """The in-memory EC2 (exactly one of ``cloud`` and ``generic``)."""
    generic: GenericSettings | None = None
    """The generic provider's section instead of a cloud."""
    nodes: Annotated[tuple[NodeDocument, ...], Field(strict=False)] = ()
    steps: Annotated[tuple[StepDocument, ...], Field(strict=False)] = ()
    seed: NonNegativeInt = 0
    """Seeds backoff jitter, so runs are reproducible."""

    @model_validator(mode="after")
    def _references(self) -> ScenarioDocument:
        if (self.cloud is None) == (self.generic is None):
            raise FieldError("cloud", "required: exactly one of cloud (the in-memory EC2) and generic")
        live = _LiveNodes(self.cloud)
        for n, node in enumerate(self.nodes):
            live.add(node, f"nodes[{n}]")
        for n, step in enumerate(self.steps):
            live.step(step, f"steps[{n}]")
        return self


class _LiveNodes:
    """The nodes that exist at each step, for the references steps make."""

    def __init__(self, cloud: CloudDeclaration | None) -> None:
        self.cloud = cloud
        self.instances: dict[str, str] = {}
        """Node name → its instance."""

    def add(self, node: NodeDocument, path: str) -> None:
        if node.name in self.instances:
            raise FieldError(f"{path}.name", f"duplicate node {node.name!r}")
        instance = node.instance
        if self.cloud is None:
            instance = instance or node.name  # a generic node is its own instance
        elif instance is None:
            raise FieldError(f"{path}.instance", "required")
        elif instance not in self.cloud.instance_ids():
            raise FieldError(f"{path}.instance", f"unknown instance {instance!r}")
        owner = next((name for name, i in self.instances.items() if i == instance), None)
        if owner is not None:
            raise FieldError(
                f"{path}.instance",
                f"instance {instance} is node {owner}'s already: two nodes on one instance would "
                "hand out the same addresses",
            )
        self.instances[node.name] = instance

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
            for name in step.set:
                self.known(name, f"{where}.{name}")
        elif step.expect is not None:
            for key in step.expect:
                if key not in ("api_calls", "metrics") and key not in self.instances:
                    raise FieldError(
                        f"{where}.{key}", "not a node of the scenario at this step, nor api_calls / metrics"
                    )
        elif step.cloud is not None:
            if self.cloud is None:
                raise FieldError(where, "the generic provider has no cloud to change")
            subnets = {s.id for s in self.cloud.subnets}
            for sid in step.cloud.subnets:
                if sid not in subnets:
                    raise FieldError(f"{where}.subnets.{sid}", f"unknown subnet {sid!r}")
            for iid in step.cloud.instances:
                if iid not in self.cloud.instance_ids():
                    raise FieldError(f"{where}.instances.{iid}", f"unknown instance {iid!r}")


# -- what the simulator runs -----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Step:
    kind: str
    value: Any
    """converge / advance: seconds; set: {node: {key: value}}; add_node: a :class:`NodeResource`;
    remove_node: a name; cloud: a :class:`CloudChange`; expect: the expectations as written."""
    path: str


@dataclasses.dataclass(frozen=True)
class Scenario:
    settings: Settings
    cloud: CloudDeclaration | None
    nodes: tuple[NodeResource, ...]
    steps: tuple[Step, ...]
    seed: int = 0
    generic: GenericSettings | None = None
    """Set for a generic-provider scenario (section ``generic:`` instead of ``cloud:``)."""


def _entry(node: NodeDocument) -> NodeResource:
    return NodeResource(
        name=node.name,
        instance_id=node.instance or node.name,
        spec=node.fields(),
        used=node.used,
        pending_pods=node.pending_pods,
    )


def _step(step: StepDocument, path: str) -> Step:
    kind_ = step.kind
    where = join(path, kind_)
    if step.add_node is not None:
        return Step(kind_, _entry(step.add_node), where)
    if step.set is not None:
        return Step(kind_, {name: change.changes() for name, change in step.set.items()}, where)
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
    return Scenario(
        settings=document.settings,
        cloud=document.cloud,
        nodes=tuple(_entry(n) for n in document.nodes),
        steps=tuple(_step(s, f"steps[{n}]") for n, s in enumerate(document.steps)),
        seed=document.seed,
        generic=document.generic,
    )


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate the scenario file ``path``. Raises ConfigError as :func:`parse_scenario`
    (``field`` ``""`` when the file cannot be read or is not YAML)."""
    try:
        data = load_yaml_file(path)
    except ValueError as exc:
        raise ConfigError("", str(exc)) from None
    return parse_scenario(data)
