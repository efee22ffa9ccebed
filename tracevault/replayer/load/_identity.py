"""Check I (agent identity): every sealed event of a run was written by the key that started it.

The Recorder of an agent with a key signs its run's chain in RUN_STARTED, every N events or
T seconds, and in RUN_FINISHED (docs/identity.md). Here, with the deployment's trusted agent
vkeys (``agent_vkeys``, ``--agent-key AGENT_ID=VKEY``):

- seq 0 carries a note over the genesis, signed by a trusted key that the run's ``agent_id``
  is allowed; that key is the run's key;
- every later note is by the run's key, for this run and the seq before its event; where its
  chain hash is the sealed chain's, every event before it is the producer's; where it is not,
  the producer's own chain hashes in the note name each seq whose sealed bytes it did not
  write (raw ``i`` is the producer's when ``link(P_{i-1}, raw_i) == P_i``);
- every event claims the run's ``agent_id``;
- an event no note covers is named: a finished run fails, an unfinished one is warned about
  (its tail is signed by the next note).

The work, for a run its producer wrote alone, is two signature checks (seq 0 and the last
note, whose chain hash then vouches for every byte before it); only where that fails is every
note checked, and only where a chain hash differs is one SHA-256 taken per event of its stretch.
Provenance is required, like the log key (docs/identity.md, "What verify checks"): a run
with no note whose ``agent_id`` the deployment keys, or that no trusted key may record as,
fails; without any trusted agent vkey provenance is ``unverified`` (the report is not a pass)
unless the caller waives the check (``--no-agent-check``). A run written with the TraceEvent
schema that predates agent identity says so by name, never ``verified``.
"""

from __future__ import annotations

from collections.abc import Sequence

from tracevault.chain import genesis, link
from tracevault.errors import LogError, SchemaError
from tracevault.replayer.load.checks import fail
from tracevault.schemas import EventKind, decode_event, read_long
from tracevault.transparency import (
    ATTEST_ATTRIBUTE,
    ATTEST_MARK,
    CONTESTED_PREFIX,
    AgentKeys,
    Ed25519Verifier,
    open_agent_note,
)

__all__ = [
    "IDENTITY_CHECK",
    "carries_note",
    "LEGACY",
    "NOT_CHECKED",
    "SEQUENCER_AGENT_ID",
    "UNVERIFIED",
    "VERIFIED",
    "check_identity",
]

IDENTITY_CHECK = "I identity: every event was written by the agent key that started the run"
_GAP = EventKind.GAP.value
#: The agent id of the markers the sequencer seals itself (GAP, the idle close): not another
#: agent's claim. The tools read no service, so the sequencer's constant is spelled here too
#: (tests/replayer/test_identity.py pins the two equal).
SEQUENCER_AGENT_ID = "tracevault-sequencer"
_SEQUENCER_CHECK = (
    "I identity: a record the sequencer wrote itself (its run id is refused from producers)"
)
#: The report's ``provenance``: who wrote the run's events was checked and holds ...
VERIFIED = "verified"
#: ... could not be checked (no trusted agent vkey): not a pass, like a missing log key ...
UNVERIFIED = "unverified"
#: ... was not checked, knowingly (``--no-agent-check``) ...
NOT_CHECKED = "not checked"
#: ... or the run was written before agent identity existed (schema v1, no note).
LEGACY = "recorded before agent identity"
#: The TraceEvent schema that predates agent identity (v1): bytes 2..10 of an encoded event.
_V1 = bytes.fromhex("ec2e1f56534d0288")
_UNCHECKED = (
    "agent identity not checked (--no-agent-check): who wrote the run's events is not "
    "proven; anyone who can write raw could have"
)


