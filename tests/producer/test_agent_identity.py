"""Agent identity, producer side: the note format and the chain the Recorder signs.

The Recorder's notes are read back from the real ``raw`` topic and checked against the chain
computed over the exact bytes there: what it signed is what it wrote.
"""

from __future__ import annotations

import base64
import json
import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner
from confluent_kafka import Consumer, TopicPartition

from tracevault.chain import genesis, link
from tracevault.cli import tracevault
from tracevault.config import Settings, load_settings
from tracevault.errors import ConfigError, LogError
from tracevault.producer import Publisher, Recorder
from tracevault.schemas import decode_event
from tracevault.transparency import (
    ATTEST_ATTRIBUTE,
    ATTEST_MARK,
    AgentKeys,
    AgentNote,
    Ed25519Signer,
    load_agent_signer,
    open_agent_note,
    parse_vkey,
    sign_agent_note,
)


def test_note_round_trips_and_says_what_it_covers() -> None:
    key = Ed25519Signer.generate("a.example")
    p = [genesis("r-1")]
    for raw in (b"zero", b"one"):
        p.append(link(p[-1], raw))
    note = AgentNote("r-1", 1, p[-1], 0, b"".join(p))
    signed = sign_agent_note(key, note)
    back, sig, msg = open_agent_note(signed)
    assert back == note
    assert (sig.name, sig.key_id) == (key.name, key.key_id)
    assert key.verifier.verify(msg, sig.signature)
    assert back.covers == range(0, 2)
    assert back.around(1) == (p[1], p[2])
    assert signed.startswith("tracevault/agent/v1\nrun r-1\nseq 1\n")
    # an altered text no longer verifies with the same signature
    forged = signed.replace("run r-1", "run r-2")
    _, sig2, msg2 = open_agent_note(forged)
    assert not key.verifier.verify(msg2, sig2.signature)


@pytest.mark.parametrize(
    "text",
    [
        "tracevault/agent/v2\nrun r\nseq -1\nhash {h}\nhashes 0 {h}\n",
        "tracevault/agent/v1\nrun r\nseq x\nhash {h}\nhashes 0 {h}\n",
        "tracevault/agent/v1\nrun r\nseq -1\nhash AAAA\nhashes 0 {h}\n",
        "tracevault/agent/v1\nrun r\nseq 0\nhash {h}\nhashes 0 {h}\n",  # one hash short
        "tracevault/agent/v1\nrun r\nseq -1\nhash {h}\nhashes 0 {o}\n",  # last != hash
        "tracevault/agent/v1\nrun r\nseq -1\nhash {h}\n",
    ],
)
def test_malformed_notes_are_refused(text: str) -> None:
    h, o = (base64.b64encode(bytes([b]) * 32).decode() for b in (0, 1))
    with pytest.raises(LogError):
        AgentNote.parse(text.format(h=h, o=o))
    AgentNote.parse(f"tracevault/agent/v1\nrun r\nseq -1\nhash {h}\nhashes 0 {h}\n")


def test_agent_keys_map_ids_to_vkeys_and_refuse_bad_settings(tmp_path: Path) -> None:
    a, b = Ed25519Signer.generate("a.example"), Ed25519Signer.generate("b.example")
    keys = AgentKeys.from_setting(json.dumps({"bot-a": [a.verifier.vkey]}))
    assert keys.allows("bot-a", a.verifier) and not keys.allows("bot-b", a.verifier)
    more = keys.merged(AgentKeys.from_pairs([f"bot-b={b.verifier.vkey}"]))
    assert more.allows("bot-b", b.verifier) and more.agents_of(a.verifier) == ["bot-a"]
    f = tmp_path / "agents.json"
    f.write_text(json.dumps({"bot-a": [a.verifier.vkey]}))
    assert AgentKeys.from_setting(f"@{f}").allows("bot-a", a.verifier)
    for bad in ("not json", '{"bot-a": "one"}', '{"bot-a": ["x+y+z"]}'):
        with pytest.raises(ConfigError):
            AgentKeys.from_setting(bad)
    with pytest.raises(ConfigError, match="AGENT_ID=VKEY"):
        AgentKeys.from_pairs([a.verifier.vkey.replace("=", "")])


def test_keys_generate_type_agent_writes_a_0600_key_the_settings_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "agent.key"
    res = CliRunner().invoke(
        tracevault, ["keys", "generate", "--type", "agent", "--name", "bot.example",
                     "--out", str(out), "--json"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    shown = json.loads(res.output)
    assert shown["type"] == "agent"
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    signer = load_agent_signer(out)
    assert parse_vkey(shown["vkey"]) == signer.verifier
    os.chmod(out, 0o644)
    with pytest.raises(ConfigError, match="chmod 600"):
        load_agent_signer(out)
    monkeypatch.setenv("TRACEVAULT_AGENT_KEY", signer.skey)
    monkeypatch.setenv("TRACEVAULT_AGENT_ATTEST_EVERY", "3")
    settings = load_settings()  # known variables, not refused
    assert settings.agent_attest_every == 3 and settings.agent_key is not None


def _raws(settings: Settings, run_id: str, count: int) -> list[bytes]:
    consumer = Consumer(
        settings.kafka_config(**{"group.id": f"t-{run_id}", "enable.auto.commit": False})
    )
    try:
        consumer.assign([TopicPartition(settings.topics.raw, 0, 0)])
        out: list[bytes] = []
        for _ in range(200):
            for msg in consumer.consume(100, timeout=0.2):
                if msg.error() is None and msg.key() == run_id.encode():
                    out.append(msg.value())
            if len(out) >= count:
                return out
        return out
    finally:
        consumer.close()


def test_recorder_signs_the_chain_of_the_exact_bytes_it_wrote(
    settings_factory: Callable[..., Settings],
) -> None:
    settings = settings_factory(partitions=1, agent_attest_every=4)
    key = Ed25519Signer.generate("bot.example")
    rid = "run-attest-unit"
    publisher = Publisher(settings)
    try:
        rec = Recorder(
            publisher=publisher, agent_id="bot", agent_version="1", run_id=rid,
            tools={"t": lambda a: a}, input={"x": 1}, agent_key=key,
        )  # fmt: skip
        with rec as edges:
            for i in range(9):  # values past 2,048 bytes are hashed in pieces (_GIL_FREE)
                edges.tool("t", {"i": i, "pad": "x" * (1000 * i)})
            edges.finish("done")
        assert publisher.flush(30)
    finally:
        publisher.close()
    raws = _raws(settings, rid, 11)
    assert len(raws) == 11
    assert max(len(raw) for raw in raws) > 3 * 2048
    chain = [genesis(rid)]
    for raw in raws:
        chain.append(link(chain[-1], raw))
    carriers = [i for i, raw in enumerate(raws) if ATTEST_MARK in raw]
    # RUN_STARTED, every 4 events, and RUN_FINISHED: not every event
    assert carriers == [0, 4, 8, 10]
    assert rec.attestor is not None and rec.attestor.notes == 4
    prev_carrier = 0
    for k in carriers:
        note, sig, msg = open_agent_note(decode_event(raws[k]).attributes[ATTEST_ATTRIBUTE])
        assert key.verifier.verify(msg, sig.signature)
        assert (note.run_id, note.seq, note.chain_hash) == (rid, k - 1, chain[k])
        if k:
            assert note.covers == range(prev_carrier, k)
            assert all(note.around(i) == (chain[i], chain[i + 1]) for i in note.covers)
        prev_carrier = k
    # events without a note carry no attestation attribute at all
    assert all(ATTEST_ATTRIBUTE not in decode_event(raws[i]).attributes for i in (1, 2, 3))
