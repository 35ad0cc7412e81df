"""How the controller's process meets the outside: above the domain, reading it through its protocols.

* :mod:`~eni_ipam.adapters.metrics` — Prometheus, a module a job: the scrape's exposition, the
  registry every process's set builds on, which nodes have per-node series, the pool gauges and
  their self-check, and the controller's set, which implements the domain's observer protocols
  (:mod:`eni_ipam.core.observe`).
* :mod:`~eni_ipam.adapters.server` — ``/metrics``, ``/healthz`` and ``/readyz``.
* :mod:`~eni_ipam.adapters.guard` — the bounds every listener is served under, the process's
  open-file limit and the event loop's error reports.
* :mod:`~eni_ipam.adapters.logging` — how logs are rendered (JSON off a terminal).
* :mod:`~eni_ipam.adapters.malloc` — glibc's allocator settings for a long-lived service.

Invariant: the domain never imports this package (it reports through its observer protocols), and
nothing here decides anything about pools; import-linter contracts in pyproject.toml keep it so.
Private: nothing here is an interface for integrators, and it may change with any release.
"""
