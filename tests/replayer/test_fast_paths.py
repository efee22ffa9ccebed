"""The replay hot path's own readers agree with fastavro, or step aside for it."""

from __future__ import annotations

import gc
import random
from datetime import UTC, datetime, timedelta
from io import BytesIO
from typing import Any

import fastavro
import pytest

from tests.replayer.archiving import write_run
from tracevault.archive import ObjectStore
from tracevault.archive._segment import encode_segment, sealed_body
from tracevault.chain import genesis, link
from tracevault.errors import ChainError
from tracevault.replayer.load._nogc import gc_paused
from tracevault.replayer.load.archive import read_segment_rows
from tracevault.schemas import SealedEvent, default_schemas, encode_sealed
from tracevault.schemas.fast import SEALED_EVENT_V1, segment_rows

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# the sealed_at range fastavro can turn into a datetime (years 1 to 9999)
_YEAR_1 = (datetime(1, 1, 1, tzinfo=UTC) - _EPOCH) // timedelta(microseconds=1)
_YEAR_9999 = (datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC) - _EPOCH) // timedelta(
    microseconds=1
)


def by_fastavro(data: bytes) -> list[dict[str, Any]]:
    rows = [r for r in fastavro.reader(BytesIO(data)) if isinstance(r, dict)]
    for r in rows:
        r["sealed_at"] = (r["sealed_at"] - _EPOCH) // timedelta(microseconds=1)
    return rows


def odd_records(first: int = 0) -> list[SealedEvent]:
    """Records with every edge the row layout has: unicode ids, extreme longs, GAP offsets."""
    out = []
    prev = genesis("rün-✓")
    rng = random.Random(3)
    for seq in range(first, first + 40):
        raw = bytes(rng.randrange(256) for _ in range(rng.choice([0, 1, 63, 64, 300, 5000, 9000])))
        h = link(prev, raw)
        out.append(
            SealedEvent(
                "rün-✓",
                seq,
                prev,
                h,
                raw,
                rng.choice([0, -1, _YEAR_1, _YEAR_9999, 1_795_950_873_272_582]),
                rng.choice([0, 5, 2**31 - 1, -(2**31)]),
                rng.choice([-1, 0, 2**63 - 1, 12_345, 100, 2**21]),
                rng.choice(["seq-1", "séquenceur-ü", ""]),
            )
        )
        prev = h
    return out


def test_the_pinned_fingerprint_is_the_current_sealed_v1() -> None:
    current = default_schemas().get("SealedEvent")
    assert (current.version, current.fingerprint) == (1, SEALED_EVENT_V1.fingerprint)


def test_archived_segments_read_exactly_as_fastavro_reads_them(
    file_store: ObjectStore, sealed: list[SealedEvent]
) -> None:
    keys = write_run(file_store, sealed, per_segment=4)
    for key in keys:
        data = file_store.get(key)
        fast = segment_rows(data)
        assert fast is not None and fast == by_fastavro(data)


def test_every_row_layout_edge_reads_exactly_as_fastavro() -> None:
    recs = odd_records()
    bodies = [sealed_body(encode_sealed(s)) for s in recs]
    for per_block in (1, 7, 40):
        data = encode_segment("rün-✓", 0, bodies[:per_block])
        fast = segment_rows(data)
        assert fast is not None and fast == by_fastavro(data)
    data = encode_segment("rün-✓", 0, bodies)
    rows = segment_rows(data)
    assert rows is not None
    assert [r["seq"] for r in rows] == list(range(40))
    assert rows == [{**s.to_avro()} for s in recs]


def test_a_sealed_at_past_datetime_range_is_read_as_its_integer() -> None:
    """Documented difference: fastavro cannot build that datetime; the row keeps the long."""
    rec = odd_records()[0]
    rec = SealedEvent(**{**rec.to_avro(), "sealed_at": 2**63 - 1})
    data = encode_segment(rec.run_id, 0, [sealed_body(encode_sealed(rec))])
    with pytest.raises(OverflowError):
        by_fastavro(data)
    rows = segment_rows(data)
    assert rows is not None and rows[0]["sealed_at"] == 2**63 - 1


@pytest.mark.parametrize("first", [8170, 2**20 - 20])  # seqs of 2 and 3 bytes, 3 and 4 bytes
def test_multi_byte_seqs_read_exactly_as_fastavro(first: int) -> None:
    recs = odd_records(first)
    data = encode_segment("rün-✓", first, [sealed_body(encode_sealed(s)) for s in recs])
    rows = segment_rows(data)
    assert rows is not None and rows == by_fastavro(data)
    assert [r["seq"] for r in rows] == list(range(first, first + 40))


def test_truncated_and_corrupted_segments_defer_to_fastavro() -> None:
    data = encode_segment("rün-✓", 0, [sealed_body(encode_sealed(s)) for s in odd_records()])
    rng = random.Random(11)
    cases = [data[:cut] for cut in range(0, len(data), max(1, len(data) // 97))]
    for _ in range(300):
        i = rng.randrange(len(data))
        cases.append(data[:i] + bytes([data[i] ^ (1 << rng.randrange(8))]) + data[i + 1 :])
    deferred = 0
    for bad in cases:
        fast = segment_rows(bad)
        try:
            ref: list[dict[str, Any]] | None = by_fastavro(bad)
        except Exception:  # fastavro's many error types: the reader must defer to them
            ref = None
        if fast is None:
            deferred += 1
        else:
            assert fast == ref
    assert deferred > 0


def test_an_unreadable_segment_is_still_named_by_the_loader() -> None:
    data = encode_segment("rün-✓", 0, [sealed_body(encode_sealed(s)) for s in odd_records()])
    with pytest.raises(ChainError) as info:
        read_segment_rows(data[: len(data) // 2], "runs/x/seg", 0)
    assert info.value.obj == "runs/x/seg" and "A1 segments" in str(info.value)


def test_gc_paused_restores_the_collector_even_on_error() -> None:
    assert gc.isenabled()
    with pytest.raises(RuntimeError), gc_paused():
        assert not gc.isenabled()
        raise RuntimeError("boom")
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()  # it was off before: it stays off
    finally:
        gc.enable()
