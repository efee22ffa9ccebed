"""How a tool is registered with a Recorder: plain callables, or :class:`Tool` for side effects."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["Tool"]


@dataclass(frozen=True, slots=True)
class Tool:
    """A tool and how to call it.

    ``side_effect=True`` marks a tool that changes the world (pays, sends, writes). It is
    called ``fn(args, idempotency_key=key)`` with a key derived from the run id and the
    call's seq, so a retried or resumed run presents the same key and the tool can refuse to
    act twice. ``fn`` may be a plain function or a coroutine function (use ``atool`` then).
    """

    fn: Callable[..., Any]
    side_effect: bool = False

    def __post_init__(self) -> None:
        if not callable(self.fn):
            raise TypeError(f"Tool(fn=...) must be callable, got {type(self.fn).__name__}")
