"""read_run_objects: one listing, receipted segments in seq order, unreceipted ones apart."""

from __future__ import annotations

from datetime import datetime
from io import BytesIO

import avro.datafile
import avro.io
import pytest

from tests.services.archiver.sealed_factory import sealed_run, write_segment_objects
from tracevault.archive import (
    ObjectStore,
    check_run,
    encode_segment,
    read_run_objects,
    read_segment,
    sealed_body,
)
from tracevault.archive.layout import (
    FinalReceipt,
    final_key,
)
from tracevault.chain import genesis
from tracevault.errors import ChainError, NotFoundError
from tracevault.schemas import encode_sealed


def test_segments_come_back_in_seq_order_with_their_receipts(
    future: datetime, store: ObjectStore
) -> None:
    events = sealed_run("run/1 é", 25)
    keys = [write_segment_objects(store, events[i : i + 10]) for i in (20, 0, 10)]
    store.put(
        final_key("run/1 é"),
        FinalReceipt(
            "run/1 é", 25, 24, events[-1].hash.hex(), sorted(keys), "2026-01-01T00:00:00+00:00"
        ).to_json(),
        retain_until=future,
    )
    run = read_run_objects(store, "run/1 é")
    assert [s.first_seq for s in run.segments] == [0, 10, 20]
    assert run.complete
    assert run.events() == events
    assert check_run(run) == 25


def test_a_segment_without_receipt_is_not_taken_as_complete(store: ObjectStore) -> None:
    events = sealed_run("r2", 20, finish=False)
    write_segment_objects(store, events[:10])
    pending = write_segment_objects(store, events[10:], receipt=False)
    run = read_run_objects(store, "r2")
    assert [s.last_seq for s in run.segments] == [9]
    assert run.unreceipted == (pending,)
    assert not run.complete
    assert check_run(run) == 10


def test_an_unknown_run_is_not_found(store: ObjectStore) -> None:
    with pytest.raises(NotFoundError, match="run 'ghost' is not in the archive"):
        read_run_objects(store, "ghost")


def test_check_run_names_the_segment_whose_bytes_were_flipped(store: ObjectStore) -> None:
    events = sealed_run("r3", 10)
    key = write_segment_objects(store, events)
    run = read_run_objects(store, "r3")
    seg = run.segments[0]
    bad = bytearray(seg.data)
    bad[-20] ^= 0x01
    tampered = type(run)(run.run_id, (type(seg)(key, 0, 9, bytes(bad), seg.receipt),), None)
    with pytest.raises(ChainError, match="sha256 differs") as exc:
        check_run(tampered)
    assert exc.value.obj == key


def test_apache_avro_reads_a_segment_fastavro_agrees() -> None:
    events = sealed_run("apache", 50)
    data = encode_segment("apache", 0, [sealed_body(encode_sealed(e)) for e in events])
    reader = avro.datafile.DataFileReader(BytesIO(data), avro.io.DatumReader())
    try:
        assert reader.meta["avro.codec"] == b"deflate"
        recs = list(reader)
    finally:
        reader.close()
    assert [r["seq"] for r in recs] == list(range(50))
    assert [r["raw"] for r in recs] == [e.raw for e in events]
    assert recs[0]["prev_hash"] == genesis("apache")
    assert read_segment(data) == events


def test_the_same_events_make_the_same_bytes() -> None:
    events = sealed_run("det", 30)
    bodies = [sealed_body(encode_sealed(e)) for e in events]
    assert encode_segment("det", 0, bodies) == encode_segment("det", 0, list(bodies))
