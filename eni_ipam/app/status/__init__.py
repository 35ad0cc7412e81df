"""``eni-ipam status`` and ``kubectl eni-ipam status``: whether eni-ipam is healthy in a cluster, on one
screen, with an exit status scripts can use (docs/status.md, decision 0056).

Reading is kept apart from judging, so that what matters is tested in-process on plain documents:

* :mod:`~eni_ipam.app.status.gather` — the I/O: the API server's ENIPools, Nodes, Events, Lease and
  CRD through the product's client, and the controller's ``/metrics`` and ``/readyz`` where reachable;
* :mod:`~eni_ipam.app.status.model` — what was read (``Gathered``) and the report (``Report``, its
  ``Finding``\\ s and sections), with the helpers that read untrusted documents;
* :mod:`~eni_ipam.app.status.judge` — pure: ``Gathered`` → ``Report``, through
  :mod:`~eni_ipam.app.status.control` (controller, CRD), :mod:`~eni_ipam.app.status.nodes` (Nodes,
  agents) and :mod:`~eni_ipam.app.status.cloud` (subnets, the APIs);
* :mod:`~eni_ipam.app.status.screen` — the report as a screen or as JSON;
* :mod:`~eni_ipam.app.status.command` — options, the kubeconfig, exit statuses.
"""

DEFAULT_NAMESPACE = "kube-system"
"""Where docs/deploy.md installs the chart (the Lease follows the release's namespace)."""
DEFAULT_LEASE = "eni-ipam"
"""``kubernetes.lease_name``'s default, the chart's. (Both here, where the command line reads them
without loading the command.)"""
