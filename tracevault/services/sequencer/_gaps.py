"""Holding events behind a gap, sealing, and closing gaps: the rules' rules 4 to 7.

``GapRules`` is the part of :class:`~tracevault.services.sequencer._rules.RunBook` (held by
it, not a base) that
moves a run forward: seal the next seq (rule 4), hold a later one (rule 5), drain what a
seal frees, and, when the oldest held event has waited ``gap_timeout`` (the sweep) or its
run has been idle for ``idle_close`` (rule 7), seal the missing seqs as GAP markers (rule
6). The C path (``_cseal.c``) does what ``seal`` does for the common case.
"""

from __future__ import annotations

import logging

from tracevault.chain import link
from tracevault.errors import SchemaError
from tracevault.heads import GapRange, HeldEvent
from tracevault.schemas import EventKind, decode_event
from tracevault.schemas.fast import peek_event
from tracevault.services.sequencer._attest import AttestRules
from tracevault.services.sequencer._finished import FinishedRuns
from tracevault.services.sequencer._records import (
    DlqReason,
    DlqRecord,
    closed_event,
    gap_event,
)
from tracevault.services.sequencer._state import BatchOutput, SealOut, _new_tuple, _Run
from tracevault.transparency import ATTEST_MARK

__all__ = ["MAX_HELD_BYTES", "GapRules"]

log = logging.getLogger(__name__)

#: Held raw bytes per run beyond which the gap is closed at once: the head record that
#: carries them must stay well under Kafka's 1 MiB default message size.
MAX_HELD_BYTES = 256 * 1024

_FINISHED = EventKind.RUN_FINISHED


