"""A hijack's genuine events read back from the DLQ, and a hijack of a run the sequencer had
already dropped from memory (issue 30, item 2's leftovers), against the real broker and the
real sequencer.

1. Verify used to only locate the agent's events in the DLQ. Now it reads them back and checks
   each against the agent's notes and the contested record's pins: the genuine run is
   ``recoverable from the DLQ (seqs 3..6, verified against agent key K)``, or it names the DLQ
   offset and seq of a copy altered or missing. The attacker, who may also write the DLQ,
   adds forged copies under the run's key with the genuine copies' headers (an altered body,
   and a body carrying the genuine RUN_FINISHED's note): set aside by name, never accepted,
   and once the genuine copies are gone the run is not recoverable.
2. A run the sequencer's book evicted (closed for idleness, ``sequencer_idle_close_s``, or
   finished by the attacker's own RUN_FINISHED) kept only its offsets and last seq, and the
   agent's refused signed event was a bare ``conflict``: no ALERT, no contested record. Now it
   is named hijacked like a live run's, read back from ``sealed``.
"""

from __future__ import annotations

import dataclasses
import logging

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.attacks.test_hijack_flood import (
    FORGED,
    GENUINE_AHEAD,
    _dlq,
    _event,
    _genuine,
    _produce,
    _sealed_seqs,
    _verify,
)
from tests.attacks.test_hijack_flood import settings as flood_settings
from tests.attacks.test_unsigned_claims import KEY, PAIR, _contested_for
from tests.services.sequencer.support import running as sequencer_running
from tests.services.sequencer.support import wait_until
from tracevault.config import Settings
from tracevault.heads import find_head
from tracevault.schemas import EventKind, canonical_json, decode_event, encode_event

#: the fixture: one partition, refund-bot keyed, no agent key of the test's own
settings = flood_settings


def _forged(rid: str, first: int, last: int, *, finish: bool = False) -> list[bytes]:
    kinds = [EventKind.TOOL_CALL] * (last - first + 1)
    if finish:
        kinds[-1] = EventKind.RUN_FINISHED
    return [
        encode_event(_event(rid, s, k, {"refund": "approved"}))
        for s, k in zip(range(first, last + 1), kinds, strict=True)
    ]


def _hijack_live(settings: Settings, rid: str) -> list[bytes]:
    """The flood of test_hijack_flood: the genuine 3-6 refused, the run contested."""
    genuine = _genuine(rid)
    with sequencer_running(settings) as (_seq, errors):
        _produce(settings, rid, genuine[:3])
        wait_until(lambda: _sealed_seqs(settings, rid) == [0, 1, 2], timeout=60, what="0-2")
        _produce(settings, rid, _forged(rid, FORGED[0], FORGED[-1]))
        wait_until(lambda: len(_sealed_seqs(settings, rid)) == 33, timeout=60, what="flood")
        _produce(settings, rid, genuine[3:])
        wait_until(lambda: bool(_contested_for(settings, rid)), timeout=60, what="contested")
        assert not errors, errors
    return genuine


def _write_dlq(settings: Settings, rid: str, copies: list[tuple[int, int, bytes]]) -> list[int]:
    """The attacker writes the DLQ: (seq, raw offset, bytes) under the run's key, with the
    headers the sequencer writes (the genuine copy's raw offset among them); their offsets."""
    p = Producer(settings.kafka_config())
    offsets: list[int] = []
    for seq, offset, value in copies:
        headers = {
            "tracevault.reason": b"conflict",
            "tracevault.detail": f"seq {seq} is already sealed with different bytes".encode(),
            "tracevault.source.topic": settings.topics.raw.encode(),
            "tracevault.source.partition": b"0",
            "tracevault.source.offset": str(offset).encode(),
            "tracevault.sequencer": b"t1",
            "tracevault.run_id": rid.encode(),
            "tracevault.seq": str(seq).encode(),
        }
        p.produce(
            settings.topics.dlq,
            value,
            rid.encode(),
            0,
            on_delivery=lambda err, msg: offsets.append(-1 if err else msg.offset()),
            headers=list(headers.items()),
        )
    assert p.flush(30) == 0
    return offsets


def _delete_dlq_before(settings: Settings, offset: int) -> None:
    """The DLQ's retention (90 days) or an admin deletes its records before ``offset``."""
    admin = AdminClient(settings.kafka_config())
    futures = admin.delete_records([TopicPartition(settings.topics.dlq, 0, offset)])
    for f in futures.values():
        f.result(30)


