"""eni-ipam: keeps every node's pool of cloud secondary IPs or /28 prefixes between watermarks.

The core (this package) imports no cloud SDK: clouds plug in through :class:`eni_ipam.provider.Provider`
(``providers/aws``, ``providers/azure``, ``providers/generic``, ``providers/sim``).
"""

__version__ = "0.1.0"
