"""The sequencer's check of agent notes as they are sealed (pure rules; the live hijack is in
tests/attacks/test_agent_identity.py): a matching note is quiet, every mismatch contests."""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import Any

import pytest
from confluent_kafka import Message

from tests.conftest import NOW_US
from tests.native import extension
from tests.replayer.test_identity import EVIL, KEY, RUN, _event, _signed
from tests.services.sequencer.test_rules import PARTS, RAW, feed
from tracevault.chain import genesis, link
from tracevault.config import Settings
from tracevault.heads import Head
from tracevault.kafka import partition_for
from tracevault.producer._attest import Attestor
from tracevault.schemas import decode_event, encode_event
from tracevault.services.sequencer import BatchOutput, DlqReason, RunBook
from tracevault.services.sequencer._loop import Sequencer
from tracevault.transparency import AgentKeys, Ed25519Signer


def _book(agents: AgentKeys) -> RunBook:
    def no_history(*_: Any) -> dict[int, bytes]:
        raise AssertionError("history must not be needed here")

    return RunBook(
        raw_topic=RAW, partitions=PARTS, sequencer_id="t", gap_timeout_us=1_000, max_gap=100,
        history=no_history, agents=agents,
    )  # fmt: skip


def _feed_all(b: RunBook, raws: list[bytes]) -> list[Any]:
    outs = []
    for i, raw in enumerate(raws):
        out = feed(b, RUN, raw, offset=i)
        assert not out.dlq, out.dlq
        outs.append(out)
    return outs


def _contested(outs: list[Any]) -> list[dict[str, Any]]:
    return [
        json.loads(decode_event(s.raw).request)
        for out in outs
        for s in out.sealed
        if s.run.run_id.startswith("tracevault.contested:") and s.seq == 0
    ]


def test_a_genuine_signed_run_is_sealed_without_a_contest() -> None:
    outs = _feed_all(_book(AgentKeys({"bot": [KEY.verifier]})), _signed(11))
    assert sum(o.contested for o in outs) == 0 and _contested(outs) == []
    assert sum(len(o.sealed) for o in outs) == 11


@pytest.mark.parametrize(
    ("case", "why"),
    [
        ("hijack", "not the sealed one"),
        ("other_key", "the run was started under"),
        ("untrusted", "which agent_vkeys does not list"),
        ("not_allowed", "may not record as agent_id 'bot'"),
    ],
)
def test_a_note_that_does_not_match_its_run_contests_it(
    case: str, why: str, caplog: pytest.LogCaptureFixture
) -> None:
    agents = AgentKeys({"bot": [KEY.verifier], "evil": [EVIL.verifier]})
    raws = _signed(11)
    if case == "hijack":  # someone else's seq 3 sealed first: the note at 4 no longer matches
        raws[3] = encode_event(_event(3, 10, attrs={"refund": "approved"}))
    elif case == "other_key":
        raws[4] = _signed(11, key=EVIL)[4]
    elif case == "untrusted":
        agents = AgentKeys({"bot": [KEY.verifier]})
        raws[4] = _signed(11, key=EVIL)[4]
    else:
        raws = _signed(11, key=EVIL)  # evil's key, claiming agent 'bot' from seq 0
    caplog.set_level(logging.ERROR)
    b = _book(agents)
    outs = _feed_all(b, raws)
    contested = _contested(outs)
    assert contested and contested[0]["run_id"] == RUN and why in contested[0]["reason"]
    assert sum(o.contested for o in outs) >= 1
    assert any("ALERT" in r.getMessage() and "contested" in r.getMessage() for r in caplog.records)
    # the agent's events are all sealed still: the chain keeps every seq
    assert sum(1 for o in outs for s in o.sealed if s.run.run_id == RUN) == 11


def test_a_producer_may_not_write_the_sequencers_contested_records() -> None:
    b = _book(AgentKeys({}))
    rid = "tracevault.contested:abc:0"
    raw = encode_event(dataclasses.replace(_event(0, 1), run_id=rid))
    out = feed(b, rid, raw)
    assert [d.reason for d in out.dlq] == [DlqReason.INVALID] and not out.sealed


def test_the_c_path_leaves_an_event_carrying_a_note_to_these_rules() -> None:
    """``_cseal.take`` seals a plain next event itself and declines one that carries a note
    (the ``tracevault.attest`` attribute key), whatever its kind, so it is checked here."""
    cseal = extension("tracevault.services.sequencer._cseal")
    s = Sequencer(
        Settings(topic_prefix="attest", partitions=PARTS),
        signer=Ed25519Signer.generate("t"),
        instance_id="attest-1",
    )
    assert s.step.native is not None, "the sequencer does not use its C path"
    raws = _signed(11)  # notes at 0, 4, 8 and 10
    book = s.step.book = _book(AgentKeys({"bot": [KEY.verifier]}))
    _feed_all(book, raws[:3])  # the run is open, its next seq is 3
    part = partition_for(RUN.encode(), PARTS)

    def msg(seq: int) -> Message:
        return Message(topic=RAW, partition=part, offset=seq, key=RUN.encode(), value=raws[seq])

    out = BatchOutput()
    ctx = (book.runs, out.sealed, out.touched, NOW_US, *s.step.native)
    assert cseal.take([msg(3), msg(4)], 0, ctx) == 1  # seq 3 sealed in C, seq 4 declined
    assert [r.seq for r in out.sealed] == [3]


