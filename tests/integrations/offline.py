"""Replaying a recorded run many times with its provider stopped, every connection counted.

The integration tests' bar (issue 34): an agent recorded once is replayed N times; each replay
must match with the same output, open no socket (``socket.connect`` audit events of this
process, counted while the replays run: the provider, a trace exporter, anything), and run no
side effect (the test counts its own). One recording serves every replay, so the matrix costs
N in-process re-runs, not N recordings.
"""

from __future__ import annotations

import asyncio
import inspect
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tracevault.replayer import areplay, replay
from tracevault.schemas import TraceEvent

__all__ = ["OFFLINE_REPLAYS", "Offline", "replay_offline"]

#: replays of one recording per integration: the issue's bar, 50/50
OFFLINE_REPLAYS = 50

_WATCHING: list[list[Any]] = []  # while a replay_offline runs: where its sockets went


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if _WATCHING and event == "socket.connect":
        _WATCHING[-1].append(args[1])


sys.addaudithook(_audit)


@dataclass(frozen=True)
class Offline:
    replays: int
    matched: int  # matched with the recorded output
    connects: tuple[Any, ...]  # every address a socket connected to meanwhile


def replay_offline(
    events: Sequence[TraceEvent], agent: Callable[..., Any], times: int, output: Any
) -> Offline:
    """Replay ``events`` with ``agent`` ``times`` times; count matches and connections."""
    connects: list[Any] = []
    matched = 0
    _WATCHING.append(connects)
    try:
        for _ in range(times):
            if inspect.iscoroutinefunction(agent):
                result = asyncio.run(areplay(events, agent, raise_on_divergence=False))
            else:
                result = replay(events, agent, raise_on_divergence=False)
            matched += result.matched and result.output == output
    finally:
        _WATCHING.remove(connects)
    return Offline(times, matched, tuple(connects))
