"""The core: the reconciler and what every other part shares.

Pure data and arithmetic (``model``, ``watermarks``, ``planner``), one node's pass (``node``), the
scheduler of passes (``manager``), garbage collection (``gc``), the Provider protocol (``provider``)
and the one wrapper every cloud call goes through (``caller``, ``ratelimit``), with the shared
foundations: the error tree (``errors``), injected time (``clock``), backoff, metrics, the HTTP
endpoint, the mutation fence, logging and the configuration layer (``config``).

It imports no provider, Kubernetes, agent, simulator or application module (the import-linter
contract in pyproject.toml checks it; docs/architecture.md draws the layers).
"""
