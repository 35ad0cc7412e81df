"""The application layer: wires a provider, a node source and the core into a running process.

``service`` is ``eni-ipam run`` (configured by ``runconfig``), ``demo`` and ``demo_aws`` are the
live trials. Only this layer (and the simulator) chooses a provider; providers are found by name.
"""
