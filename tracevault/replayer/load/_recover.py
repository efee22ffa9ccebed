"""A hijacked run's genuine events, read back from the DLQ and checked against its agent's notes.

When the sequencer names a run hijacked (docs/identity.md, "A hijack is named as one") its
contested record, sealed in the signed log, says where the agent's own events went: refused as
``conflict`` into ``<prefix>.dlq``, copied from the raw records it names, each with the SHA-256
of its bytes. The DLQ itself is not signed, and anyone who may write it can add records under
the run's key with any headers. So a DLQ copy is the agent's only when it checks:

1. the run's key is the one its sealed seq 0 was signed with, trusted for its ``agent_id``
   (check I's rule);
2. the agent's notes found among the copies (each signed by that key, for this run and the seq
   before its event) give the agent's own chain hashes ``P_i``; they must meet the sealed chain
   at the last seq before the forgery (the last genuine sealed seq);
3. from there, seq by seq, a copy is the agent's when ``link(P_{i-1}, raw_i) == P_i``; the last
   event, whose own bytes no note covers, when it carries the agent's note over ``P_{i-1}``;
4. every copy must also have the bytes the contested record pins (its ``sha256``): a forged
   body carrying a copied note is no one's but the attacker's.

The result is words for verify's message: the run as its agent recorded it is recoverable from
the DLQ (seqs a..b, verified against agent key K, with the DLQ offsets), or what does not check
(a copy altered, or none there: its DLQ offset and seq). Copies that do not check are set aside
by name, never used. Fail closed: without an agent vkey, or a DLQ that could not be read,
nothing is called recoverable.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field

from tracevault.chain import genesis, link
from tracevault.errors import ChainError, SchemaError
from tracevault.replayer._results import DlqCopy, LoadedRun
from tracevault.replayer.load._identity import _agent_id, _bad_note, _note_at, _run_key
from tracevault.schemas import decode_event
from tracevault.transparency import AgentKeys, AgentNote, Ed25519Verifier, open_agent_note

__all__ = ["Genuine", "recovery"]


@dataclass(frozen=True, slots=True)
class Genuine:
    """One of the agent's events the contested record names: seq, raw record, pinned bytes."""

    seq: int
    raw: str
    sha256: str | None = None


@dataclass(slots=True)
class _Walk:
    """The agent's chain hashes from its notes, and the copies by seq."""

    hashes: dict[int, bytes] = field(default_factory=dict)
    by_seq: dict[int, list[DlqCopy]] = field(default_factory=dict)
    clash: str | None = None


def recovery(
    run: LoadedRun, first: int, genuine: Sequence[Genuine], agents: AgentKeys | None
) -> str:
    """What the DLQ holds of the agent's own run from seq ``first`` (the first forged seq),
    in words for the hijack's failure message."""
    if run.source != "topic":
        return "the DLQ was not read (verify --from topic checks the agent's events there)"
    if not run.dlq_read:
        return "the DLQ could not be read: the agent's events there are not checked"
    if not agents:
        return (
            "the DLQ copies were not checked against the agent's notes (no trusted agent vkey: "
            "--agent-key, TRACEVAULT_AGENT_VKEYS)"
        )
    rows = run.records.rows
    if not rows or not 0 <= first <= len(rows):
        return f"the DLQ copies were not checked: seq {first} is not in the sealed run"
    try:
        key = _run_key(run.run_id, _note_at(rows[0]["raw"]), agents, _agent_id(rows[0]["raw"]))
    except ChainError as exc:
        return f"the DLQ copies were not checked: the run's key is not known ({exc})"
    named = f"{key.name}+{key.key_id.hex()}"
    base = rows[first - 1]["hash"] if first > 0 else genesis(run.run_id)
    walk = _gather(run, first, key)
    met = walk.hashes.get(first - 1)
    if walk.clash is not None:
        return f"the DLQ copies do not check: {walk.clash}"
    if met is not None and met != base:
        return (
            f"the DLQ copies do not check: the agent's notes there part from the sealed chain "
            f"before seq {first}, at or before seq {first - 1}"
        )
    pins = {g.seq: g.sha256 for g in genuine}
    good, set_aside = _follow(run, first, base, walk, pins, key)
    return _words(first, genuine, walk, good, set_aside, named)


def _gather(run: LoadedRun, first: int, key: Ed25519Verifier) -> _Walk:
    """Copies of the run from ``first`` on, by the seq their bytes say, and the agent's
    hashes from every note among them that is the run key's, for this run and seq."""
    walk = _Walk()
    for c in run.dlq_copies:
        if c.value is None:
            continue
        try:
            ev = decode_event(c.value, check_json=False)
        except SchemaError:
            continue
        if ev.run_id != run.run_id or ev.seq < first:
            continue
        walk.by_seq.setdefault(ev.seq, []).append(c)
        note = _note_of(c.value, run.run_id, ev.seq, key)
        if note is None:
            continue
        for i in range(note.first - 1, note.seq + 1):
            h = note.around(i + 1)[0] if i < note.seq else note.chain_hash
            if walk.hashes.setdefault(i, h) != h:
                walk.clash = f"two notes of the agent's key disagree on seq {i} ({c.dlq})"
    return walk


