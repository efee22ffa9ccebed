"""``replay(..., until=N)``: the state at step N, and what the agent asked for next.

Stopping before the first crossing after seq N leaves the agent exactly where it was at step
N. What an investigator wants to see there is the timeline served so far and the crossing the
agent was about to make (kind, request, model, call site), next to what the record says it
made: the cursor below remembers that crossing when it stops the agent.
"""

from __future__ import annotations

from typing import Any

from tracevault.callsite import call_site
from tracevault.edges import Crossing
from tracevault.replayer._results import NextCall
from tracevault.replayer.rerun.edges import ReplayCursor
from tracevault.schemas import TraceEvent

__all__ = ["UntilCursor"]


class UntilCursor(ReplayCursor):
    """A :class:`ReplayCursor` that notes the crossing it stopped the agent at."""

    asked: NextCall | None = None

    def _note(self, crossing: Crossing) -> None:
        if self.asked is None and self.until is not None and self.next_seq() > self.until:
            self.asked = NextCall(
                crossing.kind.value, crossing.request, crossing.model, crossing.seed, call_site()
            )

    def expect(self, crossing: Crossing) -> TraceEvent:
        self._note(crossing)
        return super().expect(crossing)

    async def aexpect(self, crossing: Crossing) -> TraceEvent:
        """The async edges' entry (a concurrent record's cursor awaits its turn there)."""
        self._note(crossing)
        turn = getattr(super(), "aexpect", None)
        return super().expect(crossing) if turn is None else await turn(crossing)

    def ended(self, kind: str, request: Any) -> None:
        """The agent returned or raised at the stop: that is what it "asked" for next."""
        if self.asked is None and self.until is not None and self.next_seq() > self.until:
            self.asked = NextCall(kind, request)
