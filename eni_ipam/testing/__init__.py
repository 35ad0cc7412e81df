"""What an integrator needs to test against eni-ipam: the Provider contract as executable checks.

:mod:`eni_ipam.testing.provider_contract` checks that a provider keeps the contract
:mod:`eni_ipam.core.provider` states; every provider's tests run it. Nothing here is a test double
and nothing here imports a test framework. The doubles (the fake Kubernetes API server, the fake
Azure Resource Manager, moto's EC2 with EC2's limits) are a distribution of their own,
``eni-ipam-testkit`` (``testkit/`` in the repository), which the product never imports.
"""