def test_the_dlq_copies_are_checked_against_the_agents_notes(
    settings: Settings, log_vkey: str
) -> None:
    rid = "run-hijack-recover"
    genuine = _hijack_live(settings, rid)
    dlq = _dlq(settings, rid)
    assert [s for _d, _o, s, _r in dlq] == list(GENUINE_AHEAD), dlq
    key = f"{KEY.verifier.name}+{KEY.verifier.key_id.hex()}"

    # the genuine copies check: seqs 3..6, against the agent's key, at their DLQ offsets
    code, out = _verify(settings, log_vkey, rid, "--from", "topic", "--agent-key", PAIR)
    assert code == 1 and "hijacked" in out["error"], out
    err = out["error"]
    assert f"recoverable from the DLQ (seqs 3..6, verified against agent key {key})" in err, err
    assert all(f"seq {s} at {settings.topics.dlq}[0]@{d}" in err for d, _o, s, _r in dlq), err
    assert "NOT recoverable" not in err and "set aside" not in err, err

    # the attacker writes forged copies under the genuine copies' raw offsets: seq 4 with
    # another body, and a RUN_FINISHED of its own carrying the genuine seq 6's note
    raw_of = {s: o for _d, o, s, _r in dlq}
    ev6 = decode_event(genuine[6])
    forged4 = encode_event(_event(rid, 4, EventKind.TOOL_CALL, {"refund": "approved"}))
    forged6 = encode_event(dataclasses.replace(ev6, response=canonical_json({"ok": "approved"})))
    at4, at6 = _write_dlq(settings, rid, [(4, raw_of[4], forged4), (6, raw_of[6], forged6)])
    code, out = _verify(settings, log_vkey, rid, "--from", "topic", "--agent-key", PAIR)
    assert code == 1, out
    err = out["error"]
    assert f"recoverable from the DLQ (seqs 3..6, verified against agent key {key})" in err, err
    assert f"seq 4 at {settings.topics.dlq}[0]@{at4} " in err, out  # set aside, by name
    assert f"seq 6 at {settings.topics.dlq}[0]@{at6} " in err, err
    assert "set aside as not the agent's" in err and "altered" in err, err
    assert f"{settings.topics.dlq}[0]@{at4}," not in err.split("set aside")[0], err

    # the genuine copies gone (retention, or deleted): the forged ones are never accepted
    _delete_dlq_before(settings, at4)
    code, out = _verify(settings, log_vkey, rid, "--from", "topic", "--agent-key", PAIR)
    assert code == 1 and "hijacked" in out["error"], out
    err = out["error"]
    assert "NOT recoverable from the DLQ" in err and "seqs 3..6, verified" not in err, err
    assert f"seq 3: no copy in the DLQ (the record names {settings.topics.raw}[0]@" in err, err
    assert f"seq 4 at {settings.topics.dlq}[0]@{at4} " in err, err
    assert f"seq 6 at {settings.topics.dlq}[0]@{at6} " in err, err
    assert "sha256" in err, out  # the copied note is the agent's; the body is not what it sent

    # with only the log key nothing is called recoverable: the copies were not checked
    code, out = _verify(settings, log_vkey, rid, "--from", "topic", "--no-agent-check")
    assert code == 1 and "not checked against the agent's notes" in out["error"], out


@pytest.mark.parametrize("eviction", ["idle close", "attacker's RUN_FINISHED"])
def test_a_hijack_of_a_run_dropped_from_memory_is_named_hijacked(
    settings: Settings, log_vkey: str, caplog: pytest.LogCaptureFixture, eviction: str
) -> None:
    caplog.set_level(logging.WARNING)
    rid = "run-hijack-evicted-" + ("idle" if eviction == "idle close" else "finished")
    genuine = _genuine(rid)
    finish = eviction != "idle close"
    with sequencer_running(settings) as (_seq, errors):
        _produce(settings, rid, genuine[:3])
        wait_until(lambda: _sealed_seqs(settings, rid) == [0, 1, 2], timeout=60, what="0-2")
        _produce(settings, rid, _forged(rid, FORGED[0], FORGED[-1], finish=finish))
        wait_until(lambda: len(_sealed_seqs(settings, rid)) == 33, timeout=60, what="flood")
        assert not errors, errors
    # the eviction: the run's RUN_FINISHED (the idle close's marker, or the attacker's) is
    # sealed, and the book keeps only its offsets and last seq (FinishedRuns)
    closing = settings.model_copy(update={"sequencer_idle_close_s": 0.5})
    with sequencer_running(closing if not finish else settings) as (seq, errors):

        def finished() -> bool:
            head = find_head(settings, rid, timeout=10)
            return head is not None and head.finished

        def evicted() -> bool:
            book = seq.step.book  # the eviction is what the test forces
            return book is not None and rid not in book.runs and finished()

        wait_until(evicted, timeout=90, what="the run finished and evicted from the book")
        _produce(settings, rid, genuine[3:])
        wait_until(lambda: len(_dlq(settings, rid)) == 4, timeout=60, what="genuine in DLQ")
        wait_until(lambda: bool(_contested_for(settings, rid)), timeout=60, what="contested")
        snap = seq.metrics.snapshot()
        assert not errors, errors
    assert [(s, r) for _d, _o, s, r in _dlq(settings, rid)] == [
        (s, b"conflict") for s in GENUINE_AHEAD
    ]
    alerts = [r.getMessage() for r in caplog.records if "ALERT" in r.getMessage()]
    assert any("hijacked" in m and rid in m for m in alerts), alerts
    assert snap.get("tracevault_sequencer_contested_total", 0) >= 1, snap
    records = _contested_for(settings, rid)
    # the attacker's unsigned RUN_FINISHED was contested when sealed (all main said of it);
    # the hijack is now named too, once
    assert len(records) == (2 if finish else 1), records
    [record] = [r for r in records if r.get("hijacked")]
    assert record["seq"] == FORGED[0] and "hijacked" in record["reason"], record
    assert [g["seq"] for g in record["genuine"]] == list(GENUINE_AHEAD), record
    assert all(len(g["sha256"]) == 64 for g in record["genuine"]), record

    code, out = _verify(settings, log_vkey, rid, "--from", "topic", "--agent-key", PAIR)
    assert code == 1 and out["seq"] == FORGED[0], out
    assert "hijacked" in out["error"] and "seq 1" not in out["error"], out
    assert "recoverable from the DLQ (seqs 3..6" in out["error"], out
