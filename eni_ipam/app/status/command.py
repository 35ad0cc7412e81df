"""``eni-ipam status`` (and ``kubectl eni-ipam status``): read, judge, print, exit.

Exit status: 0 when nothing needs an operator, 1 when something does (the screen's ``✗`` lines, the
JSON's ``problems``), 2 when nothing could be judged: the kubeconfig cannot be loaded, the API server
does not answer or refuses the credentials (a message on standard error, never a traceback). The
kubeconfig is found as kubectl finds it: ``--kubeconfig``, else ``$KUBECONFIG`` (its first file that
exists), else ``~/.kube/config``, else the pod's service account (run in a cluster).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TextIO

from eni_ipam.adapters.metrics.registry import MetricSet
from eni_ipam.adapters.terminal import inert
from eni_ipam.app.status import DEFAULT_LEASE, DEFAULT_NAMESPACE
from eni_ipam.app.status.gather import CannotReach, read_cluster, read_metrics
from eni_ipam.app.status.judge import judge
from eni_ipam.app.status.model import Report
from eni_ipam.app.status.screen import as_json, render
from eni_ipam.errors import ConfigError
from eni_ipam.kube.api import KubeApi, client_from_kubeconfig
from eni_ipam.kube.permissions import STATUS_PERMISSIONS

KUBECONFIG_FIX = (
    "give --kubeconfig FILE (or KUBECONFIG) with the cluster's credentials, and --context NAME if not "
    "its current context"
)
"""What to do about a kubeconfig the command cannot use."""


@dataclasses.dataclass(frozen=True)
class Options:
    kubeconfig: str = ""
    context: str = ""
    namespace: str = DEFAULT_NAMESPACE
    lease_name: str = DEFAULT_LEASE
    selector: Mapping[str, str] = dataclasses.field(default_factory=dict)
    metrics_url: str = ""
    window: float = 0.0
    json: bool = False
    timeout: float = 15.0
    """Seconds a request to the API server, or to the metrics, may take."""


def kubeconfig_path(given: str, environ: Mapping[str, str]) -> str:
    """The kubeconfig file to use, as kubectl chooses it ("" for the in-cluster service account)."""
    if given:
        return given
    for entry in environ.get("KUBECONFIG", "").split(os.pathsep):
        if entry and Path(entry).expanduser().is_file():
            return entry
    home = Path(environ.get("HOME") or Path.home()) / ".kube" / "config"
    return str(home) if home.is_file() else ""


async def check(options: Options, environ: Mapping[str, str]) -> Report | str:
    """Read and judge: the report, or why nothing could be judged (exit status 2)."""
    path = kubeconfig_path(options.kubeconfig, environ)
    try:
        client = client_from_kubeconfig(
            path, context=options.context, field="--kubeconfig", fix=KUBECONFIG_FIX, timeout=options.timeout
        )
    except ConfigError as exc:
        return exc.message
    api = KubeApi(client, metrics=MetricSet(process=False), allowed=STATUS_PERMISSIONS)
    reading = read_cluster(
        api,
        namespace=options.namespace,
        lease_name=options.lease_name,
        selector=options.selector,
        now=lambda: datetime.datetime.now(datetime.UTC),
    )
    try:
        if options.metrics_url:
            metrics = read_metrics(options.metrics_url, window=options.window, deadline=options.timeout)
            gathered, scraped = await asyncio.gather(reading, metrics)
            gathered = dataclasses.replace(gathered, metrics_url=options.metrics_url, **scraped)
        else:
            gathered = await reading
    except CannotReach as exc:
        return f"cannot reach the Kubernetes API server {api.server or ''}: {exc}".replace("  ", " ")
    finally:
        await api.close()
    return judge(gathered)


def run(options: Options, *, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Check and print (the screen, or ``--json``); the exit status."""
    out, err = out or sys.stdout, err or sys.stderr
    try:
        result = asyncio.run(check(options, os.environ))
    except KeyboardInterrupt:
        return 130
    if isinstance(result, str):
        print(f"eni-ipam status: {inert(result)}", file=err)
        return 2
    out.write(as_json(result) + "\n" if options.json else render(result))
    return result.exit_code
