"""A hijack ahead of the next signature (issue 30, item 2), against the real broker,
sequencer and archiver.

The attacker may WRITE ``raw`` and holds no agent key. A keyed run's genuine seqs 0-2 are
sealed; the attacker writes thirty unsigned events as seqs 3..32 before the agent's seqs 3-6
arrive (its RUN_FINISHED carries a valid note over the agent's own chain). Before, the
genuine 3-6 went to the DLQ as ``conflict`` and nothing else happened: no contested record,
no ALERT; verify said ``verified, unfinished`` (exit 0) until the idle close, and after it
blamed the genuine seqs 1-2 too and never said "hijacked".

Now the sequencer contests the run the moment the agent's signed event is refused (a
``conflict`` whose note verifies under the run's key and contradicts the sealed chain is
proof): ALERT, metric, a contested record naming the victim, the first forged seq and where
the genuine events went. Verify, from the topic and from the archive, names the run hijacked,
the first forged seq and the genuine events, exits 1, and blames no seq the agent signed;
with only the log key (``--no-agent-check``) it still fails, on the sealed contested record.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

import pytest
from click.testing import CliRunner
from confluent_kafka import Producer

from tests.attacks.test_unsigned_claims import KEY, PAIR, _contested_for
from tests.replayer.recording import signed_raws
from tests.services.archiver.helpers import finished_runs
from tests.services.archiver.helpers import running as archiver_running
from tests.services.sequencer.support import read_all, read_sealed_events, wait_until
from tests.services.sequencer.support import running as sequencer_running
from tracevault.cli import tracevault
from tracevault.config import Settings
from tracevault.schemas import (
    AgentInfo,
    EventKind,
    TraceEvent,
    canonical_json,
    decode_sealed,
    encode_event,
)
from tracevault.services.archiver import Archiver

FORGED = range(3, 33)  # the attacker's thirty seqs
GENUINE_AHEAD = range(3, 7)  # the agent's seqs that find theirs taken


@pytest.fixture
def settings(settings_factory: Callable[..., Settings]) -> Settings:
    return settings_factory(
        partitions=1,
        agent_vkeys=json.dumps({"refund-bot": [KEY.verifier.vkey]}),
        agent_key=None,
        sequencer_batch_wait_ms=20,
        archive_segment_max_age_s=0.5,
    )


def _verify(settings: Settings, log_vkey: str, run_id: str, *args: str) -> tuple[int, Any]:
    """``replay verify --json`` as an auditor runs it (no --require-finished: the run may
    still be open), with only the keys each call names."""
    env = {
        "TRACEVAULT_BOOTSTRAP_SERVERS": settings.bootstrap_servers,
        "TRACEVAULT_TOPIC_PREFIX": settings.topic_prefix,
        "TRACEVAULT_ARCHIVE_URL": settings.archive_url,
        "TRACEVAULT_LOG_VKEYS": log_vkey,
        "TRACEVAULT_AGENT_VKEYS": "",
    }
    res = CliRunner().invoke(tracevault, ["replay", "verify", run_id, "--json", *args], env=env)
    return res.exit_code, json.loads(res.stdout)


def _event(run_id: str, seq: int, kind: EventKind, args: dict[str, Any]) -> TraceEvent:
    return TraceEvent(
        run_id=run_id,
        seq=seq,
        kind=kind,
        at=time.time_ns() // 1000 + seq,
        agent=AgentInfo("refund-bot", "1.0.0", "host", "python", "0"),
        request=canonical_json(args),
        response=canonical_json({"ok": seq}),
    )


def _genuine(run_id: str) -> list[bytes]:
    """The agent's run: RUN_STARTED, five tool calls, RUN_FINISHED; notes at 0 and 6."""
    kinds = [EventKind.RUN_STARTED, *[EventKind.TOOL_CALL] * 5, EventKind.RUN_FINISHED]
    events = [_event(run_id, s, k, {"refund": "denied"}) for s, k in enumerate(kinds)]
    return signed_raws(events, KEY)


def _produce(settings: Settings, run_id: str, raws: list[bytes]) -> None:
    p = Producer(settings.kafka_config(partitioner="murmur2_random"))
    for raw in raws:
        p.produce(settings.topics.raw, raw, run_id.encode())
    assert p.flush(30) == 0


def _sealed_seqs(settings: Settings, run_id: str) -> list[int]:
    return [
        decode_sealed(r.value).seq
        for r in read_sealed_events(settings)
        if r.key == run_id.encode() and r.value
    ]


def _dlq(settings: Settings, run_id: str) -> list[tuple[int, int, int, bytes]]:
    """(DLQ offset, raw offset, seq, reason) of the run's refused events."""
    return [
        (
            r.offset,
            int(r.headers["tracevault.source.offset"]),
            int(r.headers["tracevault.seq"]),
            r.headers["tracevault.reason"],
        )
        for r in read_all(settings, settings.topics.dlq)
        if r.headers.get("tracevault.run_id") == run_id.encode()
    ]


