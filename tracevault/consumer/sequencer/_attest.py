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
an ``agent_id`` that ``agent_vkeys`` lists by name, a RUN_FINISHED of a run started under a key
(``_check_unsigned``). The event is still sealed (it is the agent's, and the chain keeps
every seq), and the sequencer logs an ALERT, counts it
(``tracevault_sequencer_contested_total``) and seals a record of its own into the log: a
two-event run ``tracevault.contested:<id>`` on the same partition whose RUN_STARTED request
names the run, the seq and why. Verify (check I) then names the exact seqs.

Without trusted agent vkeys the signatures cannot be checked; the chain hash and the run's
key (by name and id) still are. A run restored from its head (after a restart) learns its key
from its next note, checked against ``agent_vkeys``.
"""

from __future__ import annotations

import hashlib
import logging

from tracevault.consumer.sequencer._records import sequencer_event
from tracevault.consumer.sequencer._state import BatchOutput, _Run
from tracevault.errors import LogError, SchemaError
from tracevault.heads import Head
from tracevault.kafka import partition_for
from tracevault.schemas import EventKind, decode_event
from tracevault.transparency import ATTEST_ATTRIBUTE, AgentKeys, open_agent_note

__all__ = ["CONTESTED_PREFIX", "UNKNOWN_KEY", "AttestRules", "ToSeal"]

log = logging.getLogger(__name__)

#: Run ids of the sequencer's contested records; a producer's event for one is refused.
CONTESTED_PREFIX = "tracevault.contested:"
#: A restored run's key before its next note names it (its seq 0 was sealed earlier).
UNKNOWN_KEY: tuple[str, bytes] = ("", b"")
#: A run whose seq 0 carried a note that was contested: it has no key to hold later notes to.
CONTESTED_START: tuple[str, bytes] = ("?", b"?")
#: (run, seq, raw value, finishes) of a record the sequencer writes itself
ToSeal = tuple[_Run, int, bytes, bool]


class AttestRules:
    """Checks the note an event carries as it is sealed (a base of the book's rules)."""

    agents: AgentKeys
    partitions: int
    sequencer_id: str
    runs: dict[str, _Run]

    def _check_note(self, out: BatchOutput, run: _Run, seq: int, raw: bytes) -> list[ToSeal]:
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
        if why is None:
            return []
        if seq == 0 and run.agent_key is None:
            run.agent_key = CONTESTED_START
        return self._contest(out, run, seq, why)

    def _check_unsigned(self, out: BatchOutput, run: _Run, seq: int, raw: bytes) -> list[ToSeal]:
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
            if not self.agents.named(agent_id):
                # not listed by name (``"*"`` or none): verify fails it, as unsigned or not
                # authorised; the sequencer contests the claims on agents it lists by name
                return []
            why = (
                f"its RUN_STARTED claims agent_id {agent_id!r}, which agent_vkeys keys, but "
                "carries no agent note: an unsigned claim"
            )
            return self._contest(out, run, seq, why)
        started = run.agent_key
        if started is None or started == UNKNOWN_KEY:
            return []
        why = (
            f"its RUN_FINISHED carries no note of the run's key {started[0]}+{started[1].hex()}: "
            "the events since its last note are covered by no signature"
        )
        return self._contest(out, run, seq, why)

    def _note_problem(self, run: _Run, seq: int, value: str, agent_id: str) -> str | None:
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
        started = run.agent_key
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
        if note.chain_hash != run.last_hash:
            return (
                f"its note signs a chain hash at seq {seq - 1} that is not the sealed one: "
                f"an event of seqs {note.first}..{seq - 1} was not written by its producer"
            )
        return None

    def _contest(self, out: BatchOutput, run: _Run, seq: int, why: str) -> list[ToSeal]:
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
        detail = {"run_id": run.run_id, "seq": seq, "reason": why}
        sid = self.sequencer_id
        return [
            (rec, 0, sequencer_event(cid, 0, EventKind.RUN_STARTED, detail, sid), False),
            (rec, 1, sequencer_event(cid, 1, EventKind.RUN_FINISHED, {}, sid), True),
        ]

    def _contested_id(self, run: _Run, seq: int) -> str:
        """A fresh run id for the record, on the contested run's own partition."""
        base = hashlib.sha256(
            f"{run.run_id}\0{seq}\0{run.next_seq}\0{len(self.runs)}".encode()
        ).hexdigest()[:24]
        for n in range(100_000):
            cid = f"{CONTESTED_PREFIX}{base}:{n}"
            if cid not in self.runs and partition_for(cid.encode(), self.partitions) == (
                run.partition
            ):
                return cid
        raise AssertionError("no contested run id maps to the partition")  # pragma: no cover
