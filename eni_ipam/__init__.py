"""eni-ipam: keeps every node's pool of cloud secondary IPs or /28 prefixes between watermarks.

Packages, from the top layer down (docs/architecture.md): ``cli``; ``app`` (the service and the
demos); ``simulator``; ``agent`` (the node side) and ``providers`` (a top-level package of its own);
``kube``; ``store``; ``core``. Clouds plug in through :class:`eni_ipam.core.provider.Provider`;
no cloud SDK is imported here.
"""

__version__ = "0.7.0"