def _note_of(raw: bytes, run_id: str, seq: int, key: Ed25519Verifier) -> AgentNote | None:
    """The note ``raw`` carries when it is the run key's, for this run and ``seq - 1``."""
    value = _note_at(raw)
    if value is None or _bad_note(value, run_id, seq, key) is not None:
        return None
    return open_agent_note(value)[0]


def _follow(  # noqa: PLR0917 - the walk's state
    run: LoadedRun,
    first: int,
    base: bytes,
    walk: _Walk,
    pins: dict[int, str | None],
    key: Ed25519Verifier,
) -> tuple[dict[int, DlqCopy], list[str]]:
    """The agent's copies seq by seq from ``first`` (step 3), and the others, named."""
    good: dict[int, DlqCopy] = {}
    set_aside: list[str] = []
    prev, seq = base, first
    while True:
        want = walk.hashes.get(seq)
        pin = pins.get(seq)
        ok: list[DlqCopy] = []
        for c in walk.by_seq.get(seq, []):
            why = _why_not(c, run.run_id, seq, prev, want, pin, key)
            if why is None:
                ok.append(c)
            else:
                set_aside.append(f"seq {seq} at {c.dlq} (from {c.raw}): {why}")
        if not ok:
            break
        if want is None and pin is None:
            # the last event, its bytes pinned by nothing: its note vouches for the seqs
            # before it, not for itself
            set_aside.append(
                f"seq {seq} at {ok[0].dlq}: carries the agent's note, but its own bytes are "
                "covered by no signature and the contested record pins none"
            )
            break
        good[seq] = ok[0]
        if want is None:
            break  # the last note's own event: nothing vouches past it
        prev, seq = want, seq + 1
    for s in sorted(x for x in walk.by_seq if x > seq and x in pins):
        # past the break: named by the record, checked where the notes give both hashes
        before = walk.hashes.get(s - 1)
        for c in walk.by_seq[s]:
            why = (
                "not checked: no note of the agent's gives the hash before it"
                if before is None
                else _why_not(c, run.run_id, s, before, walk.hashes.get(s), pins[s], key)
            )
            set_aside.append(
                f"seq {s} at {c.dlq} (from {c.raw}): "
                + (why or f"its bytes check, but the agent's chain breaks before it at seq {seq}")
            )
    return good, set_aside


def _why_not(  # noqa: PLR0917 - one copy against the walk's state
    c: DlqCopy,
    run_id: str,
    seq: int,
    prev: bytes,
    want: bytes | None,
    pin: str | None,
    key: Ed25519Verifier,
) -> str | None:
    """Why the copy is not the agent's event ``seq``, or None when it is."""
    assert c.value is not None
    if want is not None:
        if link(prev, c.value) != want:
            return "altered: its bytes do not link as the agent's notes say"
    else:
        note = _note_of(c.value, run_id, seq, key)
        if note is None:
            return "no note of the agent's key covers it, and it carries none"
        if note.chain_hash != prev:
            return f"its note signs a chain at seq {seq - 1} that is not the agent's"
    if pin is not None and hashlib.sha256(c.value).hexdigest() != pin:
        return "altered: its bytes are not the ones the contested record pins (sha256)"
    return None


def _words(  # noqa: PLR0917 - the result's parts
    first: int,
    genuine: Sequence[Genuine],
    walk: _Walk,
    good: dict[int, DlqCopy],
    set_aside: list[str],
    named: str,
) -> str:
    """The recovery in words: recoverable (seqs, key, DLQ offsets), or what does not check."""
    missing = [
        f"seq {g.seq}: no copy in the DLQ (the record names {g.raw})"
        for g in genuine
        if g.seq not in good and not walk.by_seq.get(g.seq)
    ]
    wanted = {g.seq for g in genuine}
    aside = f"; set aside as not the agent's: {'; '.join(set_aside)}" if set_aside else ""
    if good and wanted <= set(good) and not missing:
        seqs = sorted(good)
        at = ", ".join(f"seq {s} at {good[s].dlq}" for s in seqs)
        return (
            f"the genuine run as the agent recorded it is recoverable from the DLQ (seqs "
            f"{seqs[0]}..{seqs[-1]}, verified against agent key {named}): {at}{aside}"
        )
    checked = f" (seqs {first}..{max(good)} check against agent key {named})" if good else ""
    what = "; ".join(missing + set_aside) or "no copy of the agent's checks"
    return f"the genuine run is NOT recoverable from the DLQ{checked}: {what}"
