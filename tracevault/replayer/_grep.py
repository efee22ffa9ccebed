"""``search --grep``: content matches, only in the runs the index narrowed to, only where this
reader's keys open them.

The index holds no content (docs/index.md), so a content search reads the candidate runs from
the archive, opens each through the key provider and tenant the settings name (the same
``open_run`` that ``replay show`` uses) and matches the pattern in memory; nothing opened is
written anywhere. A run this reader may not open (another tenant's, an erased key) is not
guessed at: it is counted and named "not searchable (tenant X)".
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from tracevault.archive import ObjectStore
from tracevault.config import Settings
from tracevault.content import open_run
from tracevault.errors import ContentKeyError
from tracevault.index import RunHit
from tracevault.replayer.load.source import load_archived
from tracevault.schemas import TraceEvent, decode_event

__all__ = ["GrepResult", "grep_runs"]


@dataclass(slots=True)
class GrepResult:
    """run id -> the seqs whose request, response or error message matched (runs with none
    are left out); and run id -> tenant of each run this reader could not open."""

    matched: dict[str, list[int]] = field(default_factory=dict)
    not_searchable: dict[str, str] = field(default_factory=dict)


def _matches(rx: re.Pattern[str], ev: TraceEvent) -> bool:
    texts = [ev.request, ev.response]
    for data in texts:
        if rx.search(data.decode("utf-8", "replace")):
            return True
    return ev.error is not None and rx.search(ev.error.message) is not None


def grep_runs(
    settings: Settings, store: ObjectStore, hits: Sequence[RunHit], pattern: str
) -> GrepResult:
    """Open each hit's run from the archive with this reader's keys and match ``pattern`` (a
    Python regular expression) in its content."""
    try:
        rx = re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"--grep {pattern!r} is not a regular expression: {exc}") from exc
    out = GrepResult()
    for hit in hits:
        run = load_archived(store, hit.run_id)
        events = [decode_event(r["raw"]) for r in run.records.rows]
        try:
            opened = open_run(settings, events)
        except ContentKeyError:
            out.not_searchable[hit.run_id] = hit.tenant or "unknown"
            continue
        seqs = [ev.seq for ev in opened if _matches(rx, ev)]
        if seqs:
            out.matched[hit.run_id] = seqs
    return out
