"""Archiving a run with the archiver's own writer (for the tests that need an archive).

``ArchiveWriter`` writes segments, receipts, the final receipt (when the run's last event is
RUN_FINISHED) and the day index, exactly as the running archiver does.
"""

from __future__ import annotations

from tracevault.archive import ObjectStore
from tracevault.consumer.archiver import ArchiveWriter
from tracevault.consumer.archiver._sealed import parse_sealed
from tracevault.schemas import SealedEvent, encode_sealed


def write_run(store: ObjectStore, sealed: list[SealedEvent], *, per_segment: int = 4) -> list[str]:
    """Archive ``sealed`` in segments of ``per_segment`` records; returns the segment keys."""
    writer = ArchiveWriter(store, retention_days=183)
    cur = writer.cursor(sealed[0].run_id)
    keys: list[str] = []
    for i in range(0, len(sealed), per_segment):
        chunk = [parse_sealed(encode_sealed(s)) for s in sealed[i : i + per_segment]]
        keys.append(writer.write_segment(cur, chunk))
    return keys