def _agent_id(raw: bytes) -> str | None:
    """The ``agent.agent_id`` of an encoded TraceEvent (v1 and v2 start alike), or None."""
    try:
        n, pos = read_long(raw, 10)  # past C3 01 and the fingerprint: the run id
        _seq, pos = read_long(raw, pos + n)
        _kind, pos = read_long(raw, pos)
        _at, pos = read_long(raw, pos)
        n, pos = read_long(raw, pos)
        return raw[pos : pos + n].decode("utf-8")
    except (ValueError, IndexError, UnicodeDecodeError):
        return None


def _names(seqs: Sequence[int]) -> str:
    shown = ", ".join(str(s) for s in seqs[:20])
    return shown + (f" (+{len(seqs) - 20} more)" if len(seqs) > 20 else "")


def _note_at(raw: bytes) -> str | None:
    """The agent note event ``raw`` carries, or None (the byte search first: it is cheap)."""
    if ATTEST_MARK not in raw:
        return None
    try:
        return decode_event(raw, check_json=False).attributes.get(ATTEST_ATTRIBUTE)
    except SchemaError:
        return None  # checks 1-6 read every event: not reached


_CHUNK = 4096  # events searched at once for a note's mark


def carries_note(raws: Sequence[bytes]) -> bool:
    """Whether any event of the run carries an agent note: check E names a record with none
    as unsigned before check I says why a signed one is not the operator's."""
    return _last_note(raws) is not None


def _last_note(raws: Sequence[bytes]) -> int | None:
    """The index of the last event that carries an agent note, or None.

    Most runs carry none (recorded without an agent key): a search of the joined bytes, a
    chunk of events at a time, rules them out in one pass in C instead of one call per event
    (0.12 s of a 100,000-event verify). A mark found in a chunk (or across two events' bytes)
    sends that chunk, and every later one, to the event-by-event search from the end.
    """
    n = len(raws)
    first = None
    for start in range(0, n, _CHUNK):
        if ATTEST_MARK in b"".join(raws[start : start + _CHUNK]):
            first = start
            break
    if first is None:
        return None
    return next((i for i in range(n - 1, first - 1, -1) if _note_at(raws[i]) is not None), None)


def check_identity(
    run_id: str,
    raws: Sequence[bytes],
    hashes: Sequence[bytes],
    kinds: Sequence[str],
    agents: AgentKeys | None,
    *,
    finished: bool,
    agent_ids: Sequence[str | None] | None = None,
    required: bool = True,
) -> tuple[list[str], list[str], str]:
    """(checks, warnings, provenance) for the run; raises :class:`ChainError` naming the seqs.

    ``agent_ids`` are the events' ``agent.agent_id`` where the caller decoded them already
    (a rebuild); else they are read from the bytes. ``required`` False: the caller waived the
    check (``--no-agent-check``). The common case costs two signature checks: seq 0's note
    and the last one, whose chain hash is the sealed chain's (then every event before it,
    earlier notes included, is the producer's own bytes).
    """
    if agent_ids is None:
        agent_ids = [_agent_id(raw) for raw in raws]
    run_agent = agent_ids[0]
    mixed = [
        i
        for i, a in enumerate(agent_ids)
        if a != run_agent and kinds[i] != _GAP and a != SEQUENCER_AGENT_ID
    ]
    last = _last_note(raws)
    if mixed and (last is None or not agents):
        raise fail(
            "I identity",
            mixed[0],
            None,
            f"seq(s) {_names(mixed)} claim agent_id {agent_ids[mixed[0]]!r}, the run's seq 0 "
            f"claims {run_agent!r}: one run is one agent's",
        )
    if run_agent == SEQUENCER_AGENT_ID and run_id.startswith(CONTESTED_PREFIX) and not mixed:
        # the sequencer's own record: its run id is refused from producers, the log key signs it
        return [_SEQUENCER_CHECK], [], VERIFIED
    if not agents or (last is None and raws[0][2:10] == _V1):
        return _unchecked(run_id, raws, last, agents, required=required)
    if last is None:
        raise fail("I identity", 0, None, _unsigned(run_id, run_agent, agents, len(raws)))
    run_key = _run_key(run_id, _note_at(raws[0]), agents, run_agent)
    upto, covered, bad = _coverage(run_id, raws, hashes, kinds, run_key, last)
    for i in mixed:
        bad.setdefault(i, f"it claims agent_id {agent_ids[i]!r}, the run's is {run_agent!r}")
    if bad:
        first = min(bad)
        raise fail(
            "I identity",
            first,
            None,
            f"seq(s) {_names(sorted(bad))} of run {run_id} were not written by the run's "
            f"producer (agent {run_agent!r}, key {run_key.name}+{run_key.key_id.hex()}); "
            f"seq {first}: {bad[first]}",
        )
    loose = [i for i in range(upto, len(raws)) if i not in covered and kinds[i] != _GAP]
    checks = [IDENTITY_CHECK]
    if loose and finished:
        raise fail(
            "I identity",
            loose[0],
            None,
            f"seq(s) {_names(loose)} of run {run_id} are covered by no signature of the run's "
            f"agent key {run_key.name}: its producer's last note does not reach them",
        )
    if loose:
        return (
            checks,
            [
                f"seq(s) {_names(loose)} are not yet covered by the agent's signature (the run "
                "is unfinished: its next note or RUN_FINISHED signs them)"
            ],
            VERIFIED,
        )
    return checks, [], VERIFIED


