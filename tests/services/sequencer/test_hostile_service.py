"""Hostile records against the running services, on the real broker: they keep going.

A sequencer and an archiver run (threads of this process, their real Kafka clients). Hostile
raw records arrive, issue 10 item 1's among them, then a good run: the good run is sealed and
archived, each hostile record is in the DLQ with its reason, and both services still run.
Then forged records arrive on ``sealed`` itself (the archiver's input), then another good run:
it is archived, the forged ones are quarantined with their reasons, and both still run.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from confluent_kafka import Producer

from tests.faults.hostile import (
    event_fields,
    event_value,
    join,
    sealed_fields,
    sealed_header,
    the_item1_record,
    trace_header,
    with_field,
)
from tests.services.archiver.helpers import finished_runs
from tests.services.archiver.helpers import running as archiver_running
from tests.services.sequencer.support import (
    assert_chain,
    produce_raw,
    raw_event,
    read_all,
    read_sealed_events,
    wait_until,
)
from tests.services.sequencer.support import running as sequencer_running
from tracevault.config import Settings
from tracevault.kafka import partition_for
from tracevault.replayer.load.archive import load_from_archive
from tracevault.schemas import decode_sealed
from tracevault.services.archiver import Archiver
from tracevault.services.archiver._quarantine import Quarantined


def _good_run(run_id: str, n: int = 5) -> list[tuple[str | bytes | None, bytes | None]]:
    return [(run_id, raw_event(run_id, s, last=n - 1)) for s in range(n)]


def test_hostile_records_neither_stop_the_sequencer_nor_the_archiver(
    seq_settings: Callable[..., Settings],
) -> None:
    settings = seq_settings(partitions=3, archive_segment_max_age_s=0.5)
    deep = b"[" * 1500 + b"]" * 1500
    hostile: list[tuple[str | bytes | None, bytes | None]] = [
        ("h-item1", the_item1_record("h-item1", 0)),  # issue 10, item 1
        ("h-deep", event_value("h-deep", 0, kind="RUN_STARTED", request=deep)),
        (b"", event_value("", 0, kind="RUN_STARTED")),  # empty run id
        ("h-junk", b"\xc3\x01" + b"\xff" * 40),
        ("h-tomb", None),
        (
            "h-union",  # a union index that names no branch
            join(trace_header(), with_field(event_fields("h-union", 0), "seed", b"\x06")),
        ),
    ]
    archiver = Archiver(settings)
    store = archiver.store
    with (
        sequencer_running(settings) as (seq, seq_errors),
        archiver_running(archiver) as arch_out,
    ):
        where = produce_raw(settings, hostile)
        produce_raw(settings, _good_run("good-1"))
        wait_until(
            lambda: finished_runs(store, ["good-1"]) == 1, timeout=90, what="good-1 archived"
        )
        assert not seq_errors and not arch_out, (seq_errors, arch_out)

        # forged records on the sealed topic itself: the archiver's input
        forged_raw = event_value("forged", 0, kind="RUN_STARTED")
        bad_time = join(sealed_header(), sealed_fields("forged", 0, forged_raw, sealed_at=2**62))
        bad_sid = join(
            sealed_header(),
            with_field(sealed_fields("forged2", 0, forged_raw), "sequencer_id", b"\x02\xff"),
        )
        forged = [(b"forged", bad_time), (b"forged2", bad_sid), (b"forged3", b"\x00junk")]
        p = Producer(settings.kafka_config(partitioner="murmur2_random"))
        for key, value in forged:
            p.produce(settings.topics.sealed, value, key)
        assert p.flush(30) == 0
        produce_raw(settings, _good_run("good-2"))
        wait_until(
            lambda: finished_runs(store, ["good-2"]) == 1, timeout=90, what="good-2 archived"
        )
        wait_until(lambda: archiver.stats.events_quarantined == 3, timeout=30, what="3 quarantined")
        # still running, both of them
        assert not seq_errors and not arch_out, (seq_errors, arch_out)
        snap = seq.metrics.snapshot()
        assert snap["tracevault_sequencer_dlq_total{reason=invalid}"] == 3
        assert snap["tracevault_sequencer_dlq_total{reason=undecodable}"] == 3

    # the good runs: sealed on one chain each, archived and verified
    on_sealed = read_sealed_events(settings)
    assert {r.key for r in on_sealed} == {b"good-1", b"good-2", b"forged", b"forged2", b"forged3"}
    for run_id in ("good-1", "good-2"):
        events = [decode_sealed(r.value or b"") for r in on_sealed if r.key == run_id.encode()]
        assert_chain(run_id, events, [v for _, v in _good_run(run_id)])
        assert len(load_from_archive(store, run_id).records) == 5  # the tiled log

    # every hostile raw record is in the DLQ, unchanged, with its reason
    dlq = {
        (r.partition, int(r.headers["tracevault.source.offset"])): r
        for r in read_all(settings, settings.topics.dlq)
    }
    want = ["invalid", "invalid", "invalid", "undecodable", "undecodable", "undecodable"]
    for (key, value), (part, offset), reason in zip(hostile, where, want, strict=True):
        rec = dlq[(part, offset)]
        assert rec.headers["tracevault.reason"] == reason.encode(), (key, rec.headers)
        assert rec.value == value and rec.headers["tracevault.detail"]
    item1 = dlq[where[0]]
    assert item1.headers["tracevault.run_id"] == b"h-item1"
    assert item1.headers["tracevault.seq"] == b"0"
    assert b"not canonical" in item1.headers["tracevault.detail"]
    assert where[0][0] == partition_for("h-item1", 3)

    # the forged sealed records are quarantined in the archive store with their reasons
    q = {r.run_id or r.value: r for r in map(Quarantined.from_json, _objects(archiver))}
    assert q["forged"].reason == "invalid" and "sealed_at" in q["forged"].detail
    assert q[b"\x00junk"].reason == "undecodable"
    assert q[bad_sid].reason == "undecodable", "a sequencer_id that is not UTF-8"
    assert q["forged"].value == bad_time
    assert not store.list("runs/forged")

    # restarted, both pass over the hostile records (their offsets were committed: item 1's
    # record used to stop the sequencer again at every restart) and go on
    again = Archiver(settings)
    with (
        sequencer_running(settings) as (_, seq_errors),
        archiver_running(again) as arch_out,
    ):
        produce_raw(settings, _good_run("good-3"))
        wait_until(
            lambda: finished_runs(store, ["good-3"]) == 1, timeout=90, what="good-3 archived"
        )
        assert not seq_errors and not arch_out, (seq_errors, arch_out)
    assert again.stats.events_quarantined == 0, "nothing quarantined twice"
    assert len(store.list("quarantine/")) == 3
    assert len(read_all(settings, settings.topics.dlq)) == len(hostile), "nothing refused twice"


def _objects(archiver: Archiver) -> list[bytes]:
    return [archiver.store.get(i.key) for i in archiver.store.list("quarantine/")]


def test_a_raw_record_too_large_to_seal_does_not_stall_the_sequencer(
    seq_settings: Callable[..., Settings],
) -> None:
    # 999,908 bytes (TraceEvent v2): Kafka takes it on raw, but its sealed record (about 150
    # bytes more) is over the producer's 1,000,000-byte limit. It used to fail the
    # transaction, which was aborted and retried with the same record forever: nothing
    # behind it was sealed.
    settings = seq_settings(partitions=1)
    big = event_value("big", 0, kind="RUN_STARTED", request=b'"' + b"x" * 999_850 + b'"')
    with sequencer_running(settings) as (seq, errors):
        [(part, offset)] = produce_raw(settings, [("big", big)])
        produce_raw(settings, _good_run("after-big"))
        wait_until(
            lambda: sum(r.key == b"after-big" for r in read_sealed_events(settings)) == 5,
            timeout=60,
            what="the run after the big record sealed",
        )
        assert not errors, errors
        assert (
            seq.metrics.snapshot().get(
                "tracevault_sequencer_transactions_total{outcome=aborted}", 0
            )
            == 0
        )
    [rec] = read_all(settings, settings.topics.dlq)
    assert rec.headers["tracevault.reason"] == b"invalid"
    assert int(rec.headers["tracevault.source.offset"]) == offset and rec.partition == part
    detail = rec.headers["tracevault.detail"].decode()
    assert "999908 bytes" in detail and hashlib.sha256(big).hexdigest() in detail
    assert rec.value is None, "too large to copy: the detail names it by size and SHA-256"
