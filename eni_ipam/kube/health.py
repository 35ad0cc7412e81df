"""Whether the Kubernetes API server takes this process's requests: for ``/readyz``, a metric and the log.

Every request through :class:`~eni_ipam.kube.api.KubeApi` reports its outcome here. Two outcomes
are problems of the process rather than of one request: the server rejecting its credentials (401:
a token expired, revoked or for another cluster) and the server not answering (connection refused
or dropped, timeouts, 5xx). Any other answer — a 404, a 409, a 403 for one resource — proves that
the server is there and knows who is asking, and ends a problem.

A problem is *unhealthy* once it has lasted ``unhealthy_after`` seconds without a request getting
through: a blip (an API server's rolling restart) is not worth a page, an expired token is. The
log says each change of state once — ``kube_api_failing`` (warning) at the first failure,
``kube_api_unhealthy`` (error) when the bound is passed, ``kube_api_recovered`` (info) at the first
success after — instead of a line per retry. Time is the injected clock's; the state is read when
it is asked for (a scrape, a readiness probe), so nothing runs on a timer.
"""

from __future__ import annotations

import structlog

from eni_ipam.core.clock import Clock
from eni_ipam.kube import errors

log = structlog.get_logger("eni_ipam.kube.health")

CREDENTIALS_REJECTED = "credentials_rejected"
UNREACHABLE = "unreachable"
PROBLEMS = (CREDENTIALS_REJECTED, UNREACHABLE)
"""Every problem :attr:`ApiHealth.problem` can name (the metric's label values)."""


def problem_of(error: errors.KubeError) -> str:
    """The problem a failed request shows, or "" when its answer proves the server takes requests."""
    if error.code == 401:
        return CREDENTIALS_REJECTED
    if isinstance(error, errors.KubeUnavailable):
        return UNREACHABLE
    return ""


class ApiHealth:
    """The API server as this process sees it, from the outcome of its requests."""

    def __init__(self, *, clock: Clock, unhealthy_after: float = 60.0) -> None:
        self.clock = clock
        self.unhealthy_after = unhealthy_after
        self.problem = ""
        """The current problem ("" when the last request got through)."""
        self.since = 0.0
        """When the current problem began (the clock's monotonic seconds)."""
        self.error = ""
        """The last failed request's error, for the log and ``/readyz``."""
        self._told_unhealthy = False

    def succeeded(self) -> None:
        if self.problem:
            log.info("kube_api_recovered", problem=self.problem, after=round(self._lasted(), 3))
        self.problem, self.error, self._told_unhealthy = "", "", False

    def failed(self, error: errors.KubeError) -> None:
        problem = problem_of(error)
        if not problem:
            self.succeeded()
            return
        self.error = str(error) or type(error).__name__
        if problem != self.problem:
            self.problem, self.since, self._told_unhealthy = problem, self.clock.monotonic(), False
            log.warning(
                "kube_api_failing", problem=problem, error=self.error, unhealthy_after=self.unhealthy_after
            )
        if not self._told_unhealthy and not self.healthy:
            self._told_unhealthy = True
            log.error(
                "kube_api_unhealthy", problem=problem, error=self.error, seconds=round(self._lasted(), 3)
            )

    @property
    def healthy(self) -> bool:
        """False once a problem has lasted ``unhealthy_after`` seconds."""
        return not self.problem or self._lasted() < self.unhealthy_after

    def unhealthy_problem(self) -> str:
        """The problem that makes the process unhealthy ("" when healthy)."""
        return "" if self.healthy else self.problem

    def describe(self) -> str:
        """A sentence for ``/readyz``: what is wrong and for how long ("" when healthy)."""
        if self.healthy:
            return ""
        what = (
            "rejects this process's credentials"
            if self.problem == CREDENTIALS_REJECTED
            else "does not answer"
        )
        return f"the Kubernetes API server {what} (for {self._lasted():.0f}s: {self.error})"

    def _lasted(self) -> float:
        return self.clock.monotonic() - self.since if self.problem else 0.0
