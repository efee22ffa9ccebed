"""The archiver against a real broker: runs in, receipted segments out, nothing twice."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable
from datetime import date
from io import BytesIO

import avro.datafile
import avro.io
import pytest

from tests.consumer.archive.helpers import finished_runs, produce_sealed, running, wait_for
from tests.consumer.archive.sealed_factory import sealed_run, sealed_values
from tracevault.archive import check_run, open_store, read_run_objects, sealed_body
from tracevault.archive.layout import day_prefix, run_id_from_key
from tracevault.config import Settings
from tracevault.consumer.archive import Archiver, ArchiverStats
from tracevault.consumer.archive._quarantine import Quarantined
from tracevault.schemas import encode_sealed


def _archive(settings: Settings, run_ids: list[str]) -> ArchiverStats:
    archiver = Archiver(settings)
    with running(archiver) as out:
        wait_for(lambda: finished_runs(archiver.store, run_ids) == len(run_ids), 60, "runs")
    stats = out[0]
    assert isinstance(stats, ArchiverStats), stats
    return stats


def test_runs_become_receipted_segments_that_apache_avro_reads(
    settings_factory: Callable[..., Settings],
) -> None:
    settings = settings_factory(archive_segment_max_events=40)
    runs = {f"run-{i}": sealed_values(f"run-{i}", 100 + i) for i in range(3)}
    produce_sealed(settings, runs)
    stats = _archive(settings, list(runs))
    assert stats.events_archived == 303
    assert stats.runs_finished == 3
    store = open_store(settings.archive_url, settings)
    for run_id, values in runs.items():
        run = read_run_objects(store, run_id)
        assert run.complete and not run.unreceipted
        n = len(values)
        assert [(s.first_seq, s.last_seq) for s in run.segments] == [
            (a, min(a + 39, n - 1)) for a in range(0, n, 40)
        ]
        assert check_run(run) == len(values)
        assert run.final is not None and run.final.segments == [s.key for s in run.segments]
        # An independent Avro implementation reads the same records back.
        raws = []
        for seg in run.segments:
            assert hashlib.sha256(seg.data).hexdigest() == seg.receipt.sha256
            reader = avro.datafile.DataFileReader(BytesIO(seg.data), avro.io.DatumReader())
            try:
                raws.extend(rec["raw"] for rec in reader)
            finally:
                reader.close()
        assert raws == [e.raw for e in sealed_run(run_id, len(values))]
    day = [i.key for i in store.list(day_prefix(date(2026, 1, 1)))]
    assert sorted(run_id_from_key(k) for k in day) == sorted(runs)


def test_a_second_archiver_from_offset_zero_archives_nothing_twice(
    settings_factory: Callable[..., Settings],
) -> None:
    settings = settings_factory(archive_segment_max_events=25)
    first = sealed_values("r", 120)
    produce_sealed(settings, {"r": first[:60]})
    archiver = Archiver(settings)
    store = archiver.store
    with running(archiver):
        wait_for(lambda: len(store.list("runs/r/")) >= 4, 30, "two segments of r")
    produce_sealed(settings, {"r": first[60:]})
    # A fresh group re-reads the topic from offset 0: the archive itself says what is done.
    again = settings.model_copy(update={"archive_group_id": "another-group"})
    stats = _archive(again, ["r"])
    assert stats.events_skipped >= 50
    run = read_run_objects(store, "r")
    assert check_run(run) == 120
    assert run.final is not None and run.final.count == 120


def test_an_open_run_is_written_when_its_segment_ages(
    settings_factory: Callable[..., Settings],
) -> None:
    settings = settings_factory(archive_segment_max_age_s=0.3)
    produce_sealed(settings, {"open": sealed_values("open", 30, finish=False)})
    archiver = Archiver(settings)
    with running(archiver):
        wait_for(lambda: len(archiver.store.list("runs/open/")) == 2, 30, "aged segment")
    run = read_run_objects(archiver.store, "open")
    assert not run.complete
    assert check_run(run) == 30


@pytest.mark.parametrize("fault", ["hole", "broken-chain"])
def test_a_hole_or_a_broken_chain_is_quarantined_and_the_archiver_goes_on(
    settings_factory: Callable[..., Settings], fault: str
) -> None:
    # Issue 10: one bad sealed record used to stop the archiver at every restart.
    settings = settings_factory()
    events = sealed_run("bad", 10)
    if fault == "hole":
        values = [encode_sealed(e) for e in events[:4] + events[5:]]
    else:
        tampered = dataclasses.replace(events[4], raw=events[4].raw + b"x")
        values = [encode_sealed(e) for e in [*events[:4], tampered, *events[5:]]]
    produce_sealed(settings, {"bad": values, "good": sealed_values("good", 30)})
    archiver = Archiver(settings)
    store = archiver.store
    with running(archiver) as out:
        wait_for(lambda: finished_runs(store, ["good"]) == 1, 60, "the good run archived")
        wait_for(lambda: archiver.stats.events_quarantined == 6 - (fault == "hole"), 30, "q")
        # still running: a run produced afterwards is archived too
        produce_sealed(settings, {"later": sealed_values("later", 5)})
        wait_for(lambda: finished_runs(store, ["later"]) == 1, 60, "a later run archived")
        assert not out, f"the archiver stopped: {out}"
    assert check_run(read_run_objects(store, "good")) == 30
    bad = read_run_objects(store, "bad")
    assert check_run(bad) == 4 and not bad.complete, "archived up to the seq before the fault"
    q = sorted(
        (Quarantined.from_json(store.get(i.key)) for i in store.list("quarantine/")),
        key=lambda r: r.seq or 0,
    )
    first = "chain" if fault == "broken-chain" else "hole"
    assert [(r.reason, r.run_id, r.seq) for r in q] == [
        (first if s == 4 or (fault == "hole" and s == 5) else "hole", "bad", s)
        for s in range(4 if fault == "broken-chain" else 5, 10)
    ]
    assert [r.value for r in q] == values[4:], "the exact bytes are kept"
    assert all(r.topic == settings.topics.sealed and r.detail for r in q)
    assert "seq 4" in q[0].detail
    assert archiver.stats.quarantined == {
        **({"chain": 1} if fault == "broken-chain" else {}),
        "hole": 5,
    }


def test_segments_rotate_at_the_byte_bound(settings_factory: Callable[..., Settings]) -> None:
    settings = settings_factory(archive_segment_max_bytes=4096)
    produce_sealed(settings, {"big": sealed_values("big", 60)})
    _archive(settings, ["big"])
    run = read_run_objects(open_store(settings.archive_url, settings), "big")
    assert len(run.segments) > 2
    for seg in run.segments[:-1]:  # each closed by the event that reached the bound
        sizes = [len(sealed_body(encode_sealed(e))) for e in seg.events()]
        assert sum(sizes) >= 4096 > sum(sizes[:-1])
    assert check_run(run) == 60


def test_the_archiver_writes_to_s3_with_object_lock(
    settings_factory: Callable[..., Settings],
    s3_bucket_factory: Callable[..., str],
    s3_endpoint: str,
) -> None:
    settings = settings_factory(
        archive_url=f"s3://{s3_bucket_factory()}/tv", s3_endpoint_url=s3_endpoint,
        archive_segment_max_events=30,
    )  # fmt: skip
    runs = {f"s3-{i}": sealed_values(f"s3-{i}", 70) for i in range(3)}
    produce_sealed(settings, runs)
    _archive(settings, list(runs))
    store = open_store(settings.archive_url, settings)
    for run_id in runs:
        run = read_run_objects(store, run_id)
        assert check_run(run) == 70 and run.complete
        assert {store.head(s.key).lock_mode for s in run.segments} == {"COMPLIANCE"}
