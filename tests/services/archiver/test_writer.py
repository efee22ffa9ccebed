"""The archive as its own checkpoint: cursors read it back and repair what a crash left."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.services.archiver.sealed_factory import sealed_run, write_segment_objects
from tracevault.archive import ObjectStore, check_run, open_store, read_run_objects
from tracevault.archive.layout import final_key, receipt_key
from tracevault.chain import genesis
from tracevault.config import Settings, load_settings
from tracevault.errors import ArchiveError, ConfigError, RetentionError
from tracevault.schemas import encode_sealed
from tracevault.services.archiver import ArchiveWriter
from tracevault.services.archiver._sealed import parse_sealed


def _parsed(run_id: str, n: int, **kw: object) -> list:  # type: ignore[type-arg]
    return [parse_sealed(encode_sealed(e)) for e in sealed_run(run_id, n, **kw)]  # type: ignore[arg-type]


def test_a_new_run_starts_at_genesis(store: ObjectStore) -> None:
    cur = ArchiveWriter(store).cursor("fresh")
    assert (cur.next_seq, cur.last_hash, cur.finished) == (0, genesis("fresh"), False)


def test_retain_until_is_the_clock_plus_retention_and_the_receipts_state_it(
    store: ObjectStore,
) -> None:
    # A clock near the store's own: S3 refuses a retain-until in the past.
    t0 = datetime.now(UTC).replace(microsecond=0)
    until = t0 + timedelta(days=200)
    writer = ArchiveWriter(store, retention_days=200, clock=lambda: t0)
    cur = writer.cursor("r")
    key = writer.write_segment(cur, _parsed("r", 5))
    assert store.head(key).retain_until == until
    assert cur.finished and store.head(final_key("r")).retain_until == until
    run = read_run_objects(store, "r")
    assert run.final is not None
    for stated in (run.segments[0].receipt, run.final):
        assert stated.version == 2
        assert (stated.created_at, stated.retain_until) == (t0.isoformat(), until.isoformat())


def test_a_segment_left_without_receipt_is_receipted_on_the_next_start(
    store: ObjectStore,
) -> None:
    events = sealed_run("crashed", 30, finish=False)
    write_segment_objects(store, events[:10])
    write_segment_objects(store, events[10:20], receipt=False)  # killed before the receipt
    cur = ArchiveWriter(store).cursor("crashed")
    assert cur.next_seq == 20 and cur.last_hash == events[19].hash
    run = read_run_objects(store, "crashed")
    assert not run.unreceipted
    assert check_run(run) == 20
    # The repaired receipt states the lock the segment already has, and takes it itself.
    seg = run.segments[1]
    lock = store.head(seg.key).retain_until
    assert lock is not None and seg.receipt.retain_until == lock.isoformat()
    assert store.head(receipt_key("crashed", 10, 19)).retain_until == lock


def test_a_finished_run_without_final_receipt_gets_one_on_the_next_start(
    store: ObjectStore,
) -> None:
    events = sealed_run("nofinal", 12)
    write_segment_objects(store, events[:6])
    write_segment_objects(store, events[6:])  # killed before the final receipt
    cur = ArchiveWriter(store).cursor("nofinal")
    assert cur.finished
    run = read_run_objects(store, "nofinal")
    assert run.final is not None and run.final.count == 12
    assert check_run(run) == 12


def test_a_hole_in_the_archive_is_refused_with_the_operator_action(store: ObjectStore) -> None:
    events = sealed_run("holey", 30, finish=False)
    write_segment_objects(store, events[:10])
    write_segment_objects(store, events[20:])
    with pytest.raises(ArchiveError, match=r"starts at seq 20, expected 10.*Operator action"):
        ArchiveWriter(store).cursor("holey")


def test_a_segment_that_does_not_continue_the_run_is_refused(store: ObjectStore) -> None:
    writer = ArchiveWriter(store)
    cur = writer.cursor("r")
    with pytest.raises(ArchiveError, match="does not continue the archive at seq 0"):
        writer.write_segment(cur, _parsed("r", 10)[3:])


def test_retention_under_183_days_is_refused_citing_the_ai_act(tmp_path: Path) -> None:
    store = open_store(f"file://{tmp_path}", Settings())
    with pytest.raises(RetentionError, match=r"Art\. 19"):
        ArchiveWriter(store, retention_days=182)
    with pytest.raises(ConfigError, match=r"Art\. 19"):
        load_settings(retention_days=30)
