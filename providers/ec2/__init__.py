"""What every provider that speaks EC2 shares: the calls it decides, its limits and its error codes.

* :mod:`~providers.ec2.provider` — :class:`~providers.ec2.provider.Ec2Provider`, every decision
  about which EC2 calls to make, over a thin :class:`~providers.ec2.provider.Ec2Api`.
* :mod:`~providers.ec2.limits` — the shipped instance-type table (``instance_types.json``).
* :mod:`~providers.ec2.errors` — EC2's error codes translated into the project's error tree.

Used by :mod:`providers.aws` (boto3) and :mod:`providers.sim` (the in-memory cloud), which supply
only an ``Ec2Api`` and a limits source; it imports no cloud SDK.
"""
