"""The run configuration of ``eni-ipam run``: one YAML file, overridable from the environment.

Everything is validated before anything starts: an unknown key or a bad value is a
:class:`~eni_ipam.errors.ConfigError` naming the field (and the environment variable that set
it, if one did), and nothing runs. The format is documented in docs/configuration.md.

The model is a pydantic-settings ``BaseSettings``: the file is its input and the environment
overrides it through the library's own source — ``ENI_IPAM_<KEY>`` sets a top-level key and ``__``
descends into a section (``ENI_IPAM_SETTINGS__GC_INTERVAL=10m``, ``ENI_IPAM_AWS__REGION=eu-west-1``);
structured values are read as YAML (``{team: a}``). A variable that names no setting is refused
(:func:`check_environment`) rather than ignored: a typo must not silently change nothing.

Each registered provider (:mod:`eni_ipam.app.providers`) contributes its section, typed by its own
model; only the selected provider's section may be written.
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Annotated, Any, Literal, cast, get_args, get_origin

from pydantic import BaseModel, Field, ValidationError, create_model, model_validator
from pydantic_settings import BaseSettings, EnvSettingsSource, PydanticBaseSettingsSource, SettingsConfigDict

from eni_ipam.adapters.limits import (
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_READ_TIMEOUT,
    MAX_SERVER_CONNECTIONS,
    MAX_SERVER_READ_TIMEOUT,
)
from eni_ipam.app.providers import plugins
from eni_ipam.config.files import load_yaml_text, plain_data_problem, read_config_file
from eni_ipam.config.schema import (
    ConfigModel,
    Duration,
    FieldError,
    LogLevel,
    Name,
    NonNegativeInt,
    PositiveDuration,
    config_errors,
)
from eni_ipam.config.suggest import closest
from eni_ipam.core.profiles import Profile, ProfileSet, check_profiles, merged
from eni_ipam.core.settings import Settings
from eni_ipam.core.spec import SPEC_FIELDS, NodeResource, NodeSpec, spec_problems
from eni_ipam.errors import ConfigError, ConfigErrors, combine
from eni_ipam.kube.settings import KubeSettings

ENV_PREFIX = "ENI_IPAM_"
NODE_SOURCES = ("kubernetes", "memory")


class ServerSettings(ConfigModel):
    host: Name = "0.0.0.0"
    """Where /metrics, /healthz and /readyz listen (all interfaces: Prometheus and kubelet probes
    come from outside the pod)."""
    port: Annotated[int, Field(ge=0, le=65535)] = 9090
    """The port of /metrics, /healthz and /readyz (the chart's container port follows it)."""
    probe_host: Name = "0.0.0.0"
    """Where kubelet's probes are answered (/healthz, /readyz alone): kubelet probes the pod's address."""
    probe_port: Annotated[int, Field(ge=0, le=65535)] = 9092
    """The probe listener's port (the chart's probes follow it): slots of its own, so that no flood of
    ``port`` can make kubelet restart the controller (decision 0043). 0: a port the kernel picks."""
    max_connections: Annotated[int, Field(ge=1, le=MAX_SERVER_CONNECTIONS)] = DEFAULT_MAX_CONNECTIONS
    """Connections the endpoint serves at once; one more is answered 503 without being read. Prometheus
    (two servers of an HA pair) and kubelet's two probes need a handful: 64 leaves room for dashboards
    and ``curl`` and keeps a flood of idle connections to a few dozen open files."""
    read_timeout: Annotated[PositiveDuration, Field(le=MAX_SERVER_READ_TIMEOUT)] = DEFAULT_READ_TIMEOUT
    """Seconds a client has to send a whole request once connected (or answered): a connection still
    without a request head is then closed, a body that does not arrive is answered 408. Scrapers and
    probes send their request at once; 10 s only bites on a stuck or hostile client. Also how long an
    idle kept-alive connection stays open (Prometheus opens a new one when it was closed)."""


class StaticNode(NodeSpec):
    """A node of the embedded store (``node_source: memory``): its spec keys, its identity, and the
    addresses its workloads use."""

    name: Name
    instance: Name
    """The cloud instance id."""
    used: NonNegativeInt = 0

    def resource(self, defaults: NodeSpec) -> NodeResource:
        """The node, ``node_defaults`` filling in the spec keys this entry does not write."""
        return NodeResource(
            name=self.name, instance_id=self.instance, spec=self.under(defaults).fields(), used=self.used
        )


_environ: contextvars.ContextVar[Mapping[str, str] | None] = contextvars.ContextVar("environ", default=None)


class _Environment(EnvSettingsSource):
    """pydantic-settings' environment source, reading structured values as YAML (``{team: a}``,
    ``[10.0.0.0/16]``) and the variables of :func:`load_config`'s ``environ``."""

    def __init__(self, settings_cls: type[BaseSettings], environ: Mapping[str, str]) -> None:
        super().__init__(settings_cls)
        self.env_vars = {k.lower(): v for k, v in environ.items()}  # the library matches lower-cased

    def decode_complex_value(self, field_name: str, field: Any, value: Any) -> Any:
        return load_yaml_text(value, what=field_name) if isinstance(value, str) else value


class RunConfigBase(BaseSettings):
    """The fields every run configuration has; :func:`run_config_model` adds the providers'."""

    # The configuration layer's rules, and the environment read the way docs/configuration.md says.
    model_config = cast(
        SettingsConfigDict,
        {
            **ConfigModel.model_config,
            "env_prefix": ENV_PREFIX,
            "env_nested_delimiter": "__",
            "case_sensitive": False,
        },
    )

    provider: str
    """Which cloud: a registered provider (aws, azure, generic, or sim: the in-memory cloud, for
    trials). Required: there is no safe default cloud."""
    node_source: Literal["kubernetes", "memory"] = "kubernetes"
    """Where nodes come from: ENIPool resources (kubernetes) or the ``nodes`` list (memory)."""
    log_level: LogLevel = "info"
    shutdown_timeout: Duration = 20.0
    """On SIGTERM, how long in-flight cloud calls may take to finish before they are cancelled.
    Shorter than the pod's termination grace period (45 s in the chart), so the Lease is always
    released and a standby takes over at once instead of after a lease duration."""
    server: ServerSettings = ServerSettings()
    settings: Settings = Settings()
    kubernetes: KubeSettings = KubeSettings()
    node_defaults: NodeSpec = NodeSpec()
    """The spec every node starts from: the ENIPools created for Nodes, and the ``nodes`` entries
    (whose own keys win)."""
    profiles: Annotated[tuple[Profile, ...], Field(strict=False)] = ()
    """Node spec keys by Node labels: each a ``name``, a ``node_selector`` and a ``spec`` merged over
    ``node_defaults``; a Node's pool follows the most specific profile that matches it
    (:mod:`eni_ipam.core.profiles`). ``node_source: kubernetes`` only."""
    nodes: Annotated[tuple[StaticNode, ...], Field(strict=False)] = ()
    """``node_source: memory`` only: the nodes, each with ``name``, ``instance`` and spec keys."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        environ = _environ.get()
        if environ is None:
            return (init_settings,)
        return (_Environment(settings_cls, environ), init_settings)  # the environment wins

    @model_validator(mode="after")
    def _sections(self) -> RunConfigBase:
        chosen = plugins()[self.provider]
        for name in plugins():
            if name != self.provider and getattr(self, name) is not None:
                raise FieldError(name, f"a section for provider {name}, but provider is {self.provider}")
        if getattr(self, self.provider) is None and chosen.REQUIRED:
            needs = [n for n, f in chosen.SETTINGS.model_fields.items() if f.is_required()]
            raise FieldError(
                self.provider, f"required with provider: {self.provider} (at least {', '.join(needs)})"
            )
        if self.nodes and self.node_source != "memory":
            raise FieldError("nodes", "only used with node_source: memory (Kubernetes nodes come from Nodes)")
        if self.profiles and self.node_source != "kubernetes":
            raise FieldError(
                "profiles", "only used with node_source: kubernetes (they select Nodes by label)"
            )
        check_profiles(self.profiles)
        names: dict[str, int] = {}
        instances: dict[str, str] = {}
        for n, node in enumerate(self.nodes):
            if node.name in names:
                raise FieldError(f"nodes[{n}].name", f"node {node.name} listed twice")
            if node.instance in instances:
                raise FieldError(
                    f"nodes[{n}].instance",
                    f"instance {node.instance} is node {instances[node.instance]}'s already: two nodes "
                    "on one instance would hand out the same addresses",
                )
            names[node.name] = n
            instances[node.instance] = node.name
        return self

    @property
    def provider_settings(self) -> Any:
        """The selected provider's section (its defaults when not written)."""
        section = getattr(self, self.provider)
        return section if section is not None else plugins()[self.provider].SETTINGS()

    def profile_set(self) -> ProfileSet:
        """``profiles`` ordered for choosing, each merged over ``node_defaults``."""
        return ProfileSet(self.profiles, self.node_defaults)

    def static_nodes(self) -> list[NodeResource]:
        """The ``nodes`` entries (``node_defaults`` applied), with their used addresses."""
        return [node.resource(self.node_defaults) for node in self.nodes]


RunConfig = RunConfigBase
"""The run configuration's type (instances come from :func:`run_config_model`'s class)."""


@functools.cache
def run_config_model() -> type[RunConfigBase]:
    """The run configuration model with one optional section per registered provider."""
    names = tuple(plugins())
    sections: dict[str, Any] = {
        name: (cast(Any, plugin.SETTINGS) | None, Field(default=None, description=f"provider: {name} only"))
        for name, plugin in plugins().items()
    }
    provider: Any = (Literal[names], ...)  # the registered names, known only now
    return create_model("RunConfig", __base__=RunConfigBase, provider=provider, **sections)


def load_config(path: str | Path | None, environ: Mapping[str, str] | None = None) -> RunConfigBase:
    """Read ``path`` (the embedded default when ``None``), apply ``ENI_IPAM_…`` overrides, validate.

    Raises:
        ConfigError: unreadable file, invalid YAML, unknown key, bad value or values that contradict
            each other (``field`` names the first; :class:`~eni_ipam.errors.ConfigErrors` when there
            are several, ``errors`` lists them all).
    """
    config, problems = read_config(path, environ)
    found = combine(problems)
    if found is not None:
        raise found
    return config


def read_config(
    path: str | Path | None, environ: Mapping[str, str] | None = None
) -> tuple[RunConfigBase, list[ConfigError]]:
    """:func:`load_config`'s configuration with the problems of meaning it has (:func:`check_meaning`)
    returned rather than raised, for ``run --check`` to list them with what else it finds.

    Raises:
        ConfigError: what stops the configuration from being built at all, as :func:`load_config`.
    """
    environ = environ or {}
    if path is None:
        refused = _another_cloud_on_the_default(environ)
        if refused:
            try:
                check_environment(run_config_model(), environ)
            except ConfigError as exc:  # the other variables' mistakes, in the same round
                refused += [e for e in exc.errors if e.field not in {r.field for r in refused}]
            raise ConfigErrors(refused)
    data: Any = (
        load_yaml_text(DEFAULT_CONFIG, what="the embedded default")
        if path is None
        else read_config_file(path)
    )
    if not isinstance(data, Mapping):
        raise ConfigError("--config", f"expected a mapping at the top, got {type(data).__name__}")
    return _validated(data, environ=environ)


EXAMPLES = "examples/config"
"""Where the repository keeps a ready configuration per provider and node source."""


def _another_cloud_on_the_default(environ: Mapping[str, str]) -> list[ConfigError]:
    """Without ``--config``, overrides apply to the embedded default: the in-memory demo. Choosing
    another provider or node source there cannot work (the default's ``sim:`` cloud and ``nodes``
    belong to the demo), and merging would blame a ``sim:`` section nobody wrote; say what to do
    instead. Overrides of anything else (``log_level``, ``server.port``) keep working on it."""
    errors: list[ConfigError] = []
    others = [name for name in plugins() if name != "sim"]
    for variable in sorted(environ):
        if not variable.upper().startswith(ENV_PREFIX):
            continue
        key = variable[len(ENV_PREFIX) :].split("__")[0].lower()
        if key in ("provider", "node_source") or key in others:
            errors.append(
                ConfigError(
                    key,
                    f"set by {variable}, but without --config the configuration is the embedded default, "
                    "the in-memory demo (provider sim, node_source memory): to run another provider or "
                    f"node source, pass --config FILE (e.g. {EXAMPLES}/aws-kubernetes.yaml) and keep "
                    "the variable as an override of it",
                )
            )
    return errors


def load_config_mapping(
    data: Mapping[str, Any], *, environ: Mapping[str, str] | None = None
) -> RunConfigBase:
    """Validate a run configuration given as plain data, with ``environ``'s overrides (none when
    None). Raises as :func:`load_config`."""
    config, problems = _validated(data, environ=environ)
    found = combine(problems)
    if found is not None:
        raise found
    return config


def _validated(
    data: Mapping[str, Any], *, environ: Mapping[str, str] | None = None
) -> tuple[RunConfigBase, list[ConfigError]]:
    if not isinstance(data, Mapping):
        raise ConfigError("config", f"expected a mapping, got {type(data).__name__}")
    problem = plain_data_problem(data)
    if problem:
        raise ConfigError("config", f"the configuration {problem}")
    for key in data:
        if not isinstance(key, str):
            raise ConfigError(repr(key), "unknown key (keys are names)")
    model = run_config_model()
    sources = check_environment(model, environ or {})
    token = _environ.set(environ or {})
    try:
        config = model(**data)
    except ValidationError as exc:
        found = combine([_attributed(e, sources) for e in config_errors(exc, model=model, data=data)])
        assert found is not None  # a ValidationError has at least one error
        raise found from None
    finally:
        _environ.reset(token)
    return config, [_attributed(e, sources) for e in check_meaning(config)]


def _attributed(error: ConfigError, sources: Mapping[str, str]) -> ConfigError:
    """``error`` naming the environment variable that set its field, if one did."""
    for field, variable in sources.items():
        if error.field == field or error.field.startswith((field + ".", field + "[")):
            return ConfigError(error.field, f"{error.message} (set by {variable})")
    return error


def check_meaning(config: RunConfigBase) -> list[ConfigError]:
    """What each value allows but the values together make impossible: the node specs a pool would
    really get (``node_defaults``; each ``nodes`` entry and each profile merged over it) checked
    with :func:`~eni_ipam.core.spec.spec_problems`. Only what no pool could honour is refused."""
    errors: list[ConfigError] = []
    defaults = config.node_defaults
    specs: list[tuple[str, NodeSpec, AbstractSet[str]]] = [
        ("node_defaults", defaults, defaults.model_fields_set)
    ]
    for n, node in enumerate(config.nodes):
        own = node.model_fields_set & set(SPEC_FIELDS)
        specs.append((f"nodes[{n}]", node.under(defaults), own | defaults.model_fields_set))
    for n, profile in enumerate(config.profiles):
        spec = merged(defaults, profile.spec)
        specs.append((f"profiles[{n}].spec", spec, spec.model_fields_set))
    inherited = set(spec_problems(defaults))  # named once, at node_defaults, not again per node
    for path, spec, written in specs:
        for problem in spec_problems(spec, written):
            if path == "node_defaults" or problem not in inherited:
                errors.append(ConfigError(f"{path}.{problem[0]}", problem[1]))
    return errors


def check_environment(model: type[BaseModel], environ: Mapping[str, str]) -> dict[str, str]:
    """Which field each ``ENI_IPAM_…`` variable sets (``settings.gc_interval`` → its name).

    Raises:
        ConfigError: a variable names no setting (with the closest one it may mean), descends into a
            value that is not a section, or holds text that is not YAML; every such variable at once
            (:class:`~eni_ipam.errors.ConfigErrors`).
    """
    sources: dict[str, str] = {}
    errors: list[ConfigError] = []
    for variable in sorted(environ):
        if not variable.upper().startswith(ENV_PREFIX):
            continue
        keys = [k.lower() for k in variable[len(ENV_PREFIX) :].split("__")]
        field = ".".join(keys)
        try:
            if not all(keys):
                raise ConfigError(field or variable, f"{variable} does not name a setting")
            _check_path(model, keys, variable)
            try:
                load_yaml_text(environ[variable], what=variable)
            except ValueError as exc:
                raise ConfigError(field, str(exc)) from None
        except ConfigError as exc:
            errors.append(exc)
            continue
        sources[field] = variable
    found = combine(errors)
    if found is not None:
        raise found
    return sources


def _check_path(model: type[BaseModel], keys: list[str], variable: str) -> None:
    current: Any = model
    for depth, key in enumerate(keys):
        fields = getattr(current, "model_fields", None)
        if fields is None:
            if _is_mapping(current):
                return  # a mapping (tags, buckets) takes any key
            raise ConfigError(".".join(keys[:depth]), f"{variable} descends into a non-mapping")
        if key not in fields:
            known = ", ".join(sorted(fields))
            close = closest(key, fields)
            meant = "__".join([*keys[:depth], close, *keys[depth + 1 :]]).upper() if close else ""
            hint = f" (did you mean {ENV_PREFIX}{meant}?)" if close else ""
            raise ConfigError(
                ".".join(keys[: depth + 1]), f"unknown key {key!r}{hint} (known: {known}) (set by {variable})"
            )
        current = _section_type(fields[key].annotation)


def _section_type(annotation: Any) -> Any:
    """The model (or mapping) a field's annotation holds, or the annotation for a plain value."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return annotation


def _is_mapping(annotation: Any) -> bool:
    origin = get_origin(annotation)
    if isinstance(origin, type) and issubclass(origin, Mapping):
        return True
    return any(_is_mapping(arg) for arg in get_args(annotation))


DEFAULT_CONFIG = """\
# The embedded default of `eni-ipam run` without --config: the in-memory cloud and three nodes,
# no Kubernetes. A starting point for trials; deployments use the Helm chart's configuration.
provider: sim
node_source: memory
server: {host: 127.0.0.1, port: 9090}
sim:
  latency: 0.05
  cloud:
    vpcs: [{id: vpc-1, cidr: 10.0.0.0/16}]
    subnets:
      - {id: subnet-a, vpc: vpc-1, zone: us-east-1a, cidr: 10.0.0.0/22}
      - {id: subnet-b, vpc: vpc-1, zone: us-east-1b, cidr: 10.0.4.0/22}
    security_groups: [{id: sg-nodes, vpc: vpc-1}]
    instances:
      - {id: i-0001, type: m5.large, subnet: subnet-a, security_groups: [sg-nodes]}
      - {id: i-0002, type: m5.xlarge, subnet: subnet-b, security_groups: [sg-nodes]}
      - {id: i-0003, type: c5.large, subnet: subnet-a, security_groups: [sg-nodes]}
nodes:
  - {name: node-1, instance: i-0001, used: 3}
  - {name: node-2, instance: i-0002, pre_allocate: 12}
  - {name: node-3, instance: i-0003, used: 9}
"""
