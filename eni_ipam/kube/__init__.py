"""Kubernetes integration: the only package that imports the Kubernetes client (lightkube).

* :mod:`~eni_ipam.kube.api` — a thin adapter over lightkube: plain-dict objects, one error tree
  (:class:`~eni_ipam.kube.errors.KubeError`), metrics per request, and the permissions it may use.
* :mod:`~eni_ipam.kube.informer` — list, then watch from the last resourceVersion; relist on 410;
  each object projected as it arrives.
* :mod:`~eni_ipam.kube.projection` — what the informers keep of Nodes, Pending Pods and ENIPools.
* :mod:`~eni_ipam.kube.lease` — Lease leader election with client-go's rules on the injected clock.
* :mod:`~eni_ipam.kube.resources` — ENIPool custom resources ↔ the core model (pure functions).
* :mod:`~eni_ipam.kube.status` — rate-limited status writes ordered by need, skipped by digest.
* :mod:`~eni_ipam.kube.source` — the node source: Nodes → ENIPools → the NodeManager; follows the
  informers and decides, the work done by:

  * :mod:`~eni_ipam.kube.pools` — the one writer of ENIPool objects (a pool per Node, finalizers);
  * :mod:`~eni_ipam.kube.delivery` — pools handed to the manager when what it sees changes;
  * :mod:`~eni_ipam.kube.instances` — one instance, one pool;
  * :mod:`~eni_ipam.kube.records` — what the pools publish, for a provider with no cloud state.
"""
