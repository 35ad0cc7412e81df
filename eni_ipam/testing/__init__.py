"""Test doubles and contract checks shipped with eni-ipam, for its own tests and for integrators'.

:mod:`eni_ipam.testing.provider_contract` holds the executable Provider contract;
:mod:`eni_ipam.testing.fake_kube` a fake Kubernetes API server speaking the list/watch protocol over
HTTP (docs/testing.md); :mod:`eni_ipam.testing.fake_azure` an Azure Resource Manager behind an
azure-core transport (docs/azure.md); :mod:`eni_ipam.testing.helm` renders the project's Helm chart for tests.
Nothing here is imported by the product's runtime code paths.
"""
