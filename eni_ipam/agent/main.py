"""``eni-ipam-agent`` (also ``eni-ipam agent``): the node side's own program.

One agent per node: it follows the node's ENIPool, owns the node's allocator and its state file, and
serves the CNI plugin's API and the libnetwork remote IPAM driver on a unix socket (docs/node.md).
It shares with the controller only the clock, the model's vocabulary, backoff, the configuration
layer and the process adapters (the import contract "The node side is a program of its own" in
pyproject.toml lists what it may import).

Exit status: 0 after a clean shutdown (SIGTERM), 2 for an invalid configuration (the message names
the field). This module imports only the standard library at load time, so ``eni-ipam --help`` stays
fast; what the agent needs is imported when it runs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from eni_ipam.adapters.terminal import inert

if TYPE_CHECKING:
    from eni_ipam.agent.config import AgentConfig
    from eni_ipam.agent.listen import Listening

HELP = "run the node agent (allocator, CNI API, libnetwork driver)"
DESCRIPTION = (
    "Run the node agent, one per node: it follows the node's ENIPool, hands the pool's addresses to "
    "pods through the CNI plugin's API and the libnetwork driver on a unix socket, and keeps them in "
    "its state file (docs/node.md)."
)
EXAMPLES = (
    ("eni-ipam agent --config /etc/eni-ipam/agent.yaml", "the node named by $NODE_NAME"),
    ("eni-ipam agent --node node-1 --config agent.yaml", "a node named on the command line"),
    ("eni-ipam agent --config agent.yaml --server-host 10.0.3.7", "/metrics on the node's own address"),
)
"""The help page's examples: a command line and what it does (eni-ipam-agent's are the same)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--node", default=None, help="this node's name (default: $NODE_NAME)")
    parser.add_argument("--config", default=None, help="agent configuration YAML (docs/node.md)")
    parser.add_argument(
        "--server-host",
        default=None,
        help="address /metrics, /healthz and /readyz listen on, instead of the file's server.host "
        "(the chart passes the node's own address on the host network)",
    )


def run(args: argparse.Namespace) -> int:
    """Run the agent with the parsed arguments (``args.log_level`` included); the exit status.

    The agent listens on its socket as soon as its configuration is read, before it imports what it
    runs on (:mod:`eni_ipam.agent.listen`): a restart's connections wait in the socket's backlog
    instead of failing. A SIGTERM meanwhile stops the agent as soon as it runs."""
    import os
    import signal

    from eni_ipam.agent.config import listen_address, load_agent_config
    from eni_ipam.agent.listen import listen
    from eni_ipam.errors import ConfigError

    node = args.node or os.environ.get("NODE_NAME", "")
    try:
        if not node:
            raise ConfigError("--node", "required (or set NODE_NAME)")
        config = load_agent_config(args.config)
        if args.server_host is not None:
            config = config.replace(server=config.server.replace(host=listen_address(args.server_host)))
        listening = listen(config.socket, config.state_dir)
    except ConfigError as exc:
        print(f"invalid configuration: {inert(str(exc), lines=True)}", file=sys.stderr)
        return 2
    terminated: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, _: terminated.append(signum))
    try:
        return _serve(args, config, node, listening, terminated)
    except ConfigError as exc:
        print(f"invalid configuration: {inert(str(exc), lines=True)}", file=sys.stderr)
        if hint := listen_hint(exc.field, exc.message):
            print(f"  {hint}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 0
    finally:
        listening.close()


def listen_hint(field: str, message: str) -> str:
    """What to do when a listener of the agent could not be opened (``field`` names its setting), or
    empty for any other error: the agent's ports come from its configuration file alone."""
    if field not in ("server.port", "server.probe_port") or not message.startswith("cannot listen"):
        return ""
    return (
        f"choose another port: {field} in the agent's configuration file (--config; in the chart, "
        f"agent.config.{field}), 0 for one the kernel picks; with the host network, every node needs it free"
    )


def _serve(
    args: argparse.Namespace, config: AgentConfig, node: str, listening: Listening, terminated: list[int]
) -> int:
    """Import what the agent runs on, and run it on the socket ``listening`` holds."""
    import asyncio

    from eni_ipam.adapters.logging import configure
    from eni_ipam.adapters.signals import stop_on_signals

    configure(level=args.log_level or config.log_level)

    async def main() -> int:
        from eni_ipam.agent.daemon import Agent

        stop = stop_on_signals()
        if terminated:  # a SIGTERM before the event loop took the signal over: stop once started
            stop.set()
        await Agent(config, node=node).run(stop, listening)
        return 0

    return asyncio.run(main())


def main(argv: Sequence[str] | None = None) -> int:
    from eni_ipam import __version__

    examples = ["examples:"] + [
        f"  {line.replace('eni-ipam agent', 'eni-ipam-agent')}\n      {what}" for line, what in EXAMPLES
    ]
    parser = argparse.ArgumentParser(
        prog="eni-ipam-agent",
        description=DESCRIPTION,
        epilog="\n".join(examples),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"eni-ipam-agent {__version__}")
    parser.add_argument("--log-level", default=None, help="debug, info, warning (default: the file's)")
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