class GapRules:
    """Seal, hold, drain and close gaps over the book's runs: a part of ``RunBook``, sharing
    its runs, finished runs, waiting set and pending head writes (mutated in place), with the
    attestation check (``_attest``) as a part of its own."""

    def __init__(
        self,
        *,
        raw_topic: str,
        sequencer_id: str,
        gap_timeout_us: int,
        horizon_us: int,
        skew_us: int,
        idle_close_us: int,
        runs: dict[str, _Run],
        finished: FinishedRuns,
        waiting: set[str],
        migrate: list[_Run],
        forget: list[tuple[bytes, int]],
        attest: AttestRules,
    ) -> None:
        self.raw_topic = raw_topic
        self.sequencer_id = sequencer_id
        self.gap_timeout_us = gap_timeout_us
        self.horizon_us = horizon_us
        self.skew_us = skew_us
        self.idle_close_us = idle_close_us
        self.runs = runs
        self.finished = finished
        self._waiting = waiting
        self._migrate = migrate
        self._forget = forget
        self._attest = attest

    def seal(  # noqa: PLR0917 - positional: called once per event
        self,
        out: BatchOutput,
        run: _Run,
        seq: int,
        raw: bytes,
        source_partition: int,
        source_offset: int,
        finishes: bool,
    ) -> None:
        if ATTEST_MARK in raw:  # the agent's signed note (docs/identity.md)
            for rec, s, value, fin in self._attest.check_note(out, run, seq, raw):
                self.seal(out, rec, s, value, source_partition, -1, fin)
        elif (seq == 0 or finishes) and source_offset >= 0:
            # a producer's event with no note where one is required (both reach Python only;
            # the sequencer's own markers, source_offset -1, carry none)
            for rec, s, value, fin in self._attest.check_unsigned(out, run, seq, raw):
                self.seal(out, rec, s, value, source_partition, -1, fin)
        prev = run.last_hash
        h = link(prev, raw)
        out.sealed.append(
            _new_tuple(SealOut, (run, seq, prev, h, raw, source_partition, source_offset))
        )
        run.hashes[seq] = h
        run.last_hash = h
        run.next_seq = seq + 1
        out.touched[run.run_id] = run
        if finishes:
            out.finished[run.run_id] = run
            run.finished = True
            # A finished run's hashes are only needed for resent duplicates: read them back
            # from the sealed topic then, rather than keep every finished run in memory.
            run.hashes = {-1: run.hashes[-1], seq - 1: prev, seq: h}
            run.history_complete = False

    def drain(self, out: BatchOutput, run: _Run) -> None:
        while run.held:
            if run.finished:
                for s in sorted(run.held):
                    held = run.held[s]
                    out.dlq.append(
                        DlqRecord(
                            DlqReason.AFTER_FINISH,
                            f"seq {s} comes after RUN_FINISHED at seq {run.next_seq - 1}",
                            run.run_id.encode("utf-8"),
                            held.raw,
                            self.raw_topic,
                            held.source_partition,
                            held.source_offset,
                            run.run_id,
                            s,
                        )
                    )
                run.held.clear()
                break
            nxt = run.held.get(run.next_seq)
            if nxt is None:
                break
            try:
                peeked = peek_event(nxt.raw)
                kind = peeked.kind if peeked else decode_event(nxt.raw, check_json=False).kind
            except SchemaError as exc:
                # Held bytes were read once already; these came from a heads record that no
                # longer decodes. Kept in the DLQ, the seq stays missing (a GAP later).
                del run.held[nxt.seq]
                out.dlq.append(
                    DlqRecord(
                        DlqReason.INTERNAL,
                        f"held seq {nxt.seq} of run {run.run_id} no longer decodes: {exc}",
                        run.key,
                        nxt.raw,
                        self.raw_topic,
                        nxt.source_partition,
                        nxt.source_offset,
                        run.run_id,
                        nxt.seq,
                    )
                )
                break
            del run.held[nxt.seq]
            self.seal(
                out,
                run,
                seq=nxt.seq,
                raw=nxt.raw,
                source_partition=nxt.source_partition,
                source_offset=nxt.source_offset,
                finishes=kind is _FINISHED,
            )
        out.touched[run.run_id] = run
        if not run.held:
            self._waiting.discard(run.run_id)

    def hold(
        self,
        out: BatchOutput,
        run: _Run,
        *,
        seq: int,
        value: bytes,
        partition: int,
        offset: int,
        now_us: int,
    ) -> bool:
        """Rule 5: hold ``seq`` behind the gap (a duplicate of a held one is counted);
        False when it is held already with different bytes (the caller refuses it)."""
        held = run.held.get(seq)
        if held is not None:
            if held.raw != value:
                return False
            out.duplicates += 1
            return True
        run.held[seq] = HeldEvent(seq, value, partition, offset, now_us)
        out.touched[run.run_id] = run
        self._waiting.add(run.run_id)
        # Until the held bytes fit again: one close may leave a large event held behind the
        # next hole, and the head that carries it must fit one Kafka record.
        while run.held and sum(len(h.raw) for h in run.held.values()) > MAX_HELD_BYTES:
            log.warning(
                "run %s: %d held events exceed %d bytes; sealing the gap now",
                run.run_id,
                len(run.held),
                MAX_HELD_BYTES,
            )
            self._close_gap(out, run)
            self.drain(out, run)
        return True

    def sweep(self, out: BatchOutput, now_us: int) -> None:
        """Seal GAP markers for every gap whose oldest held event has waited too long;
        forget finished runs past the horizon (their chunks go in ``out.expired``)."""
        out.expired.extend(self.finished.expire(now_us - self.horizon_us - self.skew_us))
        for old in self._migrate:
            if self.runs.get(old.run_id) is old:
                if old.finished:
                    out.finished[old.run_id] = old
                out.touched[old.run_id] = old
        self._migrate.clear()
        out.expired.extend(self._forget)
        self._forget.clear()
        for run_id in list(self._waiting):
            run = self.runs.get(run_id)
            if run is None:
                self._waiting.discard(run_id)
                continue
            while run.held and not run.finished:
                oldest = min(h.held_at for h in run.held.values())
                if now_us - oldest < self.gap_timeout_us:
                    break
                self._close_gap(out, run)
                self.drain(out, run)

    def close_idle(self, out: BatchOutput, now_us: int) -> None:
        """Close every open run idle longer than ``idle_close_us`` with a marker.

        Its agent is taken to have died: a gap still open is sealed as GAP markers first,
        then a sequencer-written RUN_FINISHED (``closed_event``) ends the chain, so the run
        leaves memory like any finished run and readers see why it ended.
        """
        cutoff = now_us - self.idle_close_us
        for run in [r for r in self.runs.values() if not r.finished and r.seen_us < cutoff]:
            idle_s = (now_us - run.seen_us) / 1e6
            while run.held:
                self._close_gap(out, run)
                self.drain(out, run)
            if run.finished:  # a held RUN_FINISHED was sealed by the drain
                continue
            log.warning(
                "run %s: no event for %.0fs; closing it with a RUN_FINISHED marker at seq %d",
                run.run_id,
                idle_s,
                run.next_seq,
            )
            raw = closed_event(run.run_id, run.next_seq, idle_s, self.sequencer_id)
            self.seal(
                out,
                run,
                seq=run.next_seq,
                raw=raw,
                source_partition=run.partition,
                source_offset=-1,
                finishes=True,
            )
            out.closed_idle += 1

    def _close_gap(self, out: BatchOutput, run: _Run) -> None:
        a, b = run.next_seq, min(run.held) - 1
        log.warning(
            "run %s: seqs %d..%d missing past the gap timeout; sealing GAP", run.run_id, a, b
        )
        # Every marker is built before the first is sealed: a failure leaves no half gap.
        raws = [gap_event(run.run_id, s, a, b, self.sequencer_id) for s in range(a, b + 1)]
        for s, raw in zip(range(a, b + 1), raws, strict=True):
            self.seal(
                out,
                run,
                seq=s,
                raw=raw,
                source_partition=run.partition,
                source_offset=-1,
                finishes=False,
            )
            out.gap_markers += 1
        run.gaps.append(GapRange(a, b))
