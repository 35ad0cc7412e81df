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
from eni_ipam.adapters.terminal import inert
from eni_ipam.errors import ConfigError

if TYPE_CHECKING:
    from eni_ipam.app.demo import Fault
    from eni_ipam.simulator.series import SeriesOptions


LOG_LEVELS = ("debug", "info", "warning", "error")
"""What ``--log-level`` takes: the levels the configuration's ``log_level`` takes (a test keeps them
equal; the configuration's models are not imported before a command needs them)."""


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="eni-ipam", description=__doc__.splitlines()[0] if __doc__ else None
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
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run the service (leader-elected in Kubernetes, or alone)")
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

    from eni_ipam.agent import main as agent_program  # the node side's own program (standard library only)

    agent_program.add_arguments(sub.add_parser("agent", help=agent_program.HELP))

    sim = sub.add_parser("simulate", help="run a scenario file on the in-memory cloud, on virtual time")
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

    _status_arguments(sub.add_parser("status", **STATUS_PARSER))

    commands = _plugins(COMMANDS)
    for name, command in commands.items():
        command.add_arguments(sub.add_parser(name, help=command.help))
    for name in sorted(set(_FROM_TESTKIT["commands"]) - set(commands)):
        sub.add_parser(name, help=f"(needs {TESTKIT}) {_FROM_TESTKIT['commands'][name]}")

    demo = sub.add_parser("demo", help="a live simulated cluster in real time, with /metrics")
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
        "--port", type=_integer(0, 65535), default=9090, help="port of /metrics on 127.0.0.1 (0: off)"
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
        return int(chosen.run(nodes=nodes, duration=args.duration, seed=args.seed, port=args.port))
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
    """A subcommand registered in :data:`COMMANDS` by another distribution."""

    help: str

    def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...

    def run(self, args: argparse.Namespace) -> int:
        """Run with the parsed arguments (``args.log_level`` included); the exit status."""
        ...


class Demo(Protocol):
    """A cloud for ``eni-ipam demo --cloud NAME``, registered in :data:`DEMOS`."""

    help: str
    default_nodes: int

    def run(self, *, nodes: int, duration: float, seed: int, port: int) -> int: ...


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
    from eni_ipam.app.providers import plugin
    from eni_ipam.app.runconfig import load_config
    from eni_ipam.app.service import serve
    from eni_ipam.errors import ConfigError, NotImplementedYet

    try:
        config = load_config(args.config, os.environ)
        if args.check:  # what the provider can check without the cloud (``run`` does it before binding)
            plugin(config.provider).check(config.provider_settings)
    except (ConfigError, NotImplementedYet) as exc:
        print(f"invalid configuration: {inert(str(exc), lines=True)}", file=sys.stderr)
        return 2
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
        return await serve(config, stop=stop_on_signals(), view=view)

    try:
        return asyncio.run(main())
    except (ConfigError, NotImplementedYet) as exc:  # found when opening: a bad kubeconfig, an unknown type
        print(f"invalid configuration: {inert(str(exc), lines=True)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 0


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
                f"series: {len(outcome.series.series)} series, {outcome.series.scrapes} scrapes "
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
            print(f"plot: {len(records)} steps drawn to {args.plot}")
    if not outcome.passed:
        failed = outcome.results[-1]
        print(f"FAILED at step {failed.index} ({failed.kind})", file=sys.stderr)
        for failure in failed.failures:
            print(f"  {failure}", file=sys.stderr)
        return 1
    if not args.json:
        expects = sum(1 for r in outcome.results if r.kind == "expect")
        print(f"PASS: {expects} expectations held over {len(outcome.results)} steps")
    return 0


# -- `eni-ipam status` and the kubectl plugin (eni_ipam/app/status, docs/status.md) ----------------

STATUS_PARSER: dict[str, Any] = {
    "help": "whether eni-ipam is healthy in a cluster, on one screen (exit 1: something needs an operator)",
    "description": """\
Read the API server (ENIPools, Nodes, eni-ipam's Events, the leader Lease, the
ENIPool CRD) and, with --metrics-url, the leader's /metrics; print a verdict and
what needs an operator, each with its fix. The same runs as
`kubectl eni-ipam status`.

exit status: 0 healthy; 1 something needs an operator; 2 the API server cannot
be reached, the kubeconfig cannot be loaded, or bad usage.""",
    "epilog": """\
examples:
  eni-ipam status
  eni-ipam status --context prod -n kube-system --json
  kubectl -n kube-system port-forward "pod/$(kubectl -n kube-system get lease \\
    eni-ipam -o jsonpath='{.spec.holderIdentity}')" 9090:9090 &
  eni-ipam status --metrics-url http://127.0.0.1:9090/metrics --window 30s
  kubectl eni-ipam status -l node-group=web

The permissions it needs, the JSON's keys and a sample screen: docs/status.md.""",
    "formatter_class": argparse.RawDescriptionHelpFormatter,
}


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
    sub = parser.add_subparsers(dest="command", required=True)
    _status_arguments(sub.add_parser("status", **STATUS_PARSER))
    return _status(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