def _unchecked(
    run_id: str,
    raws: Sequence[bytes],
    last: int | None,
    agents: AgentKeys | None,
    *,
    required: bool,
) -> tuple[list[str], list[str], str]:
    """No trusted agent vkey, or a run from before agent identity: not a pass unless waived."""
    if last is None and raws[0][2:10] == _V1:
        why = (
            f"run {run_id} was recorded before agent identity (TraceEvent v1, no agent "
            "signature): who wrote its events cannot be checked"
        )
        if required:
            return [], [why], LEGACY
        return [], [f"{why} (--no-agent-check)"], f"{NOT_CHECKED} ({LEGACY})"
    if not required:
        return [], [_UNCHECKED], NOT_CHECKED
    signed = "is signed by its agent" if last is not None else "carries no agent signature"
    return (
        [],
        [
            f"provenance unverified: the run {signed}, but no agent vkey is trusted "
            "(--agent-key AGENT_ID=VKEY or TRACEVAULT_AGENT_VKEYS); --no-agent-check accepts "
            "that knowingly"
        ],
        UNVERIFIED,
    )


def _unsigned(run_id: str, agent_id: str | None, agents: AgentKeys, n: int) -> str:
    """Why a run with no agent note fails where the deployment trusts agent vkeys."""
    seqs = "seq 0" if n == 1 else f"seqs 0..{n - 1}"
    if agent_id is not None and agents.keyed(agent_id):
        return (
            f"run {run_id} claims agent_id {agent_id!r}, which the deployment's agent vkeys "
            f"key, but carries no agent signature: {seqs} were not written by that agent"
        )
    return (
        f"run {run_id} claims agent_id {agent_id!r}, which no trusted agent vkey may record "
        f"as: the agent is not authorised (agent_vkeys); {seqs} are unsigned"
    )


