"""Check I (agent identity) on runs made as the Recorder's attestor makes them, then altered
as a writer of ``raw`` could: each altered seq is named, a tail no note covers too."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from tests.conftest import NOW_US
from tracevault.chain import genesis, link
from tracevault.errors import ChainError
from tracevault.producer._attest import Attestor
from tracevault.replayer.load._identity import SEQUENCER_AGENT_ID, _last_note, check_identity
from tracevault.schemas import AgentInfo, EventKind, TraceEvent, canonical_json, encode_event
from tracevault.transparency import AgentKeys, Ed25519Signer

RUN = "run-identity"
KEY = Ed25519Signer.generate("bot.agents.example")
EVIL = Ed25519Signer.generate("evil.agents.example")
AGENTS = AgentKeys({"bot": [KEY.verifier], "evil": [EVIL.verifier]})


def _event(
    seq: int, last: int, agent: str = "bot", attrs: dict[str, str] | None = None
) -> TraceEvent:
    kind = EventKind.RUN_STARTED if seq == 0 else EventKind.RUN_FINISHED if seq == last else (
        EventKind.TOOL_CALL
    )  # fmt: skip
    return TraceEvent(
        run_id=RUN, seq=seq, kind=kind, at=NOW_US + seq,
        agent=AgentInfo(agent, "1", "h", "python", "0"),
        request=canonical_json({"step": seq}), response=canonical_json(None),
        attributes=attrs or {},
    )  # fmt: skip


def _signed(n: int, key: Ed25519Signer = KEY, every: int = 4) -> list[bytes]:
    """A finished run of ``n`` events as a Recorder with ``key`` writes it."""

    def encode(f: Any) -> bytes:
        return encode_event(_event(f[0], n - 1, attrs=dict(f[10] or {})))

    att = Attestor(RUN, encode, key, every=every, interval_s=1e9)
    return [att.encode_fields((s, _event(s, n - 1).kind, *(None,) * 8, {}, None)) for s in range(n)]  # type: ignore[arg-type]


def _check(raws: list[bytes], *, finished: bool = True, agents: AgentKeys | None = AGENTS) -> Any:
    hashes, h = [], genesis(RUN)
    for raw in raws:
        h = link(h, raw)
        hashes.append(h)
    kinds = [
        "RUN_FINISHED" if finished and i == len(raws) - 1 else "TOOL_CALL" for i in range(len(raws))
    ]
    return check_identity(RUN, raws, hashes, kinds, agents, finished=finished)


def test_the_genuine_run_passes_with_the_identity_check() -> None:
    checks, warnings, provenance = _check(_signed(11))
    assert checks and checks[0].startswith("I identity") and warnings == []
    assert provenance == "verified"


def test_an_event_written_by_another_producer_is_named_by_seq() -> None:
    raws = _signed(11)
    raws[3] = encode_event(_event(3, 10, attrs={"refund": "approved"}))  # other bytes
    with pytest.raises(ChainError, match=r"seq\(s\) 3 of run") as exc:
        _check(raws)
    assert exc.value.seq == 3
    raws[5] = encode_event(_event(5, 10, agent="evil"))  # and one claiming another agent
    with pytest.raises(ChainError, match=r"seq\(s\) 3, 5 of run"):
        _check(raws)


def test_a_note_by_another_key_is_named() -> None:
    raws = _signed(11)
    evil = _signed(11, key=EVIL)
    raws[4] = evil[4]  # a note, validly signed, by a key the run was not started under
    with pytest.raises(ChainError, match=r"seq\(s\) 4 .*evil.agents.example"):
        _check(raws)


def test_a_forged_tail_no_note_covers_fails_a_finished_run_and_warns_an_open_one() -> None:
    raws = _signed(11)
    raws[10] = encode_event(_event(10, 10))  # RUN_FINISHED written by someone else, unsigned
    with pytest.raises(ChainError, match=r"seq\(s\) 9, 10 .*covered by no signature"):
        _check(raws)
    _checks, warnings, _ = _check(raws[:10], finished=False)
    assert "seq(s) 9 are not yet covered" in warnings[0]


def test_seq_0_must_be_signed_by_a_key_allowed_for_the_agent_id() -> None:
    with pytest.raises(ChainError, match="may record only as 'evil'"):
        _check(_signed(2, key=EVIL))  # agent_id 'bot', signed with evil's key
    with pytest.raises(ChainError, match="no trusted agent vkey"):
        _check(_signed(3), agents=AgentKeys({"bot": [EVIL.verifier]}))


def test_an_unsigned_run_fails_where_its_agent_is_keyed_or_not_authorised() -> None:
    """Provenance is required: no note under a keyed agent_id is an unsigned claim, seqs
    named; an agent_id no trusted key may record as is not authorised."""
    unsigned = [encode_event(_event(s, 2)) for s in range(3)]
    with pytest.raises(ChainError, match=r"claims agent_id 'bot', which the .* key.*seqs 0\.\.2"):
        _check(unsigned)
    with pytest.raises(ChainError, match="'bot', which no trusted agent vkey may record as"):
        _check(unsigned, agents=AgentKeys({"other": [EVIL.verifier]}))
    # "*" keys every agent id the list does not name: an unsigned 'bot' run is a claim too
    with pytest.raises(ChainError, match="which the deployment's agent vkeys key"):
        _check(unsigned, agents=AgentKeys({"*": [KEY.verifier]}))
    assert _check(_signed(3), agents=AgentKeys({"*": [KEY.verifier]}))[2] == "verified"
    # ... but not one it does name: evil's key may not record as 'bot' through "*"
    with pytest.raises(ChainError, match="may record only as"):
        _check(
            _signed(3, key=EVIL),
            agents=AgentKeys({"*": [KEY.verifier], "bot": [KEY.verifier], "x": [EVIL.verifier]}),
        )


def test_without_agent_vkeys_provenance_is_unverified_unless_waived() -> None:
    unsigned = [encode_event(_event(s, 2)) for s in range(3)]
    checks, warnings, provenance = _check(unsigned, agents=None)
    assert (checks, provenance) == ([], "unverified") and "no agent vkey" in warnings[0]
    assert _check(_signed(3), agents=None)[2] == "unverified"
    raws, hashes, kinds = _columns(unsigned)
    got = check_identity(RUN, raws, hashes, kinds, None, finished=True, required=False)
    assert got[2] == "not checked" and "--no-agent-check" in got[1][0]
    unsigned[1] = encode_event(_event(1, 2, agent="evil"))
    with pytest.raises(ChainError, match="claim agent_id 'evil'"):
        _check(unsigned, agents=None)


def test_a_run_recorded_before_agent_identity_says_so_by_name() -> None:
    """TraceEvent v1 (before identity) with no note: never "verified", with or without keys."""
    from tracevault.schemas import Codec, default_schemas

    v1 = Codec("TraceEvent", default_schemas(), reader_version=1)
    old = [
        v1.encode({k: v for k, v in _event(s, 2).to_avro().items() if k != "interleave"})
        for s in range(3)
    ]
    for agents in (AGENTS, None):
        checks, warnings, provenance = _check(old, agents=agents)
        assert provenance == "recorded before agent identity" and checks == []
        assert "recorded before agent identity" in warnings[0]
    raws, hashes, kinds = _columns(old)
    got = check_identity(RUN, raws, hashes, kinds, AGENTS, finished=True, required=False)
    assert got[2] == "not checked (recorded before agent identity)"


def _columns(raws: list[bytes]) -> tuple[list[bytes], list[bytes], list[str]]:
    hashes, h = [], genesis(RUN)
    for raw in raws:
        h = link(h, raw)
        hashes.append(h)
    return raws, hashes, ["TOOL_CALL"] * (len(raws) - 1) + ["RUN_FINISHED"]


def test_a_chain_that_differs_where_no_digest_does_fails_and_the_sequencer_id_is_pinned() -> None:
    from tracevault.services.sequencer import GAP_AGENT_ID

    assert SEQUENCER_AGENT_ID == GAP_AGENT_ID
    raws = _signed(11)
    hashes, h = [], genesis(RUN)
    for raw in raws:
        h = link(h, raw)
        hashes.append(h)
    hashes[7] = hashes[9] = b"\x00" * 32  # a sealed chain that is not the producer's
    kinds = ["TOOL_CALL"] * 10 + ["RUN_FINISHED"]
    with pytest.raises(ChainError, match=r"though seqs 4\.\.7 link as its hashes say"):
        check_identity(RUN, raws, hashes, kinds, AGENTS, finished=True)


def test_a_gap_marker_in_a_signed_run_is_no_identity_failure() -> None:
    raws = _signed(11)
    gap = _event(5, 10)
    raws[5] = encode_event(
        dataclasses.replace(
            gap,
            kind=EventKind.GAP,
            agent=dataclasses.replace(gap.agent, agent_id=SEQUENCER_AGENT_ID),
        )
    )
    hashes, h = [], genesis(RUN)
    for raw in raws:
        h = link(h, raw)
        hashes.append(h)
    kinds = ["TOOL_CALL"] * 5 + ["GAP"] + ["TOOL_CALL"] * 4 + ["RUN_FINISHED"]
    checks, warnings, _ = check_identity(RUN, raws, hashes, kinds, AGENTS, finished=True)
    assert checks and warnings == []


@pytest.mark.parametrize("where", [0, 4095, 4096, 9000, 9999])
def test_the_last_note_is_found_past_the_chunked_search(where: int) -> None:
    """``_last_note`` rules a run out a chunk of joined bytes at a time; a note anywhere, on
    either side of a chunk's edge, is still the one found, and a run without one has none."""
    plain = [encode_event(_event(s, 9999)) for s in range(10_000)]
    assert _last_note(plain) is None
    signed = _signed(2)
    raws = [*plain]
    raws[where] = signed[0]  # seq 0's raw, which carries a note
    assert _last_note(raws) == where
    raws[min(where + 3, 9999)] = signed[1]  # RUN_FINISHED's note, later
    assert _last_note(raws) == min(where + 3, 9999)
