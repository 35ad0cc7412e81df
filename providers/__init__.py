"""Cloud providers: each subpackage implements :class:`eni_ipam.core.provider.Provider` for one cloud.

Arrows point one way: providers import :mod:`eni_ipam`, never the reverse, and each cloud's SDK is
imported by its own subpackage only. :mod:`providers.ec2_errors` is shared by everything that speaks
EC2's error codes (the AWS provider and the in-memory :mod:`providers.sim` cloud).
"""
