"""The demo fleet: simulated support agents recorded, sequenced, archived, replayed, verified.

``tracevault demo`` is the main job a new user runs first; the agent here is also the
README's example of agent code that runs unchanged live and under replay.
"""

from tracevault.demo.fleet import FleetWorld, live_edges, scripted_model, support_agent

__all__ = ["FleetWorld", "live_edges", "scripted_model", "support_agent"]
