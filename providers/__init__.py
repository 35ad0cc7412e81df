"""Cloud providers: each subpackage implements :class:`eni_ipam.core.provider.Provider` for one cloud.

Arrows point one way: providers import :mod:`eni_ipam`'s core (and nothing above it), the application
finds them by name through the ``eni_ipam.providers`` entry points, they do not import each other, and
each cloud's SDK is imported by its own subpackage only (the import-linter contracts in
pyproject.toml). :mod:`providers.ec2_errors` is shared by everything that speaks
EC2's error codes (the AWS provider and the in-memory :mod:`providers.sim` cloud).
"""
