"""Agent identity attacks (issue 22 item 1), against the real broker, sequencer and archiver.

The attacker may WRITE ``raw`` (Kafka ACLs cannot tell one run from another) but holds no
agent key of the victim. It writes a run's seq 3 before the genuine agent does, claiming
another agent; or it records with a key the deployment allows only for another agent id.
``replay verify`` with the trusted agent vkeys must name the seq and fail, from the topic and
from the archive; the sequencer must raise an ALERT and mark the run contested.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from confluent_kafka import Producer

from tests.replayer.pipeline import wait_sealed
from tests.services.archiver.helpers import finished_runs
from tests.services.archiver.helpers import running as archiver_running
from tests.services.sequencer.support import read_sealed_events, wait_until
from tests.services.sequencer.support import running as sequencer_running
from tracevault.cli import tracevault
from tracevault.config import Settings
from tracevault.producer import Publisher, Recorder
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


def _tool(args: Any) -> Any:
    return {"ok": args}


def _verify(settings: Settings, log_vkey: str, run_id: str, *args: str) -> tuple[int, Any]:
    env = {
        "TRACEVAULT_BOOTSTRAP_SERVERS": settings.bootstrap_servers,
        "TRACEVAULT_TOPIC_PREFIX": settings.topic_prefix,
        "TRACEVAULT_ARCHIVE_URL": settings.archive_url,
        "TRACEVAULT_LOG_VKEYS": log_vkey,
    }
    cmd = ["replay", "verify", run_id, "--require-finished", "--json", *args]
    res = CliRunner().invoke(tracevault, cmd, env=env)
    return res.exit_code, json.loads(res.output)


def _export(settings: Settings, log_vkey: str, run_id: str, out: Path) -> Any:
    env = {
        "TRACEVAULT_BOOTSTRAP_SERVERS": settings.bootstrap_servers,
        "TRACEVAULT_TOPIC_PREFIX": settings.topic_prefix,
        "TRACEVAULT_LOG_VKEYS": log_vkey,
    }
    cmd = ["replay", "export", run_id, "--from", "topic", "-o", str(out)]
    return CliRunner().invoke(tracevault, cmd, env=env)


def _recorder(settings: Settings, publisher: Publisher, run_id: str, **kw: Any) -> Recorder:
    return Recorder(
        publisher=publisher,
        agent_id=kw.pop("agent_id", "refund-bot"),
        agent_version="1.0.0",
        tools={"refund": _tool},
        run_id=run_id,
        input={"ticket": 42},
        **kw,
    )


@pytest.fixture
def agent_key() -> Ed25519Signer:
    return Ed25519Signer.generate("refund-bot.agents.example")


@pytest.fixture
def settings(settings_factory: Callable[..., Settings], agent_key: Ed25519Signer) -> Settings:
    allowed = {"refund-bot": [agent_key.verifier.vkey]}
    return settings_factory(
        partitions=1,
        agent_vkeys=json.dumps(allowed),
        agent_key=None,  # not the session's: each Recorder here names its key, or has none
        sequencer_batch_wait_ms=20,
        archive_segment_max_age_s=0.5,
    )


def _hijack(run_id: str) -> bytes:
    """The attacker's seq 3 of ``run_id``: a valid event any writer of raw can make."""
    forged = TraceEvent(
        run_id=run_id,
        seq=3,
        kind=EventKind.TOOL_CALL,
        at=time.time_ns() // 1000,
        agent=AgentInfo("evil-agent", "6.6.6", "evil-host", "python", "0"),
        request=canonical_json({"args": {"refund": "approved"}, "tool": "refund"}),
        response=canonical_json({"ok": {"refund": "approved"}}),
    )
    return encode_event(forged)


