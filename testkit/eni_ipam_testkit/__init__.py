"""Test doubles of what eni-ipam talks to, shipped apart from the product (``eni-ipam-testkit``).

:mod:`~eni_ipam_testkit.fake_kube` is a fake Kubernetes API server over HTTPS that lightkube, kubectl
and helm use unchanged (docs/testing.md); :mod:`~eni_ipam_testkit.fake_azure` an Azure Resource
Manager behind an azure-core transport (docs/azure.md); :mod:`~eni_ipam_testkit.moto_ec2` makes
moto's EC2 answer like real EC2 where an ENI IP manager depends on it (limits, exhaustion, lowest
free addresses, /28 prefixes) and runs moto's server in-process; :mod:`~eni_ipam_testkit.ec2_wire`
puts EC2's wire protocol in front of the in-memory cloud, in-process or over HTTP, for the AWS
provider's tests and benchmark; :mod:`~eni_ipam_testkit.commands`
adds ``eni-ipam dev-cluster`` and ``eni-ipam demo --cloud moto`` through entry points.

The product never imports this package (an import-linter contract checks it) and its wheel and
image never contain it (tests/test_packaging.py). Importing this package imports no heavy
dependency: moto only once the moto layer is installed or its server started, azure-core with
:mod:`~eni_ipam_testkit.fake_azure`, cryptography once a fake API server first needs its TLS
certificates, and kubernetes-validate's schemas once one first serves OpenAPI or checks a built-in
object.
"""
