"""Writing a run into an archive store exactly as the layout contract says (for the tests).

Segments are made with the archiver's own ``encode_segment``/``sealed_body``; keys and
receipts come from ``tracevault.consumer.archive.layout``.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta

from tracevault.consumer.archive import ObjectStore, encode_segment, sealed_body
from tracevault.consumer.archive.layout import (
    FinalReceipt,
    SegmentReceipt,
    day_index_key,
    final_key,
    receipt_key,
    segment_key,
)
from tracevault.schemas import SealedEvent, encode_sealed

RETAIN = timedelta(days=200)


def write_run(
    store: ObjectStore,
    sealed: list[SealedEvent],
    *,
    per_segment: int = 4,
    final: bool = True,
    day: datetime | None = None,
) -> list[str]:
    """Archive ``sealed`` in segments of ``per_segment`` records; returns the segment keys."""
    run_id = sealed[0].run_id
    until = datetime.now(UTC) + RETAIN
    keys: list[str] = []
    for i in range(0, len(sealed), per_segment):
        chunk = sealed[i : i + per_segment]
        first, last = chunk[0].seq, chunk[-1].seq
        data = encode_segment(run_id, first, [sealed_body(encode_sealed(s)) for s in chunk])
        key = segment_key(run_id, first, last)
        store.put(key, data, retain_until=until)
        receipt = SegmentReceipt(
            run_id=run_id,
            segment=key,
            sha256=hashlib.sha256(data).hexdigest(),
            first_seq=first,
            last_seq=last,
            count=len(chunk),
            first_prev_hash=chunk[0].prev_hash.hex(),
            last_hash=chunk[-1].hash.hex(),
            created_at="2026-11-29T12:00:00+00:00",
        )
        store.put(receipt_key(run_id, first, last), receipt.to_json(), retain_until=until)
        keys.append(key)
    if final:
        fr = FinalReceipt(
            run_id=run_id,
            count=len(sealed),
            last_seq=sealed[-1].seq,
            last_hash=sealed[-1].hash.hex(),
            segments=keys,
            created_at="2026-11-29T12:00:00+00:00",
        )
        store.put(final_key(run_id), fr.to_json(), retain_until=until)
    d = (day or datetime.now(UTC)).date()
    store.put(day_index_key(d, run_id), b"", retain_until=until)
    return keys
