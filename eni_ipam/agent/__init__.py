"""The node side: hands the addresses of a node's pool to pods and containers, safely.

* :mod:`~eni_ipam.agent.types` — the allocator's vocabulary (families, pool addresses, allocations).
* :mod:`~eni_ipam.agent.allocator` — the local allocator over the node's named pools, with
  expiration timers, exclusions and the release handshake; never two owners for one address.
* :mod:`~eni_ipam.agent.state` — its state file: written atomically and fsync'd; a corrupt file is
  reported and rebuilt from the pool and the runtime's view, never silently reset.
* :mod:`~eni_ipam.agent.api` and :mod:`~eni_ipam.agent.cni` — the agent's JSON API for the CNI
  plugin, and the ``eni-ipam-cni`` plugin itself (CNI spec 1.0.0 and 0.4.0).
* :mod:`~eni_ipam.agent.libnetwork` — the libnetwork remote IPAM driver on the same socket.
* :mod:`~eni_ipam.agent.daemon` — ``eni-ipam agent --node NAME``: follows the node's ENIPool,
  reports the addresses in use and its handshake answers, serves the socket.
* :mod:`~eni_ipam.agent.claims` — Cluster API ``IPAddressClaim`` → ``IPAddress``.
"""