def _for_another_run_at_seq_0() -> list[bytes]:
    """Bot's genuine run whose seq 0 is replaced by the seq 0 of bot's run "other-run" (its
    note names that run), re-posted under this run's id."""
    raws = _signed(11)
    other = Attestor("other-run", lambda f: encode_event(_event(f[0], 10, attrs=dict(f[10] or {}))),
                     KEY, every=4, interval_s=1e9)  # fmt: skip
    first = other.encode_fields((0, _event(0, 10).kind, *(None,) * 8, {}, None))  # type: ignore[arg-type]
    raws[0] = encode_event(dataclasses.replace(decode_event(first), run_id=RUN))
    return raws


def test_the_alerts_name_what_is_wrong_in_words_that_hold(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A note for another run names that run (not "seq -1, not seq -1"), and the later
    genuine notes of a run whose seq 0 note was contested say so (not "started without an
    agent key": it was started with one)."""
    caplog.set_level(logging.ERROR)
    outs = _feed_all(_book(AgentKeys({"bot": [KEY.verifier]})), _for_another_run_at_seq_0())
    reasons = [c["reason"] for c in _contested(outs)]
    assert reasons[0] == "its note is for another run, 'other-run' (seq -1)", reasons
    assert reasons[1:] and all("seq 0 note was contested" in r for r in reasons[1:]), reasons
    text = " ".join(r.getMessage() for r in caplog.records)
    assert "not seq -1" not in text and "started without an agent key" not in text


def test_a_run_whose_seq_0_carries_no_note_says_so() -> None:
    raws = _signed(11)
    plain = decode_event(raws[0])
    raws[0] = encode_event(dataclasses.replace(plain, attributes={}))
    outs = _feed_all(_book(AgentKeys({"bot": [KEY.verifier]})), raws)
    reasons = [c["reason"] for c in _contested(outs)]
    # seq 0 itself is an unsigned claim of a keyed agent_id (contested at once); every later
    # note is then contested as following a seq 0 that carried none, said as such
    assert reasons and "claims agent_id 'bot'" in reasons[0], reasons
    assert "an unsigned claim" in reasons[0], reasons
    assert len(reasons) > 1, reasons
    assert all(r.startswith("the run's seq 0 carried no agent note") for r in reasons[1:]), reasons


def _forged(seq: int) -> bytes:
    """An attacker's unsigned event at ``seq``, claiming the run's agent."""
    return encode_event(_event(seq, 10, attrs={"refund": "approved"}))


def _feed_seq(b: RunBook, raws: list[bytes], offset: int) -> list[BatchOutput]:
    outs = []
    for i, raw in enumerate(raws):
        out = feed(b, RUN, raw, offset=offset + i)
        b.check_coverage(out)
        outs.append(out)
    return outs


def test_a_signed_conflict_behind_a_flood_names_the_hijack_and_the_agents_events(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Seqs 3..9 taken by unsigned events: the agent's seq 3 is refused (no note: nothing
    proven yet), its seq 4 too, but that one's note over its own chain contradicts the
    sealed one, so the run is contested as hijacked at seq 3, naming the agent's 3 and 4."""
    caplog.set_level(logging.ERROR)
    genuine = _signed(11)  # notes at seqs 0, 4, 8 and 10
    b = _book(AgentKeys({"bot": [KEY.verifier]}))
    _feed_seq(b, genuine[:3], 0)
    assert not _contested(_feed_seq(b, [_forged(s) for s in range(3, 10)], 3))
    outs = _feed_seq(b, genuine[3:5], 10)
    assert [d.reason for o in outs for d in o.dlq] == [DlqReason.CONFLICT] * 2
    [record] = _contested(outs)
    assert record["run_id"] == RUN and record["seq"] == 3 and record["hijacked"] is True
    assert "was hijacked" in record["reason"] and "seqs 3..9" in record["reason"], record
    assert [g["seq"] for g in record["genuine"]] == [3, 4], record
    assert [g["raw"] for g in record["genuine"]] == [f"{RAW}[0]@10", f"{RAW}[0]@11"], record
    assert any("ALERT" in r.getMessage() and "hijacked" in r.getMessage() for r in caplog.records)
    # one record per hijack: the agent's later signed events add none
    assert not _contested(_feed_seq(b, genuine[5:], 12))


def test_a_conflict_whose_note_agrees_with_the_sealed_chain_proves_nothing() -> None:
    """A genuine note copied into another body at a sealed seq: the chain it signs is the
    sealed one, so no seq was forged, and the run is not named hijacked."""
    genuine = _signed(11)
    b = _book(AgentKeys({"bot": [KEY.verifier]}))
    _feed_seq(b, genuine[:6], 0)
    copy = decode_event(genuine[4])
    altered = encode_event(dataclasses.replace(copy, request=b'{"step":"other"}'))
    outs = _feed_seq(b, [altered], 6)
    assert [d.reason for o in outs for d in o.dlq] == [DlqReason.CONFLICT]
    assert not _contested(outs) and sum(o.contested for o in outs) == 0


def test_an_unsigned_claim_on_an_agent_keyed_only_through_the_star_entry_is_contested() -> None:
    unsigned = [encode_event(_event(s, 3)) for s in range(4)]
    outs = _feed_all(_book(AgentKeys({"*": [KEY.verifier]})), unsigned)
    [record] = _contested(outs)
    assert record["seq"] == 0 and "an unsigned claim" in record["reason"], record


def test_notes_that_stop_covering_a_run_are_contested_mid_run() -> None:
    """agent_attest_every 4: the event at seq 4 carries no note, so the run is contested
    when it is sealed, not at its RUN_FINISHED; a run signed as often is quiet."""
    b = _book(AgentKeys({"bot": [KEY.verifier]}))
    b.attest_every = 4
    assert not _contested(_feed_seq(b, _signed(11), 0))
    genuine = _signed(11)
    b = _book(AgentKeys({"bot": [KEY.verifier]}))
    b.attest_every = 4
    _feed_seq(b, genuine[:4], 0)
    outs = _feed_seq(b, [_forged(4)], 4)
    [record] = _contested(outs)
    assert record["seq"] == 4 and "stopped covering" in record["reason"], record
    assert "seqs 1..4" in record["reason"], record
    # once: the next unsigned events add no record until a note covers the run again
    assert not _contested(_feed_seq(b, [_forged(s) for s in range(5, 9)], 5))


def _restored(agents: AgentKeys, raws: list[bytes], upto: int) -> RunBook:
    """A sequencer restarted after sealing ``raws[:upto]`` at offsets 0..: it knows the run
    from its head only, and reads its sealed history (hashes, seq 0) when it needs it."""
    hashes, prev = {}, genesis(RUN)
    for s, raw in enumerate(raws[:upto]):
        hashes[s] = prev = link(prev, raw)
    read: list[tuple[int, int]] = []

    def history(run_id: str, partition: int, first: int, last: int) -> dict[int, bytes]:
        return dict(hashes)

    def facts(run_id: str, partition: int, first: int, last: int) -> Any:
        read.append((first, last))
        return (raws[0] if (run_id, first) == (RUN, 0) else None, frozenset())

    b = RunBook(raw_topic=RAW, partitions=PARTS, sequencer_id="t", gap_timeout_us=1_000,
                max_gap=100, history=history, agents=agents, facts=facts)  # fmt: skip
    b.restore([Head(RUN, upto, prev, False, partition_for(RUN, PARTS), 0, upto - 1)])
    b.facts_read = read  # type: ignore[attr-defined]
    return b


@pytest.mark.parametrize("then", ["its own key", "another key for the agent"])
def test_a_restored_run_holds_its_notes_to_the_key_of_its_sealed_seq_0(then: str) -> None:
    """After a restart a live run is known from its head only. Its next note is held to the
    key that signed its sealed seq 0 (read once, at the head's first offset), as in a
    sequencer that never restarted. Another key that agent_vkeys lets record as 'bot',
    carrying the run on over the genuine chain, is contested; the first note after the
    restart used to name the run's key, and it was sealed without a word."""
    agents = AgentKeys({"bot": [KEY.verifier, EVIL.verifier]})

    def encode(f: Any) -> bytes:
        return encode_event(_event(f[0], 10, attrs=dict(f[10] or {})))

    att = Attestor(RUN, encode, KEY, every=4, interval_s=1e9)
    fields: list[Any] = [(s, _event(s, 10).kind, *(None,) * 8, {}, None) for s in range(11)]
    raws = [att.encode_fields(f) for f in fields[:4]]
    if then != "its own key":
        att._signer = EVIL  # the same chain, signed from seq 4 on by another key
    raws += [att.encode_fields(f) for f in fields[4:]]
    b = _restored(agents, raws, 4)
    outs = _feed_seq(b, raws[4:], 4)
    assert not [d for o in outs for d in o.dlq]
    assert b.facts_read == [(0, 0)]  # type: ignore[attr-defined]
    contested = _contested(outs)
    if then == "its own key":
        assert contested == [] and sum(o.contested for o in outs) == 0
        return
    assert contested and contested[0]["run_id"] == RUN and contested[0]["seq"] == 4, contested
    assert "the run was started under bot.agents.example+" in contested[0]["reason"], contested
