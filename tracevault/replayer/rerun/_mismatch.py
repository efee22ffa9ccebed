"""How a call differs from the recorded crossing it should be: shared by every way of serving.

The plain cursor (``edges``) and the Interleaver (``_interleave``) report a difference in the
same words, so a concurrent run diverges with today's report.
"""

from __future__ import annotations

import json
from typing import Any

from tracevault.edges import Crossing
from tracevault.replayer._json_diff import json_diff, short_json
from tracevault.schemas import EventKind, TraceEvent, canonical_json_like

__all__ = ["StopReplay", "gap_reason", "loads", "mismatch", "names_first", "seed_differs"]


class StopReplay(BaseException):
    """Raised inside the agent when ``--until N`` is reached.

    A BaseException so an agent's ``except Exception`` does not swallow it.
    """


def loads(data: bytes) -> Any:
    return json.loads(data) if data else None


def seed_differs(ev: TraceEvent, crossing: Crossing) -> bool:
    if crossing.kind is EventKind.RANDOM:
        # seed=None live means "draw one and record it": replay then serves the recorded one.
        return crossing.seed is not None and crossing.seed != ev.seed
    return crossing.seed != ev.seed


def gap_reason(ev: TraceEvent) -> str:
    """Why replay stops at a GAP marker the sequencer sealed."""
    return (
        f"the record has a GAP marker at seq {ev.seq} (events never reached the "
        f"sequencer: {short_json(loads(ev.request))}); replay cannot serve past it — "
        f"use --until {ev.seq - 1} to rebuild the state before it"
    )


#: Request paths that name what was called: a change there heads the diff (two swapped tools
#: are a tool-name change first, whatever their arguments sort as).
_NAMES = ("$.request.tool:", "$.request.name:", "$.request.api:")


def names_first(lines: tuple[str, ...]) -> list[str]:
    """``lines`` with the ones that name the callee first (see ``_NAMES``), else in order."""
    return sorted(lines, key=lambda line: not line.startswith(_NAMES))


def mismatch(ev: TraceEvent, crossing: Crossing) -> tuple[str, tuple[str, ...]] | None:
    """Why ``crossing`` is not the recorded ``ev``: (reason, JSON-path diff), or None.

    The reason names the first differing JSON path (``$.model``, ``$.seed``, then the
    request's leaves in document order), so the headline says what changed.
    """
    kind = crossing.kind.value
    actual_req = crossing.request
    if ev.kind is EventKind.GAP:
        return gap_reason(ev), ()
    if ev.kind is not crossing.kind:
        return (
            f"the agent made a {kind} call where the record has {ev.kind.value}",
            json_diff(loads(ev.request), actual_req, "$.request"),
        )
    # in the recorded event's own form: a record made before RFC 8785 still matches
    actual_bytes = canonical_json_like(actual_req, ev.request, field="request")
    diff: list[str] = []
    # model=None: the build the provider reported is served, not compared (edges.py); the
    # requested model is inside the request, so a prompt change is headlined as the prompt.
    served_build = crossing.kind is EventKind.MODEL_CALL and crossing.model is None
    if ev.model != crossing.model and not served_build:
        diff.append(f"$.model: expected {short_json(ev.model)}, got {short_json(crossing.model)}")
    if seed_differs(ev, crossing):
        diff.append(f"$.seed: expected {short_json(ev.seed)}, got {short_json(crossing.seed)}")
    if actual_bytes != ev.request:
        diff.extend(names_first(json_diff(loads(ev.request), actual_req, "$.request")))
        if len(diff) == 0:  # e.g. a record from before RFC 8785 holds 1.0, the re-run 1
            diff.append(
                "$.request: the same JSON value, in other canonical bytes than the record's"
            )
    if not diff:
        return None
    what = (
        "model"
        if diff[0].startswith("$.model")
        else "seed"
        if diff[0].startswith("$.seed")
        else "request"
    )
    path = diff[0].partition(": ")[0]
    return f"the {kind} call's {what} differs from the record at {path}", tuple(diff)