def _coverage(  # noqa: PLR0917 - the run's columns, as check_identity has them
    run_id: str,
    raws: Sequence[bytes],
    hashes: Sequence[bytes],
    kinds: Sequence[str],
    run_key: Ed25519Verifier,
    last: int,
) -> tuple[int, set[int], dict[int, str]]:
    """(every seq below this is the producer's, these are too, these are not: why).

    The last note first: where it holds and its chain hash is the sealed one, that is all.
    Else every note, in order: where a chain hash differs, the producer's hashes name the seqs.
    """
    value = _note_at(raws[last])
    assert value is not None  # found so by the caller
    if last == 0 or (
        _bad_note(value, run_id, last, run_key) is None
        and open_agent_note(value)[0].chain_hash == hashes[last - 1]
    ):
        return last, {last}, {}
    bad: dict[int, str] = {}
    upto = 0
    covered: set[int] = {0}
    # a GAP marker (the producer's event never reached the sequencer) changes the chain from
    # its seq on: from there a chain mismatch alone names nothing, the producer's hashes do
    first_gap = next((i for i, k in enumerate(kinds) if k == _GAP), len(kinds))
    for j in range(1, last + 1):
        value = _note_at(raws[j])
        if value is None:
            continue
        why = _bad_note(value, run_id, j, run_key)
        if why is not None:
            bad[j] = why
            continue
        note = open_agent_note(value)[0]
        covered.add(j)
        if note.chain_hash == hashes[j - 1]:
            upto = j
            continue
        for i in note.covers:
            if i >= len(raws) or i < upto or i in covered or kinds[i] == _GAP:
                continue
            before, after = note.around(i)
            if link(before, raws[i]) == after:
                covered.add(i)
            else:
                bad.setdefault(
                    i,
                    f"its bytes are not those the run's agent key {run_key.name} signed for "
                    f"seq {i} in the note of seq {j}",
                )
        if not bad and first_gap >= j:
            # the chain differs from a point where it matched, yet every raw links as the
            # producer's hashes say (checks 1-6 make that a collision): never trust the stretch
            bad[note.first] = (
                f"the note of seq {j} signs a chain hash at seq {j - 1} that is not the "
                f"sealed one, though seqs {note.first}..{j - 1} link as its hashes say"
            )
    return upto, covered, bad


def _run_key(
    run_id: str, note0: str | None, agents: AgentKeys, agent_id: str | None
) -> Ed25519Verifier:
    """The key that started the run: seq 0's note over the genesis, trusted for its agent."""
    if note0 is None:
        raise fail(
            "I identity",
            0,
            None,
            f"run {run_id} carries agent signatures, but its seq 0 has none: seq 0 was not "
            "written by the agent that signs the rest",
        )
    try:
        note, sig, msg = open_agent_note(note0)
    except LogError as exc:
        raise fail("I identity", 0, None, f"seq 0's agent note is malformed: {exc}") from None
    key = agents.key(sig)
    if key is None:
        raise fail(
            "I identity",
            0,
            None,
            f"run {run_id} was started under agent key {sig.name}+{sig.key_id.hex()}, which "
            "no trusted agent vkey is (--agent-key, TRACEVAULT_AGENT_VKEYS)",
        )
    if not key.verify(msg, sig.signature) or note.run_id != run_id or note.seq != -1:
        raise fail("I identity", 0, None, f"seq 0's note does not verify for run {run_id}")
    if note.chain_hash != genesis(run_id):
        raise fail("I identity", 0, None, "seq 0's note does not sign the run's genesis")
    if agent_id is None or not agents.allows(agent_id, key):
        allowed = ", ".join(repr(a) for a in agents.agents_of(key)) or "none"
        raise fail(
            "I identity",
            0,
            None,
            f"run {run_id} claims agent_id {agent_id!r}, but its agent key {key.name} may "
            f"record only as {allowed}",
        )
    return key


def _bad_note(value: str, run_id: str, seq: int, run_key: Ed25519Verifier) -> str | None:
    """Why the note in event ``seq`` is not the run's producer's, or None when it is."""
    try:
        note, sig, msg = open_agent_note(value)
    except LogError as exc:
        return f"its agent note is malformed ({exc})"
    if (sig.name, sig.key_id) != (run_key.name, run_key.key_id):
        return (
            f"its note is signed by {sig.name}+{sig.key_id.hex()}, the run was started under "
            f"{run_key.name}+{run_key.key_id.hex()}"
        )
    if not run_key.verify(msg, sig.signature):
        return "its note's signature does not verify"
    if note.run_id != run_id or note.seq != seq - 1:
        return f"its note is for {note.run_id} seq {note.seq}, not this run's seq {seq - 1}"
    return None
