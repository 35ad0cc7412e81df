"""Test doubles and contract checks shipped with eni-ipam, for its own tests and for integrators'.

:mod:`eni_ipam.testing.provider_contract` holds the executable Provider contract;
:mod:`eni_ipam.testing.fake_kube` a fake Kubernetes API server over HTTPS that lightkube, kubectl and
helm use unchanged (docs/testing.md); :mod:`eni_ipam.testing.fake_azure` an Azure Resource Manager
behind an azure-core transport (docs/azure.md); :mod:`eni_ipam.testing.moto_ec2` makes moto's EC2 answer like
real EC2 where an ENI IP manager depends on it (limits, exhaustion, lowest free addresses, /28
prefixes) and runs moto's server in-process (docs/testing.md).

Nothing here is imported by product code (an import-linter contract in pyproject.toml checks it);
``eni-ipam demo --cloud moto`` imports :mod:`~eni_ipam.testing.moto_ec2` when it runs. Importing
this package imports no optional dependency: moto (the ``moto`` extra) only once the moto layer is
installed or its server started, azure-core (the ``azure`` extra) with
:mod:`~eni_ipam.testing.fake_azure`, cryptography once a fake API server first needs its TLS
certificates, and kubernetes-validate's schemas once one first serves OpenAPI or checks a built-in
object (both are ``test`` extras).
"""
