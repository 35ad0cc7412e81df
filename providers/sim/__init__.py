"""In-memory EC2: the embedded cloud of ``demo``, ``simulate`` and ``run`` with ``provider: sim``.

:class:`SimCloud` is the cloud (setup, fault injection, EC2 operations, inspection) and
:class:`SimProvider` the :class:`~eni_ipam.core.provider.Provider` over it — a provider like any other, so
everything above the provider runs unchanged against it (which is also why the tests, benchmarks
and soak run the reconciler on it).
"""

from providers.ec2.limits import instance_limits, load_limits
from providers.ec2.provider import InstanceInfo
from providers.sim.cloud import SimCloud
from providers.sim.provider import SimProvider
from providers.sim.records import Page, SimError, Vpc

__all__ = [
    "InstanceInfo",
    "Page",
    "SimCloud",
    "SimError",
    "SimProvider",
    "Vpc",
    "instance_limits",
    "load_limits",
]
