"""Agents that break the worker they run in, for the batch-replay error paths.

Module-level so a Dask worker imports them as ``tests.replayer.batch_agents:NAME``.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from tests.replayer.agents import research_agent


def exiting_agent(agent_input: Any, edges: Any) -> Any:
    """Calls sys.exit() mid-run: the run is an error, the worker and the batch go on."""
    edges.clock()
    sys.exit(3)


def dying_agent(agent_input: Any, edges: Any) -> Any:
    """research_agent, except that a run whose input says ``die`` kills its worker process."""
    if agent_input.get("die"):
        os._exit(17)
    return research_agent(agent_input, edges)
