"""Archiving a run with the archiver's own writer (for the tests that need an archive).

``ArchiveWriter`` writes segments, receipts, the final receipt (when the run's last event is
RUN_FINISHED) and the day index, exactly as the running archiver did before the signed log;
``write_signed_run`` writes the static log the archiver writes now.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tests.services.archiver.sealed_factory import LogWriter
from tracevault.archive import ObjectStore
from tracevault.config import Settings
from tracevault.schemas import EventKind, SealedEvent, decode_event, encode_sealed
from tracevault.services.archiver import ArchiveWriter
from tracevault.services.archiver._sealed import parse_sealed
from tracevault.transparency import load_signer


def write_run(store: ObjectStore, sealed: list[SealedEvent], *, per_segment: int = 4) -> list[str]:
    """Archive ``sealed`` in segments of ``per_segment`` records; returns the segment keys."""
    writer = ArchiveWriter(store, retention_days=183)
    cur = writer.cursor(sealed[0].run_id)
    keys: list[str] = []
    for i in range(0, len(sealed), per_segment):
        chunk = [parse_sealed(encode_sealed(s)) for s in sealed[i : i + per_segment]]
        keys.append(writer.write_segment(cur, chunk))
    return keys


#: One static-log writer per archive (by URL), so runs written one by one into the same
#: archive extend one partition log, as the archiver's would.
_LOGS: dict[str, LogWriter] = {}


def write_signed_run(store: ObjectStore, sealed: list[SealedEvent]) -> None:
    """Archive ``sealed`` as the archiver does today: a static log of partition 0, its
    checkpoint signed by the session's log key (TRACEVAULT_LOG_KEY, tests/conftest.py)
    under the default settings' log origin and topic prefix, so the session's trusted vkey
    verifies it as a deployment's would (what ``replay run``/``diff``/``batch`` require)."""
    writer = _LOGS.get(store.url)
    if writer is None:
        until = datetime.now(UTC) + timedelta(days=366)  # past the legal minimum, as archived
        writer = LogWriter(store, load_signer(), Settings().topic_prefix, until=until)
        _LOGS[store.url] = writer
    finished = decode_event(sealed[-1].raw).kind is EventKind.RUN_FINISHED
    writer.add(sealed, finishes=finished)
    writer.flush()
