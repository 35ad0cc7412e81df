"""The simulator: scenario files run by the real reconciler on a virtual clock.

``scenario`` reads the files (a stable format, docs/scenarios.md), ``simulate`` runs them against
the in-memory cloud, ``simloop`` is the virtual-time event loop, ``simnode`` the simulated node
side that answers the release handshake, and ``series`` records the exported metric series scrape by
scrape as promtool's ``input_series``.
"""
