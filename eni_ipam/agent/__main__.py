"""``python -m eni_ipam.agent``: the node agent (:mod:`eni_ipam.agent.main`)."""

import sys

from eni_ipam.agent.main import main

sys.exit(main())
