"""Provenance is required (issue 30, item 1), against the real broker, sequencer and archiver.

The attacker may WRITE ``raw`` and holds no agent key. Before, each of these verified
(``verified`` and a warning, exit 0):

- a keyless Recorder records a whole run as ``refund-bot``, whose key the deployment lists;
- the genuine run's events, their ``tracevault.attest`` notes stripped, written to raw before
  the genuine ones (which then go to the DLQ as ``conflict``);
- without any agent keys, a second producer writes seq 3 of a live run first.

Now the first two are contested at the sequencer (ALERT, metric, a contested record in the
signed log) and fail verify from the topic and the archive naming the seqs; the third is
``unverified`` provenance, exit 1, without agent keys.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from click.testing import CliRunner
from confluent_kafka import Producer

from tests.attacks.test_agent_identity import _hijack, _recorder
from tests.replayer.pipeline import wait_sealed
from tests.replayer.recording import signed_raws
from tests.services.archiver.helpers import finished_runs
from tests.services.archiver.helpers import running as archiver_running
from tests.services.sequencer.support import read_sealed_events, wait_until
from tests.services.sequencer.support import running as sequencer_running
from tracevault.cli import tracevault
from tracevault.config import Settings
from tracevault.producer import Publisher
from tracevault.schemas import (
    AgentInfo,
    EventKind,
    TraceEvent,
    canonical_json,
    decode_event,
    decode_sealed,
    encode_event,
)
from tracevault.services.archiver import Archiver
from tracevault.transparency import Ed25519Signer

KEY = Ed25519Signer.generate("refund-bot.agents.example")
PAIR = f"refund-bot={KEY.verifier.vkey}"


@pytest.fixture
def settings(settings_factory: Callable[..., Settings]) -> Settings:
    return settings_factory(
        partitions=1,
        agent_vkeys=json.dumps({"refund-bot": [KEY.verifier.vkey]}),
        agent_key=None,  # the attacker's Recorder has no key
        sequencer_batch_wait_ms=20,
        archive_segment_max_age_s=0.5,
    )


def _verify(settings: Settings, log_vkey: str, run_id: str, *args: str) -> tuple[int, Any]:
    env = {
        "TRACEVAULT_BOOTSTRAP_SERVERS": settings.bootstrap_servers,
        "TRACEVAULT_TOPIC_PREFIX": settings.topic_prefix,
        "TRACEVAULT_ARCHIVE_URL": settings.archive_url,
        "TRACEVAULT_LOG_VKEYS": log_vkey,
        "TRACEVAULT_AGENT_VKEYS": "",  # only what each call names
    }
    cmd = ["replay", "verify", run_id, "--require-finished", "--json", *args]
    res = CliRunner().invoke(tracevault, cmd, env=env)
    return res.exit_code, json.loads(res.stdout)


def _contested_for(settings: Settings, run_id: str) -> list[dict[str, Any]]:
    """The contested records the sequencer sealed naming ``run_id``."""
    out = []
    for r in read_sealed_events(settings):
        if r.key is not None and r.key.startswith(b"tracevault.contested") and r.value:
            ev = decode_event(decode_sealed(r.value).raw)
            if ev.seq == 0 and json.loads(ev.request)["run_id"] == run_id:
                out.append(json.loads(ev.request))
    return out


@pytest.fixture
def pipeline(settings: Settings) -> Iterator[tuple[Any, Archiver]]:
    archiver = Archiver(settings)
    with sequencer_running(settings) as (seq, errors), archiver_running(archiver):
        yield seq, archiver
        assert not errors, errors


def _sealed_and_archived(settings: Settings, archiver: Archiver, run_id: str) -> None:
    wait_sealed(settings, run_id)
    wait_until(lambda: finished_runs(archiver.store, [run_id]) == 1, timeout=90, what="archived")


def _assert_contested_and_failing(
    settings: Settings,
    log_vkey: str,
    run_id: str,
    snap: dict[str, float],
    caplog: pytest.LogCaptureFixture,
) -> None:
    alerts = [r.getMessage() for r in caplog.records if "ALERT" in r.getMessage()]
    assert any("contested" in m and run_id in m and "no agent note" in m for m in alerts), alerts
    assert snap.get("tracevault_sequencer_contested_total", 0) >= 1, snap
    [record] = _contested_for(settings, run_id)
    assert record["seq"] == 0 and "unsigned claim" in record["reason"], record
    for source in ("topic", "archive"):
        code, out = _verify(settings, log_vkey, run_id, "--from", source, "--agent-key", PAIR)
        assert code == 1 and out["ok"] is False and out["seq"] == 0, (source, out)
        assert "carries no agent signature" in out["error"], (source, out)
        assert "seqs 0.." in out["error"], (source, out)
        # the auditor with only the log key: the sealed contested record fails the run
        code, out = _verify(settings, log_vkey, run_id, "--from", source, "--no-agent-check")
        assert code == 1 and "contested record" in out["error"], (source, out)
        assert "an unsigned claim" in out["error"], (source, out)


def test_a_keyless_recorder_claiming_a_keyed_agent_is_contested_and_fails_verify(
    settings: Settings,
    pipeline: tuple[Any, Archiver],
    log_vkey: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    seq, archiver = pipeline
    caplog.set_level(logging.WARNING)
    rid = "run-keyless-claim"
    publisher = Publisher(settings)
    try:
        with _recorder(settings, publisher, rid) as edges:  # no key: an unsigned claim
            edges.tool("refund", {"step": 1})
            edges.finish({"refund": "approved"})
        assert publisher.flush(30)
    finally:
        publisher.close()
    _sealed_and_archived(settings, archiver, rid)
    _assert_contested_and_failing(settings, log_vkey, rid, seq.metrics.snapshot(), caplog)


def _genuine_events(run_id: str) -> list[TraceEvent]:
    now = time.time_ns() // 1000
    kinds = [EventKind.RUN_STARTED, EventKind.TOOL_CALL, EventKind.TOOL_CALL]
    return [
        TraceEvent(
            run_id=run_id,
            seq=s,
            kind=kind,
            at=now + s,
            agent=AgentInfo("refund-bot", "1.0.0", "host", "python", "0"),
            request=canonical_json({"step": s}),
            response=canonical_json({"ok": s}),
        )
        for s, kind in enumerate([*kinds, EventKind.RUN_FINISHED])
    ]


def test_notes_stripped_from_a_genuine_run_and_written_first_are_contested_and_fail(
    settings: Settings,
    pipeline: tuple[Any, Archiver],
    log_vkey: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    seq, archiver = pipeline
    caplog.set_level(logging.WARNING)
    rid = "run-notes-stripped"
    events = _genuine_events(rid)
    genuine = signed_raws(events, KEY)  # the agent's bytes, each note in place
    assert all(b"tracevault.attest" in genuine[s] for s in (0, len(events) - 1))
    stripped = [encode_event(e) for e in events]  # the same events, no note
    p = Producer(settings.kafka_config(partitioner="murmur2_random"))
    for raws in (stripped, genuine):  # the attacker's copies first
        for raw in raws:
            p.produce(settings.topics.raw, raw, rid.encode())
        assert p.flush(30) == 0
    _sealed_and_archived(settings, archiver, rid)
    sealed = [decode_event(decode_sealed(r.value).raw) for r in read_sealed_events(settings)
              if r.key == rid.encode() and r.value]  # fmt: skip
    assert [e.seq for e in sealed] == [0, 1, 2, 3]
    assert not any(e.attributes for e in sealed)  # the stripped copies were sealed
    _assert_contested_and_failing(settings, log_vkey, rid, seq.metrics.snapshot(), caplog)


def test_a_keyless_hijack_fails_verify_without_agent_keys(
    settings_factory: Callable[..., Settings], log_vkey: str
) -> None:
    """No agent keys anywhere: a second producer writes seq 3 of a live run first. Nothing
    can say who wrote what, so verify must not pass: provenance ``unverified``, exit 1."""
    settings = settings_factory(
        partitions=1, agent_vkeys="", agent_key=None, sequencer_batch_wait_ms=20
    )
    rid = "run-keyless-hijack"
    with sequencer_running(settings) as (_seq, errors):
        publisher = Publisher(settings)
        try:
            with _recorder(settings, publisher, rid) as edges:
                edges.tool("refund", {"step": 1})
                edges.tool("refund", {"step": 2})
                assert publisher.flush(30)
                p = Producer(settings.kafka_config(partitioner="murmur2_random"))
                p.produce(settings.topics.raw, _same_agent_hijack(rid), rid.encode())
                assert p.flush(30) == 0
                edges.tool("refund", {"step": 3, "refund": "denied"})  # the genuine seq 3
                edges.finish({"refund": "denied"})
            assert publisher.flush(30)
        finally:
            publisher.close()
        wait_sealed(settings, rid)
        assert not errors, errors
    sealed = [decode_event(decode_sealed(r.value).raw) for r in read_sealed_events(settings)
              if r.key == rid.encode() and r.value]  # fmt: skip
    assert json.loads(sealed[3].request)["args"] == {"refund": "approved"}  # the forgery
    code, out = _verify(settings, log_vkey, rid, "--from", "topic")
    assert code == 1 and (out["ok"], out["status"], out["provenance"]) == (
        False, "unverified", "unverified"
    ), out  # fmt: skip
    assert out["log_checked"] is True and "no trusted agent vkey" in out["error"], out
    # --no-agent-check accepts it knowingly: never a bare "verified"
    code, out = _verify(settings, log_vkey, rid, "--from", "topic", "--no-agent-check")
    assert code == 0 and out["status"] == "log verified, provenance not checked", out


def _same_agent_hijack(run_id: str) -> bytes:
    """The attacker's seq 3, claiming the run's own agent id (no mixed-agent tell)."""
    ev = decode_event(_hijack(run_id))
    return encode_event(
        TraceEvent(
            run_id=ev.run_id, seq=ev.seq, kind=ev.kind, at=ev.at,
            agent=AgentInfo("refund-bot", "1.0.0", "host", "python", "0"),
            request=ev.request, response=ev.response,
        )
    )  # fmt: skip
