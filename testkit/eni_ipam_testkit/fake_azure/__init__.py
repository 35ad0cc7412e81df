"""A fake Azure Resource Manager behind the real Azure SDK: an azure-core async transport.

:class:`FakeAzure` plugs into the SDK clients (``transport=``) and answers the HTTP requests they
really send, from an in-memory model of one subscription, with JSON shaped like ARM's. Everything
above the socket is the real SDK: URL building, serialization, paging, long-running-operation
polling, azure-core's retry policy and the credential policy. Only what the Azure provider uses is
served; any other request raises ``NotImplementedError`` so a gap shows up as a loud test failure,
never as a plausible answer.

It needs the ``azure`` extra (``pip install 'eni-ipam[azure]'``): the transport subclasses
azure-core's, so importing this module imports azure-core, and nothing else of the Azure SDK.

The model:

* resource groups; a virtual network with subnets (Azure reserves five addresses per subnet: the
  network address, the first three hosts, the broadcast address); application security groups;
* standalone NICs with IP configurations and an ETag that changes on every write; VMs referencing
  NICs (``primary``, ``deleteOption``), with a power state;
* Uniform scale sets whose VMs each have NICs; a scale-set VM's model
  (``networkProfileConfiguration``) is derived from its NICs, and updating the model re-allocates the
  NICs' configurations, as Compute does through Network.

What it does like ARM (the parts the provider's correctness rests on):

* **Dynamic allocation** takes the lowest free address of the subnet; all of a NIC's configurations
  must be in one subnet; 256 configurations per NIC; a NIC update that needs more addresses than the
  subnet has left answers ``400 SubnetIsFull`` and changes nothing (a scale-set VM update ends its
  long-running operation ``Failed`` with ``SubnetIsFull`` instead, since Compute calls Network
  asynchronously).
* **ETags**: ``If-Match`` with a stale ETag answers ``412 PreconditionFailed``.
* **Long-running operations**: a write answers ``200``/``202`` with ``Azure-AsyncOperation`` (a
  delete also with ``Location``, an ``operationResults`` URL); its status document says
  ``InProgress`` for ``lro_polls`` polls, then ``Succeeded`` (or ``Failed`` with an error object);
  the poller then reads the resource (or the operation result). Changes apply when the write is
  accepted.
* **Provisioning states**: while an operation that changed a NIC (or a scale-set VM and its NICs)
  runs, their documents say ``provisioningState: Updating``; when it ends they say ``Succeeded``
  (or ``Failed``). An operation makes progress when its status is polled *or* when a resource it
  changes is read (``GET``), so an operation whose poller went away (its answer was lost) still
  ends after ``lro_polls`` such reads.
* **Paging**: every listing returns ``page_size`` items and a ``nextLink``.
* **Usage**: ``virtualNetworks/usages`` reports each subnet's ``limit`` (size minus 5) and
  ``currentValue`` (addresses in use).

Fault injection, all one-shot or counted, keyed by the operation names the provider uses
(``NetworkInterfaces.CreateOrUpdate``; a status poll is ``<operation>.Poll``):

* :meth:`FakeAzure.throttle` — the next ``times`` requests answer ``429`` with ``Retry-After``;
* :meth:`FakeAzure.fail_next_lro` — the next such operation is accepted and ends ``Failed`` (or
  ``Canceled``) with the given code (or no error object); it changes nothing, or with ``apply`` its
  change is visible while it runs and undone when it ends, leaving the resource ``Failed``;
* :meth:`FakeAzure.stall_next_lro` — the next such operation never ends; it changes nothing, or with
  ``apply`` its change is carried out (the change landed, only its status never says so);
* :meth:`FakeAzure.delay_addresses` — the next reads of a NIC show its secondary configurations
  without their addresses (Azure still allocating them);
* :meth:`FakeAzure.before_next_write` — run a change (another writer) just before the next write to
  a resource is handled, after the caller read it: the stale-ETag race (the changes another writer
  can make: :meth:`~FakeAzure.add_ip_configuration`, :meth:`~FakeAzure.set_primary`,
  :meth:`~FakeAzure.set_tags`);
* :meth:`FakeAzure.lose_next_answer` — carry out the next such write but answer ``500``;
* :meth:`FakeAzure.disconnect` — drop requests before ARM sees them (``ServiceRequestError``);
* ``latency`` — seconds every request takes, on the event loop (virtual under looptime).

:attr:`FakeAzure.requests` records every request (method, URL, operation, status, ``If-Match``, JSON
body) for assertions. :class:`FakeCredential` is a token credential that needs no network.

The package, one job a module (each module's docstring gives its invariants):

* :mod:`~.transport` — :class:`FakeAzure`, the azure-core transport: ``send``, recording, dispatch;
* :mod:`~.routes` — which request is which operation and which handler answers it;
* :mod:`~.handlers` — the handlers of the ``Microsoft.Network`` and ``Microsoft.Compute`` requests;
* :mod:`~.operations` — long-running operations, provisioning states and ``If-Match``;
* :mod:`~.faults` — the faults a test queues, and the order a request meets them in;
* :mod:`~.store` — the subscription's resources: building, other writers, inspecting, lookups;
* :mod:`~.configurations` — a NIC update's rules: validation, dynamic allocation, all or nothing;
* :mod:`~.model` — the records and the subnet's address rules; :mod:`~.documents` — their ARM JSON;
* :mod:`~.wire` — requests, answers, paging and the azure-core response;
  :mod:`~.credential` — :class:`FakeCredential`.
"""

from eni_ipam_testkit.fake_azure.credential import FakeCredential
from eni_ipam_testkit.fake_azure.model import (
    BASE_URL,
    DEFAULT_SUBSCRIPTION,
    MAX_IP_CONFIGURATIONS,
    RESERVED_PER_SUBNET,
    Json,
)
from eni_ipam_testkit.fake_azure.transport import FakeAzure
from eni_ipam_testkit.fake_azure.wire import FakeResponse, RecordedRequest

__all__ = [
    "BASE_URL",
    "DEFAULT_SUBSCRIPTION",
    "MAX_IP_CONFIGURATIONS",
    "RESERVED_PER_SUBNET",
    "FakeAzure",
    "FakeCredential",
    "FakeResponse",
    "Json",
    "RecordedRequest",
]