def _assert_named_hijacked(
    out: dict[str, Any],
    settings: Settings,
    run_id: str,
    dlq: list[tuple[int, int, int, bytes]],
    source: str,
) -> None:
    assert out["ok"] is False, out
    err = out["error"]
    assert "hijacked" in err and run_id in err, out
    assert out["seq"] == FORGED[0], out  # the first forged seq, never a seq the agent signed
    assert "seq 1" not in err and "seqs 1" not in err, out
    # where the genuine events are: their seqs, the DLQ, and the raw records it copied
    assert "seqs 3..6" in err and settings.topics.dlq in err, out
    assert all(f"{settings.topics.raw}[0]@{o}" in err for _d, o, _s, _r in dlq), out
    if source == "topic":  # the topic's reader also finds the DLQ's own records
        assert all(f"{settings.topics.dlq}[0]@{d}" in err for d, _o, _s, _r in dlq), out


def test_a_flood_ahead_of_the_next_signature_is_named_a_hijack(
    settings: Settings, log_vkey: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    rid = "run-flood-hijack"
    genuine = _genuine(rid)
    with sequencer_running(settings) as (seq, errors):
        _produce(settings, rid, genuine[:3])
        wait_until(lambda: _sealed_seqs(settings, rid) == [0, 1, 2], timeout=60, what="0-2")
        forged = [
            encode_event(_event(rid, s, EventKind.TOOL_CALL, {"refund": "approved"}))
            for s in FORGED
        ]
        _produce(settings, rid, forged)
        wait_until(lambda: len(_sealed_seqs(settings, rid)) == 33, timeout=60, what="flood")
        _produce(settings, rid, genuine[3:])
        wait_until(lambda: len(_dlq(settings, rid)) == 4, timeout=60, what="genuine in DLQ")
        wait_until(lambda: bool(_contested_for(settings, rid)), timeout=60, what="contested")
        snap = seq.metrics.snapshot()
        assert not errors, errors
    dlq = _dlq(settings, rid)
    assert [(s, r) for _d, _o, s, r in dlq] == [(s, b"conflict") for s in GENUINE_AHEAD], dlq

    # the sequencer: an ALERT and a contested record naming the hijack and the genuine events
    alerts = [r.getMessage() for r in caplog.records if "ALERT" in r.getMessage()]
    assert any("hijacked" in m and rid in m for m in alerts), alerts
    assert snap.get("tracevault_sequencer_contested_total", 0) >= 1, snap
    [record] = _contested_for(settings, rid)
    assert record["seq"] == FORGED[0] and "hijacked" in record["reason"], record
    assert [g["seq"] for g in record["genuine"]] == list(GENUINE_AHEAD), record

    # verify, the run still open (before the idle close): hijacked, exit 1, not "unfinished"
    code, out = _verify(settings, log_vkey, rid, "--from", "topic", "--agent-key", PAIR)
    assert code == 1, out
    _assert_named_hijacked(out, settings, rid, dlq, "topic")

    # the idle close ends the attacker's run; archived, it still names the hijack
    closing = settings.model_copy(update={"sequencer_idle_close_s": 0.5})
    archiver = Archiver(closing)
    with sequencer_running(closing) as (_seq, errors), archiver_running(archiver):
        wait_until(lambda: finished_runs(archiver.store, [rid]) == 1, timeout=90, what="archived")
        assert not errors, errors
    for source in ("topic", "archive"):
        code, out = _verify(settings, log_vkey, rid, "--from", source, "--agent-key", PAIR)
        assert code == 1, (source, out)
        _assert_named_hijacked(out, settings, rid, dlq, source)
        # the auditor with only the log key: the sealed contested record fails the run
        code, out = _verify(settings, log_vkey, rid, "--from", source, "--no-agent-check")
        assert code == 1 and out["ok"] is False, (source, out)
        assert "hijacked" in out["error"] and "contested" in out["error"], (source, out)


def test_a_flood_past_the_note_interval_is_contested_before_any_genuine_event_returns(
    settings: Settings, log_vkey: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The notes stop covering the run: 70 unsigned events after the agent's seqs 0-2, so
    seq 64 (agent_attest_every past seq 0's note) carries none. The live sequencer (its C path
    seals them unasked) contests the run at seq 64 while the agent is still silent."""
    caplog.set_level(logging.WARNING)
    rid = "run-flood-uncovered"
    genuine = _genuine(rid)
    assert settings.agent_attest_every == 64
    with sequencer_running(settings) as (_seq, errors):
        _produce(settings, rid, genuine[:3])
        wait_until(lambda: _sealed_seqs(settings, rid) == [0, 1, 2], timeout=60, what="0-2")
        _produce(
            settings,
            rid,
            [encode_event(_event(rid, s, EventKind.TOOL_CALL, {"x": s})) for s in range(3, 73)],
        )
        wait_until(lambda: bool(_contested_for(settings, rid)), timeout=60, what="contested")
        assert not errors, errors
    [record] = _contested_for(settings, rid)
    assert record["seq"] == 64 and "stopped covering" in record["reason"], record
    assert "seqs 1.." in record["reason"], record  # (to the batch's end)
    alerts = [r.getMessage() for r in caplog.records if "ALERT" in r.getMessage()]
    assert any("stopped covering" in m and rid in m for m in alerts), alerts
    code, out = _verify(settings, log_vkey, rid, "--from", "topic", "--no-agent-check")
    assert code == 1 and "stopped covering" in out["error"], out
