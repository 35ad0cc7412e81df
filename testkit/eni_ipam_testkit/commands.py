"""The commands the test kit adds to ``eni-ipam``: ``dev-cluster`` and ``demo --cloud moto``.

Registered through the ``eni_ipam.commands`` and ``eni_ipam.demos`` entry points (testkit's
pyproject.toml); :mod:`eni_ipam.cli` finds them there, so the product names neither. This module
imports only the standard library: the command line loads it at every start, and what a command
needs is imported when it runs.
"""

from __future__ import annotations

import argparse
import sys


class DevClusterCommand:
    """``eni-ipam dev-cluster``: the fake API server of the test suite, standalone; the real kubectl
    and helm work against it (docs/deploy.md, "Trying it locally")."""

    name = "dev-cluster"
    help = "a local Kubernetes API server to try the chart and `eni-ipam run` against (no nodes run)"
    description = (
        "Serve the test suite's fake Kubernetes API server on 127.0.0.1 until Ctrl-C, and write an "
        "admin kubeconfig for it: kubectl, helm and `eni-ipam run` work against it unchanged. Nothing "
        'runs pods or nodes (docs/deploy.md, "Trying it locally").'
    )
    examples = (
        ("eni-ipam dev-cluster --kubeconfig dev.kubeconfig", "on a free port, said when it starts"),
        (
            "KUBECONFIG=dev.kubeconfig kubectl apply -f deploy/kubernetes/crd.yaml",
            "then, in another terminal",
        ),
        ("eni-ipam dev-cluster --kubeconfig dev.kubeconfig --port 6443", "on a port of your choice"),
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--kubeconfig",
            required=True,
            help="where to write the admin kubeconfig (mode 0600; its token is new at every start)",
        )
        parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: a free one)")

    def run(self, args: argparse.Namespace) -> int:
        import asyncio

        from eni_ipam.adapters.logging import configure
        from eni_ipam.adapters.signals import stop_on_signals
        from eni_ipam_testkit.fake_kube import FakeKube

        configure(level=args.log_level or "warning")

        async def main() -> int:
            stop = stop_on_signals()
            try:
                kube = FakeKube(port=args.port)
                await kube.start()
            except OSError as exc:
                print(f"cannot listen on 127.0.0.1:{args.port}: {exc.strerror}", file=sys.stderr)
                return 2
            try:
                try:
                    kube.write_kubeconfig(args.kubeconfig)
                except OSError as exc:
                    reason = exc.strerror or str(exc)
                    print(f"cannot write the kubeconfig to {args.kubeconfig}: {reason}", file=sys.stderr)
                    return 2
                print(f"Kubernetes API (fake) on {kube.url}; admin kubeconfig written to {args.kubeconfig}")
                print(
                    "Nothing runs pods or nodes here: create Nodes with kubectl. Ctrl-C stops it.", flush=True
                )
                await stop.wait()
            finally:
                await kube.close()
            return 0

        try:
            return asyncio.run(main())
        except KeyboardInterrupt:
            return 0


class MotoDemo:
    """``eni-ipam demo --cloud moto``: the AWS provider over HTTP against moto's EC2 with EC2's
    limits, until every node reaches its watermark (:mod:`eni_ipam_testkit.demo_aws`)."""

    name = "moto"
    help = "the AWS provider over HTTP against moto's EC2, until every node reaches its watermark"
    default_nodes = 10

    def run(self, *, nodes: int, duration: float, seed: int, port: int | None, plain: bool = False) -> int:
        from eni_ipam_testkit.demo_aws import run_moto_demo

        return run_moto_demo(nodes=nodes, duration=duration, seed=seed, port=port, plain=plain)


DEV_CLUSTER = DevClusterCommand()
MOTO_DEMO = MotoDemo()
