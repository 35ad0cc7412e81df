"""The ``eni-ipam`` command: ``run`` the service, ``simulate`` a scenario, or watch a live ``demo``.

``run`` exits 0 after a clean shutdown (SIGTERM), 2 for an invalid configuration (the message
names the field) or a part that is not built yet. ``simulate`` exits 0 when every expectation
holds, 1 with a readable diff for the first that fails, 2 with the offending key's path for an
invalid scenario or the option's name for a bad ``--series`` option.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from eni_ipam import __version__
from eni_ipam.adapters.logging import configure
from eni_ipam.adapters.terminal import inert, plural
from eni_ipam.errors import ConfigError

if TYPE_CHECKING:
    from eni_ipam.app.demo import Fault
    from eni_ipam.simulator.series import SeriesOptions


LOG_LEVELS = ("debug", "info", "warning", "error")
"""What ``--log-level`` takes: the levels the configuration's ``log_level`` takes (a test keeps them
equal; the configuration's models are not imported before a command needs them)."""


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="eni-ipam",
        description=_wrap(
            "eni-ipam keeps pools of secondary IP addresses and prefixes on cloud network interfaces "
            "(AWS ENIs, Azure NICs) for Kubernetes nodes, ready before their pods need them."
        ),
        epilog=_examples(
            ("eni-ipam demo", "start here: a simulated cluster live in the terminal, with /metrics"),
            ("eni-ipam simulate examples/scenarios/basics.yaml", "run a scenario on virtual time"),
            ("eni-ipam run --config eni-ipam.yaml --check", "validate a run configuration"),
            ("eni-ipam max-pods m5.xlarge", "the pods a node of an instance type can run"),
            more="eni-ipam COMMAND --help describes each command.",
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"eni-ipam {__version__}")
    parser.add_argument(
        "--log-level",
        default=None,
        type=str.lower,
        choices=LOG_LEVELS,
        help="debug, info, warning or error (default: the configuration's log_level for run and agent, "
        "warning for simulate)",
    )
    sub = parser.add_subparsers(dest="command", required=True, title="commands", metavar="COMMAND")

    run = _command(
        sub,
        "run",
        help="run the service (leader-elected in Kubernetes, or alone)",
        description="Run the controller: it keeps every node's pool between its watermarks and serves "
        "/metrics, /healthz and /readyz. Without --config it runs the embedded default (the in-memory "
        "cloud, three nodes, no Kubernetes), to try it.",
        examples=(
            ("eni-ipam run", "the embedded default, shown live on a terminal"),
            ("eni-ipam run --config eni-ipam.yaml --check", "validate a configuration, then exit"),
            ("eni-ipam run --config eni-ipam.yaml --port 9191", "serve /metrics on another port"),
            (
                "ENI_IPAM_SERVER__PORT=9191 eni-ipam run --config eni-ipam.yaml",
                "the same, from the environment",
            ),
        ),
    )
    run.add_argument(
        "--config",
        default=None,
        help="run configuration YAML (docs/configuration.md); ENI_IPAM_… variables override it. "
        "Without it: the embedded default (the in-memory cloud, three nodes, no Kubernetes)",
    )
    run.add_argument("--check", action="store_true", help="validate the configuration and exit")
    run.add_argument(
        "--plain",
        action="store_true",
        help="on the embedded default, log lines rather than the live view of its nodes (the view needs "
        "a terminal and eni-ipam[view])",
    )
    run.add_argument(
        "--port",
        type=_integer(0, 65535),
        default=None,
        help="port of /metrics, /healthz and /readyz; overrides server.port of the configuration and "
        "ENI_IPAM_SERVER__PORT (0: a free port, logged)",
    )

    from eni_ipam.agent import main as agent_program  # the node side's own program (standard library only)

    agent_program.add_arguments(
        _command(
            sub,
            "agent",
            help=agent_program.HELP,
            description=agent_program.DESCRIPTION,
            examples=agent_program.EXAMPLES,
        )
    )

    sim = _command(
        sub,
        "simulate",
        help="run a scenario file on the in-memory cloud, on virtual time",
        description="Run a scenario (docs/scenarios.md) against the real reconciler on the in-memory "
        "cloud, on virtual time: minutes of a cluster in a second. Exits 0 when every expectation "
        "holds, 1 at the first that does not (saying why its node got what it got), 2 for an invalid "
        "scenario.",
        examples=(
            ("eni-ipam simulate examples/scenarios/basics.yaml", "run a scenario, a line a step"),
            ("eni-ipam simulate scenario.yaml --json", "one JSON object a step, for a script"),
            ("eni-ipam simulate scenario.yaml --plot run.svg", "also draw the run (eni-ipam[plot])"),
            ("eni-ipam simulate scenario.yaml --series series.yaml", "also write promtool's input series"),
        ),
    )
    sim.add_argument("scenario", help="path to a scenario YAML file (docs/scenarios.md)")
    sim.add_argument("--json", action="store_true", help="print one JSON object per step")
    sim.add_argument(
        "--plot",
        default=None,
        metavar="FILE",
        help="also draw the run (pools, subnets, API calls, steps on virtual time) to FILE, .svg or .png "
        "(needs eni-ipam[plot]); drawn when an expectation fails too",
    )
    sim.add_argument(
        "--series",
        default=None,
        metavar="FILE",
        help="also write the exported metric series, one value per scrape, as promtool's input_series "
        "(docs/scenarios.md); written when an expectation fails too",
    )
    sim.add_argument(
        "--scrape-interval",
        type=_scrape_interval,
        default=None,
        metavar="SECONDS",
        help="seconds between two scrapes of --series, from the run's start (default 30; 15s, 1m, 500ms)",
    )
    sim.add_argument(
        "--series-label",
        dest="series_labels",
        action="append",
        type=_series_label,
        default=None,
        metavar="NAME=VALUE",
        help="a label --series adds to every series, as Prometheus adds namespace, job and instance "
        "(repeat the option)",
    )

    _status_parser(sub)

    commands = _plugins(COMMANDS)
    for name, command in commands.items():
        command.add_arguments(
            _command(
                sub,
                name,
                help=command.help,
                description=getattr(command, "description", None),
                examples=getattr(command, "examples", ()),
            )
        )
    for name in sorted(set(_FROM_TESTKIT["commands"]) - set(commands)):
        sub.add_parser(name, help=f"(needs {TESTKIT}) {_FROM_TESTKIT['commands'][name]}")

    demo = _command(
        sub,
        "demo",
        help="start here: a live simulated cluster in real time, with /metrics",
        description="A simulated cluster of mixed instance types, kept by the real reconciler in real "
        "time, drawn live in the terminal; Prometheus metrics on 127.0.0.1 while it runs. Ctrl-C or "
        "--duration stops it and prints a summary.",
        examples=(
            ("eni-ipam demo", "50 nodes for a minute; metrics on http://127.0.0.1:9090/metrics"),
            ("eni-ipam demo --nodes 200 --duration 0", "200 nodes until Ctrl-C"),
            ("eni-ipam demo --port 9191", "metrics on another port (9090 is Prometheus's own default)"),
            ("eni-ipam demo --fault credentials-revoked-at=30", "an incident to try alerts on"),
        ),
    )
    demos = _plugins(DEMOS)
    clouds = {"sim": "the in-memory cloud with pod churn (default)"}
    clouds |= {name: f"(needs {TESTKIT}) {help}" for name, help in _FROM_TESTKIT["demos"].items()}
    clouds |= {name: found.help for name, found in demos.items()}
    demo.add_argument(
        "--cloud",
        choices=tuple(clouds),
        default="sim",
        help="; ".join(f"{name}: {help}" for name, help in clouds.items()),
    )
    demo.add_argument(
        "--nodes",
        type=_integer(1, MAX_DEMO_NODES),
        default=None,
        help=f"number of nodes (default 50; moto: 10; at most {MAX_DEMO_NODES})",
    )
    demo.add_argument(
        "--duration", type=_duration, default=60.0, help="how long to run (60, 10s, 5m); 0 runs until Ctrl-C"
    )
    demo.add_argument("--seed", type=_integer(0, 2**63 - 1), default=1, help="seed of the simulated workload")
    demo.add_argument(
        "--port",
        type=_integer(0, 65535),
        default=None,
        help="port of /metrics on 127.0.0.1 (0: off; default 9090, or a free port, said, when 9090 is "
        "taken, as by a local Prometheus)",
    )
    demo.add_argument(
        "--plain",
        action="store_true",
        help="print lines rather than the live view (always off a terminal or without eni-ipam[view])",
    )
    demo.add_argument(
        "--fault",
        dest="faults",
        action="append",
        type=_fault,
        default=[],
        metavar="NAME-at=SECONDS",
        help="break the in-memory cloud SECONDS into the run, to try alerting on a known incident: "
        "credentials-revoked (every cloud call fails with AuthFailure) or credentials-restored "
        "(repeat the option)",
    )

    # Known arguments only, so that a command of a missing test kit can say so whatever its options.
    args, unknown = parser.parse_known_args(argv)
    if args.command in _FROM_TESTKIT["commands"] and args.command not in commands:
        return _needs_testkit(f"eni-ipam {args.command}")
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.command == "simulate":
        return _simulate(args, sim)
    if args.command == "run":
        return _run(args)
    if args.command == "agent":
        return agent_program.run(args)
    if args.command == "status":
        return _status(args)
    if args.command in commands:
        return int(commands[args.command].run(args))
    configure(level=args.log_level or "warning")  # JSON when stderr is not a terminal
    if args.faults and args.cloud != "sim":
        parser.error("argument --fault: only the in-memory cloud (--cloud sim) takes faults")
    if args.cloud in demos:
        chosen = demos[args.cloud]
        nodes = chosen.default_nodes if args.nodes is None else args.nodes
        return int(
            chosen.run(nodes=nodes, duration=args.duration, seed=args.seed, port=args.port, plain=args.plain)
        )
    if args.cloud != "sim":
        return _needs_testkit(f"eni-ipam demo --cloud {args.cloud}")
    from eni_ipam.app.demo import run_demo

    nodes = 50 if args.nodes is None else args.nodes
    return run_demo(
        nodes=nodes,
        duration=args.duration,
        seed=args.seed,
        port=args.port,
        plain=args.plain,
        faults=args.faults,
    )


