"""The domain: the reconciler, and the values and contracts the other parts share with it.

Its modules, by layer from the top (the layers contract in pyproject.toml keeps every import
pointing down; docs/architecture.md draws them):

* :mod:`~eni_ipam.core.manager` — the scheduler: when each node is maintained (queue, workers,
  backoff, the periodic resync).
* :mod:`~eni_ipam.core.node` — one node's state and its maintenance pass;
  :mod:`~eni_ipam.core.gc` — garbage collection of leaked interfaces.
* :mod:`~eni_ipam.core.view` — the shared cloud view (subnets' free counts, reservations, limits);
  :mod:`~eni_ipam.core.fence` — the switch that stops every mutating cloud call.
* :mod:`~eni_ipam.core.planner` — pure: from a node's spec and the view to the calls to make;
  :mod:`~eni_ipam.core.provider` — the Provider protocol a cloud implements;
  :mod:`~eni_ipam.core.caller` — the one path every cloud call takes (rate limiter, observer, error
  translation); :mod:`~eni_ipam.core.settings` — the operator-wide settings.
* :mod:`~eni_ipam.core.spec` — what a node asks of its pool; :mod:`~eni_ipam.core.watermarks` — the
  watermark arithmetic; :mod:`~eni_ipam.core.observe` — what the domain reports, as protocols.
* :mod:`~eni_ipam.core.fields` — cloud tags and token buckets as the settings read them.
* :mod:`~eni_ipam.core.model` — immutable data: the cloud, a node's stats, the planner's decisions;
  :mod:`~eni_ipam.core.packed` — the packed address lists it holds;
  :mod:`~eni_ipam.core.ratelimit` — client-side token buckets; :mod:`~eni_ipam.core.records` — what
  the node store remembers for providers that keep no cloud state; :mod:`~eni_ipam.core.backoff` —
  exponential backoff with jitter.
* :mod:`~eni_ipam.core.errors` — the domain's errors; :mod:`~eni_ipam.core.clock` — injected time,
  the only reader of the OS clock.

It reads no file, serves nothing and exports no metric itself: below it, :mod:`eni_ipam.config`
reads what people write and gives it the vocabulary its settings and node spec are declared with;
above it, :mod:`eni_ipam.adapters` exports metrics (implementing :mod:`~eni_ipam.core.observe`'s
protocols), serves the HTTP endpoints and renders logs. It imports no provider, Kubernetes, store,
agent, simulator or application module; import-linter contracts in pyproject.toml keep it so.
"""
