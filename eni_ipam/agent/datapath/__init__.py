"""The node datapath: a pod's packets leave through the interface that owns its address.

On EC2 (and Azure) a packet whose source is a secondary address of ``eth1`` but that leaves through
``eth0`` is dropped by the source/destination check, and an answer to such a pod arrives on ``eth1``
with nothing routing it on. The agent knows, for every address it hands out, the interface that owns
it (the node's ENIPool status: id, device index, network card, subnet, MAC, primary address), and
programs the host so that:

* every secondary interface of the pool is found as its Linux device by MAC, brought up with the
  VPC's MTU, given its primary address (without a prefix route in the main table), loose
  reverse-path filtering, and a route table of its own (id ``route_table_base + 100 × card +
  device index``) holding the subnet's route and a default route through the subnet's router;
* every pod address has a ``to <pod> lookup main`` rule (priority 512: pod-to-pod on the node never
  leaves it) and, when its interface is not the primary one, a ``from <pod> lookup <table>`` rule
  (priority 1536);
* traffic from pods to destinations outside the VPC's CIDRs (and the excluded ones) is marked in
  nftables after the services' DNAT, routed by the main table (``fwmark`` rule, priority 1024) and
  SNATed to the primary interface's primary address, unless something outside the node does it
  (``external_snat``).

The veth and the host route of each pod are the standard ``ptp`` plugin's; the per-pod rules are
installed by the agent when the plugin's IPAM call allocates the address (before ``ptp`` creates
the veth: a rule needs only the address) and removed when it is released: no second interpreter
per container (decision 0036).

Modules: :mod:`~.settings` (the ``datapath:`` section of the agent's configuration), :mod:`~.plan`
(pure: what the host must hold for a pool and its pods), :mod:`~.netlink` (rules, routes, links and
their settings, through pyroute2 and one raw netlink message), :mod:`~.nft` (the SNAT table, through
the ``nft`` command), :mod:`~.datapath` (the component the agent drives: reconcile, add, remove).

Invariants: only what this module made is ever changed or removed (rules and routes carry the
protocol :data:`~.plan.PROTOCOL`, the nftables table is ``eni_ipam``); after a reconcile the host
holds exactly what the held addresses need, nothing missing and nothing stale.
"""