def _wrap(text: str) -> str:
    """A help page's paragraph filled to the terminal's width, as argparse fills what it formats (the
    raw layout that keeps the examples' lines would otherwise leave it one long line)."""
    import shutil
    import textwrap

    width = max(min(shutil.get_terminal_size().columns - 2, 100), 40)
    return textwrap.fill(text, width=width, break_on_hyphens=False)


def _examples(*examples: tuple[str, str], more: str = "") -> str:
    """A help page's epilog: each example's command line and what it does, one under the other."""
    lines = ["examples:"]
    for command, what in examples:
        lines += [f"  {command}", f"      {what}"]
    return "\n".join(lines + ([f"\n{more}"] if more else []))


def _command(
    sub: Any,
    name: str,
    *,
    help: str,
    description: str | None,
    examples: Sequence[tuple[str, str]] = (),
) -> argparse.ArgumentParser:
    """A subcommand's parser: its one-line ``help`` in the list of commands, and on its own help page
    the ``description`` (what it does) and its ``examples``, laid out as written."""
    parser: argparse.ArgumentParser = sub.add_parser(
        name,
        help=help,
        description=_wrap(description or help),
        epilog=_examples(*examples) if examples else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    return parser


COMMANDS = "eni_ipam.commands"
"""Entry-point group of the commands another distribution adds (each a :class:`Command`)."""
DEMOS = "eni_ipam.demos"
"""Entry-point group of the clouds ``eni-ipam demo --cloud`` may run on besides ``sim`` (each a
:class:`Demo`)."""
TESTKIT = "eni-ipam-testkit"
_FROM_TESTKIT = {
    "commands": {"dev-cluster": "a local Kubernetes API server to try the chart and `eni-ipam run` against"},
    "demos": {
        "moto": "the AWS provider over HTTP against moto's EC2, until every node reaches its watermark"
    },
}
"""What the test kit adds, so that without it the command line says where they come from."""


class Command(Protocol):
    """A subcommand registered in :data:`COMMANDS` by another distribution. It may also have a
    ``description`` (its help page's paragraph; ``help`` otherwise) and ``examples`` (pairs of a
    command line and what it does, the help page's epilog)."""

    help: str

    def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...

    def run(self, args: argparse.Namespace) -> int:
        """Run with the parsed arguments (``args.log_level`` included); the exit status."""
        ...


class Demo(Protocol):
    """A cloud for ``eni-ipam demo --cloud NAME``, registered in :data:`DEMOS`."""

    help: str
    default_nodes: int

    def run(self, *, nodes: int, duration: float, seed: int, port: int | None, plain: bool) -> int:
        """``port``: of /metrics (0: none; None: the default, or a free port when it is taken, as
        :func:`eni_ipam.app.demo.serve_metrics` does). ``plain``: lines rather than the live view
        (``--plain``)."""
        ...


def _plugins(group: str) -> dict[str, Any]:
    """The plug-ins of an entry-point group by name, loaded (their modules import little)."""
    from eni_ipam.adapters.plugins import registered

    return registered(group)


def _needs_testkit(what: str) -> int:
    print(
        f"{what} comes with {TESTKIT}, which is not installed "
        "(from a checkout: pip install ./testkit, or make test)",
        file=sys.stderr,
    )
    return 2


MAX_DEMO_NODES = 1000
"""Most nodes ``demo`` runs: the simulated VPC's node subnets hold about 2,000 instances, and a live
display of more shows nothing a thousand do not."""


def _integer(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: a decimal integer from ``low`` to ``high``. argparse names the option in the
    error; a number of thousands of digits is refused by its length, never echoed or converted."""

    def check(text: str) -> int:
        digits = text.strip().removeprefix("-").removeprefix("+")
        if not (digits.isascii() and digits.isdigit()):
            shown = text if len(text) <= 40 else text[:37] + "..."
            raise argparse.ArgumentTypeError(f"{shown!r} is not an integer")
        if len(digits) > len(str(high)):
            raise argparse.ArgumentTypeError(f"an integer of {len(digits)} digits: at most {high}")
        value = int(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is out of range: at least {low}, at most {high}")
        return value

    return check


def _duration(text: str) -> float:
    """A command-line duration, written as in the configuration files (``90``, ``10s``, ``5m``)."""
    from eni_ipam.config.schema import parse_duration

    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _fault(text: str) -> Fault:
    """``demo --fault``: ``NAME-at=SECONDS``, a fault of the demo's cloud (eni_ipam.app.demo.FAULTS)."""
    from eni_ipam.app.demo import parse_fault

    try:
        return parse_fault(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _scrape_interval(text: str) -> float:
    """``--scrape-interval``: a duration (``30``, ``15s``, ``500ms``) a scrape interval may be."""
    from eni_ipam.simulator.series import check_interval

    try:
        return check_interval(_duration(text))
    except ValueError as exc:  # argparse's ArgumentTypeError included: argparse names the option
        raise argparse.ArgumentTypeError(str(exc)) from None


def _series_label(text: str) -> tuple[str, str]:
    """``--series-label``: ``NAME=VALUE``, a label that may be added to every series."""
    from eni_ipam.simulator.series import check_labels

    name, equals, value = text.partition("=")
    if not equals:
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=VALUE")
    try:
        check_labels({name: value})
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return name, value


def _run(args: argparse.Namespace) -> int:
    import asyncio
    import os

    from eni_ipam.adapters.signals import stop_on_signals
    from eni_ipam.app.checks import check_configuration
    from eni_ipam.app.runconfig import read_config
    from eni_ipam.app.service import serve
    from eni_ipam.errors import ConfigError, NotImplementedYet

    try:
        config, problems = read_config(args.config, os.environ)
        if args.port is not None:  # the command line wins over the file and the environment
            config = config.model_copy(
                update={"server": config.server.model_copy(update={"port": args.port})}
            )
        # What can be checked without side effects, every problem at once; the ports only with
        # --check (``run`` binds them itself a moment later, and says so when it cannot).
        findings = check_configuration(config, ports=args.check, environ=os.environ, found=problems)
    except (ConfigError, NotImplementedYet) as exc:
        _invalid_configuration(exc)
        return 2
    for note in findings.notes:
        print(f"note: {inert(note)}", file=sys.stderr)
    if args.check:
        chosen = config.profile_set().profiles
        profiles = f", profiles {', '.join(p.name for p in chosen)} (in the order tried)" if chosen else ""
        print(f"configuration OK: provider {config.provider}, node source {config.node_source}{profiles}")
        return 0
    configure(level=args.log_level or config.log_level)
    view = None
    if args.config is None and not args.plain and sys.stdout.isatty():
        from eni_ipam.app.demo import live_view_missing

        missing = live_view_missing()
        if missing:
            print(missing, file=sys.stderr)
        else:
            view = sys.stdout  # the embedded default is a trial: show it

    async def main() -> int:
        return await serve(config, stop=stop_on_signals(), view=view, checked=True)

    try:
        return asyncio.run(main())
    except (ConfigError, NotImplementedYet) as exc:  # found when opening: a bad kubeconfig, an unknown type
        _invalid_configuration(exc)
        hint = listen_hint(exc, config.server.port)
        if hint:
            print(hint, file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 0


def _invalid_configuration(exc: Exception) -> None:
    """One problem on one line; several (:class:`~eni_ipam.errors.ConfigErrors`) one per line under
    a count, each naming its field and the fix."""
    problems = getattr(exc, "errors", None) or (exc,)
    if len(problems) == 1:
        print(f"invalid configuration: {inert(str(problems[0]), lines=True)}", file=sys.stderr)
        return
    print(f"invalid configuration: {len(problems)} problems", file=sys.stderr)
    for problem in problems:
        print(f"  {inert(str(problem), lines=True)}", file=sys.stderr)


PROMETHEUS_PORT = 9090
"""Prometheus's own default port, and eni-ipam's: on a host running both, one of them has it."""


def listen_hint(error: Exception, port: int) -> str:
    """What to do when a listener of ``run`` could not be opened (``error`` names its setting), or
    empty for any other error: the ways to choose another port, and whose 9090 may be."""
    if not isinstance(error, ConfigError) or not error.message.startswith("cannot listen"):
        return ""
    if error.field == "server.port":
        hint = (
            "choose another port: eni-ipam run --port N, server.port in the configuration file, or "
            "ENI_IPAM_SERVER__PORT=N (0: a free port, logged)"
        )
        if port == PROMETHEUS_PORT:
            hint += f"; {PROMETHEUS_PORT} is also Prometheus's default port: a Prometheus here may hold it"
        return hint
    if error.field == "server.probe_port":
        return (
            "choose another port: server.probe_port in the configuration file, or "
            "ENI_IPAM_SERVER__PROBE_PORT=N (0: a free port, logged)"
        )
    return ""


def _series_options(args: argparse.Namespace, parser: argparse.ArgumentParser) -> SeriesOptions | None:
    """What ``simulate --series`` records, or None without ``--series``; a bad option exits 2
    (``parser.error`` names it)."""
    from collections import Counter
    from pathlib import Path

    from eni_ipam.simulator.series import DEFAULT_INTERVAL, SeriesOptions

    if args.series is None:
        if args.scrape_interval is not None:
            parser.error("argument --scrape-interval: needs --series FILE")
        if args.series_labels is not None:
            parser.error("argument --series-label: needs --series FILE")
        return None
    pairs = args.series_labels or []
    twice = sorted(name for name, count in Counter(name for name, _ in pairs).items() if count > 1)
    if twice:
        parser.error(f"argument --series-label: {', '.join(twice)} given more than once")
    directory = Path(args.series).parent
    if not directory.is_dir():
        parser.error(f"argument --series: no directory {str(directory)!r} to write {args.series} in")
    return SeriesOptions(interval=args.scrape_interval or DEFAULT_INTERVAL, labels=dict(pairs))


def _plot_option(args: argparse.Namespace, parser: argparse.ArgumentParser) -> Any:
    """The plotting module for ``simulate --plot``, or None without it; a format it cannot write, a
    missing directory or a missing plot extra exits 2 (``parser.error`` names the option)."""
    from pathlib import Path

    if args.plot is None:
        return None
    from eni_ipam.simulator import plot

    try:
        plot.check_path(args.plot)
        plot.available()
    except (ValueError, plot.PlotUnavailable) as exc:
        parser.error(f"argument --plot: {exc}")
    directory = Path(args.plot).parent
    if not directory.is_dir():
        parser.error(f"argument --plot: no directory {str(directory)!r} to write {args.plot} in")
    return plot


def _simulate(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from eni_ipam.simulator.scenario import load_scenario
    from eni_ipam.simulator.series import LabelClash
    from eni_ipam.simulator.simulate import StepResult, simulate

    series = _series_options(args, parser)  # before anything runs: a bad option writes nothing
    plot = _plot_option(args, parser)
    configure(level=args.log_level or "critical")
    try:
        scenario = load_scenario(args.scenario)
    except ConfigError as exc:  # a scenario's error names the offending key's path
        print(f"invalid scenario {args.scenario}: {inert(str(exc), lines=True)}", file=sys.stderr)
        return 2

    records: list[dict[str, Any]] = []

    def on_step(result: StepResult) -> None:
        if plot is not None:
            records.append(json.loads(json.dumps(result.record(), default=str)))  # as --json has it
        if args.json:
            print(json.dumps(result.record(), sort_keys=True, default=str), flush=True)
        else:
            mark = "FAIL" if result.failures else "ok"
            print(f"[{result.time:9.3f}s] step {result.index:>2} {result.kind:<12} {mark}")
            for failure in result.failures:
                print(f"    {failure}")

    try:
        outcome = simulate(scenario, on_step=on_step, series=series)
    except ConfigError as exc:  # found while building the cloud (e.g. an instance type EC2 lacks)
        print(f"invalid scenario {args.scenario}: {inert(str(exc), lines=True)}", file=sys.stderr)
        return 2
    except LabelClash as exc:  # a label a metric has, found when a scrape first saw it
        print(f"eni-ipam simulate: error: argument --series-label: {exc}", file=sys.stderr)
        return 2
    if outcome.series is not None:
        # Written whatever the outcome: the series up to a failed expectation replay an incident.
        try:
            outcome.series.write(args.series, source=args.scenario)
        except OSError as exc:
            print(
                f"eni-ipam simulate: error: argument --series: cannot write {args.series}: {exc}",
                file=sys.stderr,
            )
            return 2
        if not args.json:
            print(
                f"series: {len(outcome.series.series)} series, {plural(outcome.series.scrapes, 'scrape')} "
                f"written to {args.series}"
            )
    if plot is not None:
        # Drawn whatever the outcome, as the series are: the steps up to a failed expectation.
        try:
            plot.write(records, args.plot, title=f"eni-ipam simulate {args.scenario}")
        except OSError as exc:
            print(
                f"eni-ipam simulate: error: argument --plot: cannot write {args.plot}: {exc}", file=sys.stderr
            )
            return 2
        if not args.json:
            print(f"plot: {plural(len(records), 'step')} drawn to {args.plot}")
    if not outcome.passed:
        failed = outcome.results[-1]
        print(f"FAILED at step {failed.index} ({failed.kind})", file=sys.stderr)
        for failure in failed.failures:
            print(f"  {failure}", file=sys.stderr)
        return 1
    if not args.json:
        expects = sum(1 for r in outcome.results if r.kind == "expect")
        print(f"PASS: {plural(expects, 'expectation')} held over {plural(len(outcome.results), 'step')}")
    return 0


# -- `eni-ipam status` and the kubectl plugin (eni_ipam/app/status, docs/status.md) ----------------

STATUS_HELP = "is eni-ipam healthy in this cluster? one screen; exit 1 when an operator must act"
STATUS_DESCRIPTION = (
    "Read the API server (ENIPools, Nodes, eni-ipam's Events, the leader Lease, the ENIPool CRD) and, "
    "with --metrics-url, the leader's /metrics; print a verdict and what needs an operator, each with "
    "its fix. Exit 0: healthy; 1: something needs an operator; 2: the API server cannot be reached, the "
    "kubeconfig cannot be loaded, or bad usage. The same runs as `kubectl eni-ipam status`; the "
    "permissions it needs and the JSON's keys: docs/status.md."
)
STATUS_EXAMPLES = (
    ("eni-ipam status", "the current context of $KUBECONFIG or ~/.kube/config"),
    ("eni-ipam status --context prod -n kube-system --json", "another context, as one JSON object"),
    (
        "kubectl -n kube-system port-forward pod/LEADER 9090:9090 &",
        "the leader's /metrics (LEADER: kubectl -n kube-system get lease eni-ipam)",
    ),
    (
        "eni-ipam status --metrics-url http://127.0.0.1:9090/metrics --window 30s",
        "with its resyncs, subnets, and the throttling of the last 30 s",
    ),
    ("kubectl eni-ipam status -l node-group=web", "as a kubectl plugin, these Nodes only"),
)


def _status_parser(sub: Any) -> None:
    _status_arguments(
        _command(sub, "status", help=STATUS_HELP, description=STATUS_DESCRIPTION, examples=STATUS_EXAMPLES)
    )


def _status_arguments(parser: argparse.ArgumentParser) -> None:
    from eni_ipam.app.status import DEFAULT_LEASE, DEFAULT_NAMESPACE  # constants only

    parser.add_argument(
        "--kubeconfig", default="", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster)"
    )
    parser.add_argument(
        "--context", default="", help="the kubeconfig's context to use (default: its current)"
    )
    parser.add_argument(
        "-n",
        "--namespace",
        default=DEFAULT_NAMESPACE,
        help=f"the controller's namespace, where its Lease is (default: {DEFAULT_NAMESPACE}, the chart's)",
    )
    parser.add_argument(
        "--lease",
        default=DEFAULT_LEASE,
        help=f"the Lease's name, kubernetes.lease_name (default: {DEFAULT_LEASE})",
    )
    parser.add_argument(
        "-l",
        "--selector",
        type=_selector,
        default={},
        metavar="KEY=VALUE[,KEY=VALUE]",
        help="only the Nodes with these labels (those kubernetes.node_selector gives pools)",
    )
    parser.add_argument(
        "--metrics-url",
        default="",
        metavar="URL",
        help="the leader's /metrics (e.g. through kubectl port-forward): resyncs, subnets, throttling",
    )
    parser.add_argument(
        "--window",
        type=_duration,
        default=0.0,
        metavar="DURATION",
        help="scrape twice this far apart (10s, 1m) to judge throttling now; default: one scrape, totals",
    )
    parser.add_argument("--json", action="store_true", help="one JSON object (its keys: docs/status.md)")
    parser.add_argument(
        "--timeout", type=_duration, default=15.0, metavar="DURATION", help="per request (default 15s)"
    )


def _selector(text: str) -> dict[str, str]:
    """``-l``: ``KEY=VALUE[,KEY=VALUE]``, as kubectl's equality selectors."""
    pairs = [part.partition("=") for part in text.split(",") if part.strip()]
    if not pairs or any(not key.strip() or not equals for key, equals, _ in pairs):
        raise argparse.ArgumentTypeError(f"{inert(text)!r} is not KEY=VALUE[,KEY=VALUE]")
    return {key.strip(): value.strip() for key, _, value in pairs}


def _status(args: argparse.Namespace) -> int:
    from eni_ipam.app.status.command import Options, run

    configure(level=getattr(args, "log_level", None) or "error")  # logs to stderr, never into the JSON
    if args.window and not args.metrics_url:
        print("eni-ipam status: error: argument --window: needs --metrics-url", file=sys.stderr)
        return 2
    if args.timeout <= 0:
        print("eni-ipam status: error: argument --timeout: must be longer than 0", file=sys.stderr)
        return 2
    options = Options(
        kubeconfig=args.kubeconfig,
        context=args.context,
        namespace=args.namespace,
        lease_name=args.lease,
        selector=args.selector,
        metrics_url=args.metrics_url,
        window=args.window,
        json=args.json,
        timeout=args.timeout,
    )
    return run(options)


def kubectl_plugin(argv: Sequence[str] | None = None) -> int:
    """``kubectl eni-ipam …``: kubectl runs ``kubectl-eni_ipam`` (this, a console script) with the
    words after ``eni-ipam``, and passes its exit status on. ``status`` is ``eni-ipam status``."""
    parser = argparse.ArgumentParser(prog="kubectl eni-ipam", description="eni-ipam as a kubectl plugin")
    parser.add_argument("--version", action="version", version=f"eni-ipam {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, title="commands", metavar="COMMAND")
    _status_parser(sub)
    return _status(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
