"""Agents that break the worker they run in, for the batch-replay error paths.

Module-level so a Dask worker imports them as ``tests.replayer.batch_agents:NAME``.
"""

from __future__ import annotations

import sys
from typing import Any


def exiting_agent(agent_input: Any, edges: Any) -> Any:
    """Calls sys.exit() mid-run: the run is an error, the worker and the batch go on."""
    edges.clock()
    sys.exit(3)
