"""Cloud providers: each subpackage implements :class:`eni_ipam.core.provider.Provider` for one cloud.

* :mod:`providers.aws` (boto3), :mod:`providers.azure` (the Azure SDK), :mod:`providers.generic`
  (no cloud: static cluster ranges) and :mod:`providers.sim` (the in-memory EC2, the embedded
  default), each with a ``service`` plug-in;
* :mod:`providers.ec2`, what the two EC2 speakers (aws and sim) share.

Arrows point one way: providers import :mod:`eni_ipam`'s domain, configuration vocabulary and error
root, and nothing above them; :mod:`eni_ipam` never imports a provider: it finds them by name through
entry points (``eni_ipam.providers`` for ``eni-ipam run``, ``eni_ipam.emulators`` for the simulator
and the demo, ``eni_ipam.commands`` for a provider's own subcommand). They do not import each
other, and each cloud's SDK is imported by its own subpackage only (the import-linter contracts in
pyproject.toml).
"""