def test_raw_topic_hijack_of_seq_3_is_named_from_topic_and_archive_and_contested(
    settings: Settings,
    agent_key: Ed25519Signer,
    log_vkey: str,
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
) -> None:
    rid = "run-hijack-1"
    pair = f"refund-bot={agent_key.verifier.vkey}"
    archiver = Archiver(settings)
    caplog.set_level(logging.WARNING)
    with sequencer_running(settings) as (seq, errors), archiver_running(archiver):
        publisher = Publisher(settings)
        try:
            with _recorder(settings, publisher, rid, agent_key=agent_key) as edges:
                edges.tool("refund", {"step": 1})
                edges.tool("refund", {"step": 2})
                assert publisher.flush(30)
                # the attacker writes seq 3 before the genuine agent does
                p = Producer(settings.kafka_config(partitioner="murmur2_random"))
                p.produce(settings.topics.raw, _hijack(rid), rid.encode())
                assert p.flush(30) == 0
                edges.tool("refund", {"step": 3, "refund": "denied"})  # the genuine seq 3
                edges.tool("refund", {"step": 4})
                edges.finish({"refund": "denied"})
            assert publisher.flush(30)
        finally:
            publisher.close()
        wait_sealed(settings, rid)
        wait_until(
            lambda: finished_runs(archiver.store, [rid]) == 1, timeout=90, what="run archived"
        )
        assert not errors, errors
        snap = seq.metrics.snapshot()
    # the genuine seq 3 lost the race: the sealed run holds the attacker's
    sealed = [
        decode_event(_raw_of(r.value))
        for r in read_sealed_events(settings)
        if r.key == rid.encode()
    ]
    assert [e.seq for e in sealed] == [0, 1, 2, 3, 4, 5]
    assert sealed[3].agent.agent_id == "evil-agent"

    for source in ("topic", "archive"):
        code, out = _verify(settings, log_vkey, rid, "--from", source, "--agent-key", pair)
        assert code == 1, (source, out)
        assert out["ok"] is False and out["seq"] == 3, (source, out)
        assert "seq(s) 3 " in out["error"] and "not written by the run's producer" in out["error"]
    # no evidence bundle is made of it: export verifies first, and seq 3 claims another agent
    res = _export(settings, log_vkey, rid, tmp_path / "bundle")
    assert res.exit_code == 1 and "seq(s) 3 claim agent_id 'evil-agent'" in res.output, res.output
    # the sequencer saw it as it happened: an ALERT, a count and a signed contested record
    alerts = [r.getMessage() for r in caplog.records if "ALERT" in r.getMessage()]
    assert any("contested" in m and rid in m for m in alerts), alerts
    assert snap.get("tracevault_sequencer_contested_total", 0) >= 1, snap
    contested = [
        decode_event(_raw_of(r.value))
        for r in read_sealed_events(settings)
        if r.key is not None and r.key.startswith(b"tracevault.contested")
    ]
    assert any(json.loads(e.request)["run_id"] == rid for e in contested), contested


def _raw_of(sealed_value: bytes | None) -> bytes:
    assert sealed_value is not None
    return decode_sealed(sealed_value).raw


def test_forged_agent_id_with_a_key_allowed_only_for_another_agent_fails(
    settings: Settings, agent_key: Ed25519Signer, log_vkey: str, tmp_path: Path
) -> None:
    """A key the deployment allows for refund-bot records claiming payroll-bot: refused."""
    rid = "run-forged-agent-id"
    with sequencer_running(settings) as (_seq, errors):
        publisher = Publisher(settings)
        try:
            with _recorder(
                settings, publisher, rid, agent_id="payroll-bot", agent_key=agent_key
            ) as edges:
                edges.tool("refund", {"step": 1})
                edges.finish("paid")
            assert publisher.flush(30)
        finally:
            publisher.close()
        wait_sealed(settings, rid)
        assert not errors, errors
    pair = f"refund-bot={agent_key.verifier.vkey}"
    code, out = _verify(settings, log_vkey, rid, "--from", "topic", "--agent-key", pair)
    assert code == 1 and out["seq"] == 0, out
    assert "'payroll-bot'" in out["error"] and "'refund-bot'" in out["error"], out
    # no evidence bundle is made of it even where no agent key is trusted: export verifies
    # first, and the sequencer's contested record, sealed in the log, fails the run
    res = _export(settings, log_vkey, rid, tmp_path / "bundle")
    assert res.exit_code == 1 and "contested record" in res.output, res.output
    assert "may not record as agent_id 'payroll-bot'" in res.output, res.output
    # the genuine agent's own run, same key, verifies; a keyless one claiming refund-bot fails
    good, legacy = "run-genuine", "run-legacy"
    with sequencer_running(settings) as (_seq, errors):
        publisher = Publisher(settings)
        try:
            with _recorder(settings, publisher, good, agent_key=agent_key) as edges:
                edges.tool("refund", {"step": 1})
                edges.finish("ok")
            with _recorder(settings, publisher, legacy) as edges:
                edges.finish("ok")
            assert publisher.flush(30)
        finally:
            publisher.close()
        wait_sealed(settings, good)
        wait_sealed(settings, legacy)
    code, out = _verify(settings, log_vkey, good, "--from", "topic", "--agent-key", pair)
    assert code == 0 and out["ok"], out
    assert any(c.startswith("I identity") for c in out["checks"]), out
    code, out = _verify(settings, log_vkey, legacy, "--from", "topic", "--agent-key", pair)
    assert code == 1 and out["seq"] == 0 and "carries no agent signature" in out["error"], out
