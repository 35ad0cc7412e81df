"""Private infrastructure every package shares, in two halves around the domain (:mod:`eni_ipam.core`).

Below the domain, knowing nothing of it: :mod:`~eni_ipam._infra.config`, the vocabulary every
configuration model is declared with (the domain's settings and node spec included), and
:mod:`~eni_ipam._infra.files`, the one reader of what people write. Above the domain, as adapters:
:mod:`~eni_ipam._infra.metrics` (Prometheus; it implements the domain's observer protocols of
:mod:`eni_ipam.core.observe`), :mod:`~eni_ipam._infra.server` (``/metrics``, ``/healthz``,
``/readyz``), :mod:`~eni_ipam._infra.guard` (the bounds every listener is served under, and the
process's open-file limit and event-loop error reports) and :mod:`~eni_ipam._infra.logging` (how logs
are rendered). The domain reaches the
upper half only through its protocols; import-linter contracts in pyproject.toml keep it so.

Private: nothing here is an interface for integrators, and it may change with any release.
"""
