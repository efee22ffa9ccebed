"""How a tool is registered with a Recorder: plain callables, or :class:`Tool` for side effects."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tracevault.errors import ConfigError

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
        # ConfigError like Recorder(model=...): a wiring mistake the CLI maps to exit 2.
        if isinstance(self.fn, Tool):
            raise ConfigError(
                "Tool(fn=...) got a Tool: pass the function itself, e.g. "
                "Tool(send_email, side_effect=True), or the Tool as it is"
            )
        if not callable(self.fn):
            raise ConfigError(
                f"Tool(fn=...) must be the tool's function, called as fn(args) (or "
                f"fn(args, idempotency_key=key) with side_effect=True); got a "
                f"{type(self.fn).__name__}: {self.fn!r:.80}"
            )
        if not isinstance(self.side_effect, bool):
            raise ConfigError(
                "Tool(side_effect=...) must be True (the tool changes the world and gets an "
                f"idempotency_key) or False, got {self.side_effect!r:.80}"
            )
