"""The sequencer's check of agent notes as they are sealed (docs/identity.md).

An agent with a key signs its run's chain now and then: event ``k`` carries a note over
``(run, k-1, hash_{k-1})``. When such an event is sealed the sequencer holds exactly that
hash (the run's ``last_hash``), so the check is one signature and one comparison, and only
events that carry a note get it: the C path hands them to these rules (``_cseal.c``, the
``tracevault.attest`` key). A run's key is the one its seq 0 was signed with.

What makes a run **contested**: a note by another key than the run's, by a key the
deployment does not allow for the run's ``agent_id`` (``agent_vkeys``), one that does not
verify, or one whose chain hash is not the sealed chain's (someone else's bytes were sealed
in the stretch it covers); or no note where provenance requires one: a RUN_STARTED claiming
an ``agent_id`` some trusted key may record as (by name or through ``"*"``), a RUN_FINISHED of
a run started under a key (``check_unsigned``), or ``agent_attest_every`` sealed events past
the run's last note (``uncovered``, over each batch's runs: the C path seals unsigned events
without asking). The event is still sealed (the chain keeps every seq), and the sequencer
logs an ALERT, counts it (``tracevault_sequencer_contested_total``) and seals a record of its
own into the log: a two-event run ``tracevault.contested:<id>`` on the same partition
(``tracevault.transparency.contested_ids``) whose RUN_STARTED request names the run, the seq
and why. Verify (checks C and I) then fails the run and names the exact seqs.

**A hijack** (``check_conflict``, ``_hijack``): an event refused as ``conflict`` whose note
verifies under the run's key and whose own chain hashes part from the sealed chain proves that
the sealed seqs from there were not its agent's. The record then says ``hijacked``, the first
forged seq, and where the agent's own events went: the DLQ, and the raw records it copied
(the run's earlier conflicts whose bytes link as the note's hashes say), each with the SHA-256
of its bytes, so verify can tell the agent's DLQ copies from altered ones. Once per run.

The same holds for a run that already left memory (``check_dropped``): its RUN_FINISHED was
sealed (the attacker's, or the idle close's marker) and only its offsets and last seq are
kept (``FinishedRuns``). A refused event of it is judged on a view read back from ``sealed``:
the hashes, seq 0's note (the run's key, checked against ``agent_vkeys`` as verify checks it)
and the sequencer's own markers (a note that parts from the sealed chain at a GAP is no proof).
Views of ``_MAX_DROPPED`` such runs are kept, with their conflicts, most recent first.

Without trusted agent vkeys the signatures cannot be checked; the chain hash and the run's
key (by name and id) still are. A run restored from its head (after a restart) learns its key
from its next note, checked against ``agent_vkeys``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from collections import OrderedDict

from tracevault.chain import genesis, link
from tracevault.errors import LogError, SchemaError
from tracevault.heads import GapRange, Head, fingerprint
from tracevault.kafka import partition_for
from tracevault.schemas import EventKind, decode_event
from tracevault.services.sequencer._finished import FinishedRuns, Known
from tracevault.services.sequencer._records import sequencer_event
from tracevault.services.sequencer._state import BatchOutput, FactsLoader, HistoryLoader, _Run
from tracevault.transparency import (
    ATTEST_ATTRIBUTE,
    ATTEST_MARK,
    CONTESTED_PREFIX,
    AgentKeys,
    AgentNote,
    contested_ids,
    open_agent_note,
)

__all__ = ["CONTESTED_PREFIX", "UNKNOWN_KEY", "AttestRules", "ToSeal"]

log = logging.getLogger(__name__)

#: A restored run's key until read from its sealed seq 0 (``_restored_key``) or, a head
#: without offsets, named by its next note.
UNKNOWN_KEY: tuple[str, bytes] = ("", b"")
#: A run whose seq 0 carried a note that was contested: it has no key to hold later notes to.
CONTESTED_START: tuple[str, bytes] = ("?", b"?")
#: (run, seq, raw value, finishes) of a record the sequencer writes itself
ToSeal = tuple[_Run, int, bytes, bool]
#: Conflicting events remembered per run, and the bytes of them kept (as a run's held events
#: are bounded): enough to name the agent's own events behind a hijack, while a flood of
#: conflicts cannot grow the sequencer's memory.
_MAX_CONFLICTS = 256
_MAX_CONFLICT_BYTES = 256 * 1024
#: A run's ``noted`` once a stretch no note covers is contested: quiet until its next note.
_PARKED = 1 << 62
#: Runs that left memory (finished or idle-closed) kept as views while their resent events are
#: refused: their conflicts and whether a hijack record names them already. Beyond it the
#: least recent view is rebuilt from ``sealed`` when needed (its earlier conflicts forgotten).
_MAX_DROPPED = 64


def _seq_names(seqs: list[int]) -> str:
    """``seqs 3..6`` for a run of seqs, else each named."""
    if len(seqs) == 1:
        return f"seq {seqs[0]}"
    if seqs == list(range(seqs[0], seqs[-1] + 1)):
        return f"seqs {seqs[0]}..{seqs[-1]}"
    return "seqs " + ", ".join(str(s) for s in seqs)


class AttestRules:
    """Checks the note an event carries as it is sealed: a part of the run book, sharing its
    runs, finished runs and dropped views (the containers, mutated in place)."""

    def __init__(
        self,
        *,
        agents: AgentKeys,
        attest_every: int | None,
        partitions: int,
        sequencer_id: str,
        raw_topic: str,
        dlq_topic: str,
        runs: dict[str, _Run],
        finished: FinishedRuns,
        history: HistoryLoader,
        facts: FactsLoader | None,
        dropped: OrderedDict[str, _Run],
    ) -> None:
        self.agents = agents
        self.attest_every = attest_every
        self.partitions = partitions
        self.sequencer_id = sequencer_id
        self.raw_topic = raw_topic
        self.dlq_topic = dlq_topic
        self.runs = runs
        self.finished = finished
        self._history = history
        self._facts = facts
        self._dropped = dropped

    def check_note(self, out: BatchOutput, run: _Run, seq: int, raw: bytes) -> list[ToSeal]:
        """Check the note ``raw`` carries, if any, against ``run`` before it is sealed;
        returns the contested record's events for the caller to seal (else none)."""
        try:
            ev = decode_event(raw, check_json=False)
        except SchemaError:
            return []  # the rules read it once already; nothing to check
        value = ev.attributes.get(ATTEST_ATTRIBUTE)
        if value is None:
            return []
        why = self._note_problem(run, seq, value, ev.agent.agent_id)
        if isinstance(why, AgentNote):
            if why.chain_hash == run.last_hash:
                run.noted = seq
                return []
            if run.hijacked:
                return []  # named once: the agent's chain parted from the sealed one for good
            return self._hijack(out, run, seq, why, None) or self._contest(
                out,
                run,
                seq,
                f"its note signs a chain hash at seq {seq - 1} that is not the sealed one: "
                f"an event of seqs {why.first}..{seq - 1} was not written by its producer",
            )
        if seq == 0 and run.agent_key is None:
            run.agent_key = CONTESTED_START
        return self._contest(out, run, seq, why)

    def check_conflict(
        self, out: BatchOutput, run: _Run, seq: int, raw: bytes, where: tuple[int, int]
    ) -> list[ToSeal]:
        """An event refused as ``conflict`` (another is sealed at its seq): remembered, and
        when it carries a note of the run's key over a chain that is not the sealed one, that
        note proves the run was hijacked (docs/identity.md, "A hijack is named as one")."""
        if run.conflicts is None:
            run.conflicts = []
        if len(run.conflicts) < _MAX_CONFLICTS:
            kept = sum(len(c[3] or b"") for c in run.conflicts)
            keep = raw if kept + len(raw) <= _MAX_CONFLICT_BYTES else None
            run.conflicts.append((seq, *where, keep))
        if run.hijacked or seq == 0 or not self.agents or ATTEST_MARK not in raw:
            return []  # (a note in seq 0 covers only the genesis: it proves nothing here)
        try:
            ev = decode_event(raw, check_json=False)
        except SchemaError:
            return []
        value = ev.attributes.get(ATTEST_ATTRIBUTE)
        if value is None or self._restored_key(run) in (None, CONTESTED_START):
            return []
        started = run.agent_key
        why = self._note_problem(run, seq, value, ev.agent.agent_id)
        if started == UNKNOWN_KEY and run.agent_key != started:
            run.agent_key = started  # a refused event does not name a restored run's key
        if not isinstance(why, AgentNote):
            return []  # not the run's agent's note: the conflict proves nothing
        return self._hijack(out, run, seq, why, (*where, raw))

    def check_dropped(  # noqa: PLR0917 - positional, as check_conflict's
        self,
        out: BatchOutput,
        run_id: str,
        known: Known,
        seq: int,
        raw: bytes,
        where: tuple[int, int],
    ) -> list[ToSeal]:
        """A ``conflict`` of a run no longer in memory: judged like a live run's on its view
        (``_view``), so a hijack is named whether or not the run was evicted first."""
        if not self.agents or self._facts is None:
            return []
        view = self._dropped.get(run_id)
        if view is None or view.last_offset != known.last_offset:
            view = self._view(run_id, where[0], known)
            self._dropped[run_id] = view
            if len(self._dropped) > _MAX_DROPPED:
                self._dropped.popitem(last=False)
        else:
            self._dropped.move_to_end(run_id)
        return self.check_conflict(out, view, seq, raw, where)

    def _view(self, run_id: str, partition: int, known: Known) -> _Run:
        """A finished run as the rules knew it, read back from ``sealed``: its hashes, its
        key (seq 0's note, as verify's check I reads it) and its markers as gaps."""
        assert self._facts is not None
        first, last = known.first_offset, known.last_offset
        hashes = self._history(run_id, partition, first, last)
        start, own = self._facts(run_id, partition, first, last)
        head = dataclasses.replace(
            Head.new(run_id, partition),
            next_seq=known.last_seq + 1,
            last_hash=hashes.get(known.last_seq, genesis(run_id)),
            finished=True,
            first_offset=first,
            last_offset=last,
            gaps=tuple(GapRange(s, s) for s in sorted(own)),
        )
        view = _Run(head)
        view.hashes.update(hashes)
        view.history_complete = True
        view.agent_key = self._start_key(run_id, start)
        return view

    def _start_key(self, run_id: str, raw: bytes | None) -> tuple[str, bytes] | None:
        """The key seq 0 was signed with, when its note holds under ``agent_vkeys`` for the
        run's ``agent_id``; None for a run started without one (no hijack can be proven)."""
        if raw is None:
            return CONTESTED_START  # seq 0 not read: no key to hold a note to
        try:
            ev = decode_event(raw, check_json=False)
        except SchemaError:
            return CONTESTED_START
        value = ev.attributes.get(ATTEST_ATTRIBUTE)
        if value is None:
            return None
        try:
            note, sig, msg = open_agent_note(value)
        except LogError:
            return CONTESTED_START
        key = self.agents.key(sig)
        if (
            key is None
            or not key.verify(msg, sig.signature)
            or (note.run_id, note.seq, note.chain_hash) != (run_id, -1, genesis(run_id))
            or not self.agents.allows(ev.agent.agent_id, key)
        ):
            return CONTESTED_START
        return (sig.name, sig.key_id)

    def _restored_key(self, run: _Run) -> tuple[str, bytes] | None:
        """The run's key; for a run restored past seq 0 (``UNKNOWN_KEY``), read once from its
        sealed seq 0's note, as verify's check I reads it (``_start_key``).

        Taken instead from the first note after a restart, any key ``agent_vkeys`` lets
        record as the run's agent could carry the run on, signing the sealed chain, and no
        contest would name it. Unknown it stays only when the head has no offsets to read
        (the first note then names it, as before).
        """
        key = run.agent_key
        if key != UNKNOWN_KEY or self._facts is None or not self.agents or run.first_offset < 0:
            return key
        start, _ = self._facts(run.run_id, run.partition, run.first_offset, run.first_offset)
        run.agent_key = key = self._start_key(run.run_id, start)
        return key

    def _hijack(
        self,
        out: BatchOutput,
        run: _Run,
        seq: int,
        note: AgentNote,
        refused: tuple[int, int, bytes] | None,
    ) -> list[ToSeal]:
        """The contest of a run whose agent signed a chain that is not the sealed one: the
        first seq sealed that its agent did not write, and where the agent's own events went
        (those refused as ``conflict`` whose bytes link as its note's hashes say). Empty when
        the note proves no forgery (the chains part at a GAP: events lost, not replaced)."""
        first = self._first_forged(run, note)
        if first is None:
            return []
        run.hijacked = True
        genuine: dict[int, tuple[int, int, bytes]] = {}
        for s, p, o, raw in run.conflicts or ():
            if first <= s < seq and s not in genuine and raw is not None:
                before, after = note.around(s)
                if link(before, raw) == after:
                    genuine[s] = (p, o, raw)
        if refused is not None:
            genuine[seq] = refused
        sig = run.agent_key or UNKNOWN_KEY
        last = run.next_seq - 1  # (a sealed note's own seq is not sealed yet)
        why = (
            f"run {run.run_id} was hijacked: its agent's note in seq {seq} (key "
            f"{sig[0]}+{sig[1].hex()}) signs a chain hash at seq {seq - 1} that is not the "
            f"sealed one, and the agent's own hashes part from the sealed chain at seq "
            f"{first}: seq {first} sealed under its id is not its agent's, and seqs "
            f"{first}..{last} are covered by no signature of its agent"
        )
        where = {s: f"{self.raw_topic}[{p}]@{o}" for s, (p, o, _r) in sorted(genuine.items())}
        if where:
            why += (
                f"; the agent's own events are in {self.dlq_topic}, refused as conflict: "
                f"{_seq_names(list(where))} (from {', '.join(where.values())})"
            )
        # the bytes' SHA-256: the signed log pins the agent's events, even the last one, whose
        # own bytes no note covers (verify checks the DLQ copies against both)
        located = [
            {"seq": s, "raw": w, "sha256": hashlib.sha256(genuine[s][2]).hexdigest()}
            for s, w in where.items()
        ]
        extra = {"hijacked": True, "genuine": located, "dlq": self.dlq_topic}
        return self._contest(out, run, first, why, extra)

    def _first_forged(self, run: _Run, note: AgentNote) -> int | None:
        """The first seq of ``note.covers`` whose sealed hash is not the agent's, unless the
        sealed event there is a GAP marker (or the hashes cannot be read)."""
        for i in note.covers:
            h = run.hashes.get(i)
            if h is None and not run.history_complete:
                run.hashes.update(
                    self._history(run.run_id, run.partition, run.first_offset, run.last_offset)
                )
                run.history_complete = True
                h = run.hashes.get(i)
            if h is None:
                return None
            if h != note.around(i)[1]:
                return None if run.in_gap(i) else i
        return None

    def uncovered(self, out: BatchOutput) -> list[ToSeal]:
        """Notes that stop covering a run mid-way (docs/identity.md): a run started under a
        key whose sealed events ran ``attest_every`` past its last note with no note of its
        key is contested at once, not only at its RUN_FINISHED. Over the batch's runs, after
        it is applied: the C path seals the unsigned events without asking."""
        every = self.attest_every
        if every is None:
            return []
        todo: list[ToSeal] = []
        late = [r for r in out.touched.values() if r.next_seq > r.noted + every]  # rarely any
        for run in late:
            key = run.agent_key
            if key is None or key in (UNKNOWN_KEY, CONTESTED_START) or run.finished or run.hijacked:
                continue
            due = run.noted + every
            run.noted = _PARKED
            todo += self._contest(
                out,
                run,
                due,
                f"its notes stopped covering it: seq {due} is {every} events "
                f"(agent_attest_every) past its last note at seq {due - every} and carries "
                f"no note of the run's key {key[0]}+{key[1].hex()}; seqs {due - every + 1}.."
                f"{run.next_seq - 1} are covered by no signature",
            )
        return todo

    def check_unsigned(self, out: BatchOutput, run: _Run, seq: int, raw: bytes) -> list[ToSeal]:
        """Provenance is required (docs/identity.md): a RUN_STARTED with no note claiming an
        ``agent_id`` the deployment keys, or a RUN_FINISHED with none in a run started under a
        key (its last events would be covered by no signature), is contested."""
        if seq == 0:
            if not self.agents or run.run_id.startswith(CONTESTED_PREFIX):
                return []
            try:
                agent_id = decode_event(raw, check_json=False).agent.agent_id
            except SchemaError:
                return []  # the rules read it once already; nothing to check
            if not self.agents.keyed(agent_id):
                # no key may record as it (by name or through ``"*"``): verify fails it as
                # not authorised; what the sequencer contests is a claim on a keyed agent
                return []
            why = (
                f"its RUN_STARTED claims agent_id {agent_id!r}, which agent_vkeys keys, but "
                "carries no agent note: an unsigned claim"
            )
            return self._contest(out, run, seq, why)
        started = self._restored_key(run)
        if started is None or started == UNKNOWN_KEY:
            return []
        why = (
            f"its RUN_FINISHED carries no note of the run's key {started[0]}+{started[1].hex()}: "
            "the events since its last note are covered by no signature"
        )
        return self._contest(out, run, seq, why)

    def _note_problem(self, run: _Run, seq: int, value: str, agent_id: str) -> str | AgentNote:
        """Why the note is not the run's agent's (in words), else the note itself: the
        caller compares its chain with the sealed one."""
        try:
            note, sig, msg = open_agent_note(value)
        except LogError as exc:
            return f"its agent note is malformed ({exc})"
        signer = (sig.name, sig.key_id)
        named = f"{sig.name}+{sig.key_id.hex()}"
        if self.agents:
            key = self.agents.key(sig)
            if key is None:
                return f"its note is signed by {named}, which agent_vkeys does not list"
            if not key.verify(msg, sig.signature):
                return f"its note's signature by {named} does not verify"
        if note.run_id != run.run_id:
            return f"its note is for another run, {note.run_id!r} (seq {note.seq})"
        if note.seq != seq - 1:
            return f"its note covers seq {note.seq}, not seq {seq - 1} (the seq before it)"
        started = run.agent_key if seq == 0 else self._restored_key(run)
        if seq == 0 or started == UNKNOWN_KEY:
            if (
                self.agents
                and (key := self.agents.key(sig))
                and not self.agents.allows(agent_id, key)
            ):
                return f"its key {named} may not record as agent_id {agent_id!r}"
            run.agent_key = started = signer
        if started is None:
            return f"the run's seq 0 carried no agent note; seq {seq} is signed by {named}"
        if started == CONTESTED_START:
            return (
                f"the run's seq 0 note was contested, so the run has no agent key to hold this "
                f"one to; seq {seq} is signed by {named}"
            )
        if started != signer:
            return (
                f"its note is signed by {named}, the run was started under "
                f"{started[0]}+{started[1].hex()}"
            )
        return note

    def _contest(
        self,
        out: BatchOutput,
        run: _Run,
        seq: int,
        why: str,
        extra: dict[str, object] | None = None,
    ) -> list[ToSeal]:
        """ALERT, count, and the contested record naming the run, to seal into the log."""
        log.error(
            "ALERT run %s is contested at seq %s (partition %s): %s",
            run.run_id,
            seq,
            run.partition,
            why,
        )
        out.contested += 1
        cid = self._contested_id(run, seq)
        rec = self.runs[cid] = _Run(Head.new(cid, run.partition))
        rec.agent_key = None
        detail = {"run_id": run.run_id, "seq": seq, "reason": why, **(extra or {})}
        sid = self.sequencer_id
        return [
            (rec, 0, sequencer_event(cid, 0, EventKind.RUN_STARTED, detail, sid), False),
            (rec, 1, sequencer_event(cid, 1, EventKind.RUN_FINISHED, {}, sid), True),
        ]

    def _contested_id(self, run: _Run, seq: int) -> str:
        """A fresh run id for the record, on the contested run's own partition, found from
        the contested run's id alone (``tracevault.transparency.contested_ids``): verify looks
        a run's records up by it."""
        parts, here = self.partitions, run.partition
        for cid in contested_ids(run.run_id, lambda c: partition_for(c.encode(), parts) == here):
            if cid not in self.runs and self.finished.get(fingerprint(cid)) is None:
                return cid
        raise AssertionError("no contested run id maps to the partition")  # pragma: no cover
