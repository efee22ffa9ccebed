"""The per-run rules: what the sequencer does with each raw event (no Kafka in here).

For an event of run ``r`` with seq ``s`` and the run's head ``next``:

1. Not a readable TraceEvent → DLQ ``undecodable``; readable but run_id empty or over 255
   bytes, key != run_id, on the wrong partition for its key, non-canonical JSON, ``s < 0``
   or kind GAP → DLQ ``invalid``.
   Anything the rules did not foresee (an exception on one record) → DLQ ``internal``: no
   record can stop the sequencer (see :meth:`RunBook.apply`).
2. ``s < next``: ``s`` inside a sealed GAP range → DLQ ``late``; same bytes as the sealed
   event (its hash re-computes) → dropped, counted as a duplicate; else DLQ ``conflict``.
3. ``s >= next`` and the run's RUN_FINISHED is sealed → DLQ ``after_finish``.
4. ``s == next`` → sealed; then held events ``next, next+1, ...`` are sealed behind it.
5. ``s > next`` → held (persisted in the head); the same seq again is a duplicate or a
   conflict like a sealed one; ``s - next > max_gap``, or a run with ``MAX_GAP_RANGES``
   sealed gaps already → DLQ ``out_of_range``.
6. Held events whose oldest has waited ``gap_timeout`` (or whose bytes outgrow what one heads
   record should carry) → the missing seqs are sealed as GAP markers, one per seq (see
   ``_records``), and the held events follow.
7. A fleet over six months (docs/fleet.md): a run that finishes leaves ``runs`` for the
   compact :class:`FinishedRuns` once its transaction commits; an event of a run found there
   is a resend (an exact duplicate is dropped, else ``conflict`` or ``after_finish``). An
   event of a run known nowhere that was recorded before ``now - horizon`` → DLQ ``stale``
   (it may be a resend of a run already forgotten: sealing it would start a second chain),
   one stamped more than the clock skew in the future → ``invalid``. A finished run is
   forgotten ``horizon + skew`` after it finished. An open run idle for ``idle_close`` is
   closed with a sequencer-written RUN_FINISHED marker.

State lives in mutable ``_Run`` objects (``_state``) owned by one :class:`RunBook`; the
transactional loop throws the whole book away and restores it from the heads topic when a
transaction aborts, so nothing here has to be undoable. Here: rules 1-3 and the horizon;
sealing, holding and closing gaps (rules 4-6, the sweep and the idle close) are ``_gaps``,
the notes' check ``_attest``, the DLQ copies ``_refuse``: parts the book holds, not bases.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Collection, Iterable

from tracevault.chain import genesis, link
from tracevault.errors import NonCanonicalJSONError, SchemaError, ServiceUnavailableError
from tracevault.heads import FinishedChunk, Head, fingerprint
from tracevault.kafka import partition_for
from tracevault.runid import run_id_problem
from tracevault.schemas import EventKind, check_canonical, decode_event
from tracevault.schemas.fast import event_time, peek_event
from tracevault.services.sequencer._attest import CONTESTED_PREFIX, AttestRules
from tracevault.services.sequencer._finished import FinishedRuns, Known
from tracevault.services.sequencer._gaps import GapRules
from tracevault.services.sequencer._records import (
    DlqReason,
)
from tracevault.services.sequencer._refuse import Refusals
from tracevault.services.sequencer._state import (
    BatchOutput,
    FactsLoader,
    HistoryLoader,
    SealOut,
    _Run,
    _Source,
)
from tracevault.transparency import AgentKeys

__all__ = ["BatchOutput", "HistoryLoader", "RunBook", "SealOut"]

log = logging.getLogger(__name__)

#: Raw values larger than this are refused: the sealed record wraps the raw bytes with up to
#: about 800 bytes of chain and transport fields (run id and sequencer id included) and must
#: still fit the producer's ``message.max.bytes`` (1,000,000 by default). At 1,000,000 a raw
#: value of 999,900 bytes was accepted, its sealed record refused by the producer, and the
#: sequencer aborted and retried that batch forever.
MAX_RAW_BYTES = 990_000
#: Sealed gap ranges per run beyond which an event that would open one more goes to the DLQ:
#: the head carries every range (about 21 bytes each) and must fit one Kafka record. A
#: producer sending every other seq made heads of over 1 MB in seconds (then every
#: transaction of that partition failed). Sweeps of events already held may add up to
#: ``sequencer_max_gap`` more: still far under the limit.
MAX_GAP_RANGES = 5_000
#: The longest run id a run in the book can have: a new run's id fits the grammar
#: (``tracevault.runid``, at most 128 bytes), a run opened before it was at most 255 bytes.
_MAX_KEY_BYTES = 255
#: Key plus value of a refused record copied into its DLQ record; beyond this only their
#: sizes and SHA-256 go in (the DLQ record with its headers, at most about 5.5 KB, must fit
#: the same limit). Every event the rules accept (then hold) fits, with its key.
MAX_DLQ_COPY_BYTES = MAX_RAW_BYTES + _MAX_KEY_BYTES

_GAP = EventKind.GAP
_FINISHED = EventKind.RUN_FINISHED


class RunBook:
    """The runs of the partitions this instance owns, and the rules applied to them."""

    def __init__(
        self,
        *,
        raw_topic: str,
        partitions: int,
        sequencer_id: str,
        gap_timeout_us: int,
        max_gap: int,
        history: HistoryLoader,
        agents: AgentKeys | None = None,
        horizon_us: int = 172_800_000_000,
        skew_us: int = 300_000_000,
        idle_close_us: int = 86_400_000_000,
        attest_every: int | None = None,
        dlq_topic: str | None = None,
        facts: FactsLoader | None = None,
    ) -> None:
        self.raw_topic = raw_topic
        # where refused events go: named in a hijack's contested record (``_attest``)
        self.dlq_topic = dlq_topic or raw_topic.removesuffix(".raw") + ".dlq"
        self.partitions = partitions
        self.sequencer_id = sequencer_id
        self.gap_timeout_us = gap_timeout_us
        self.max_gap = max_gap
        self._history = history
        self._facts = facts  # what a run that left memory needs to judge a hijack (_attest)
        self._dropped: OrderedDict[str, _Run] = OrderedDict()
        self.agents = agents if agents is not None else AgentKeys({})
        self.horizon_us = horizon_us
        self.skew_us = skew_us
        self.idle_close_us = idle_close_us
        self.runs: dict[str, _Run] = {}
        self.finished = FinishedRuns()
        self._waiting: set[str] = set()  # runs with held events
        self._migrate: list[_Run] = []  # restored heads to write again (finished: to retire)
        self._forget: list[tuple[bytes, int]] = []  # heads keys to tombstone (docs/design.md)
        # the parts, sharing the containers above (mutated in place, never replaced)
        self.refusals = Refusals(raw_topic, self.runs, self._waiting, MAX_DLQ_COPY_BYTES)
        self.attest = AttestRules(
            agents=self.agents,
            attest_every=attest_every,
            partitions=partitions,
            sequencer_id=sequencer_id,
            raw_topic=raw_topic,
            dlq_topic=self.dlq_topic,
            runs=self.runs,
            finished=self.finished,
            history=history,
            facts=facts,
            dropped=self._dropped,
        )
        self.gaps = GapRules(
            raw_topic=raw_topic,
            sequencer_id=sequencer_id,
            gap_timeout_us=gap_timeout_us,
            horizon_us=horizon_us,
            skew_us=skew_us,
            idle_close_us=idle_close_us,
            runs=self.runs,
            finished=self.finished,
            waiting=self._waiting,
            migrate=self._migrate,
            forget=self._forget,
            attest=self.attest,
        )

    # -- ownership ---------------------------------------------------------------------------

    def restore(
        self,
        heads: Iterable[Head],
        rewrite: Collection[str] = (),
        forget: Iterable[tuple[bytes, int]] = (),
    ) -> None:
        """Restored heads; those in ``rewrite`` (rebuilt from sealed) are written again by
        the next transaction, and the (key, partition) in ``forget`` tombstoned there."""
        for head in heads:
            run = _Run(head)
            self.runs[head.run_id] = run
            if run.held:
                self._waiting.add(run.run_id)
            if run.finished or run.run_id in rewrite:
                # finished: a head written before finished runs left the heads topic
                run.persisted = True  # a record under its key is there: it is tombstoned
                self._migrate.append(run)
        self._forget.extend(forget)

    def restore_finished(self, chunks: Iterable[tuple[bytes, int, FinishedChunk]]) -> None:
        """Chunks of runs finished within the horizon, read back from the heads topic."""
        for key, partition, chunk in chunks:
            self.finished.add_chunk(key, partition, chunk)
        self.finished.seal()

    def retire(self, out: BatchOutput, chunk_ids: dict[int, int]) -> None:
        """After the commit: the batch's finished runs leave memory for the compact set."""
        for run in out.finished.values():
            if self.runs.get(run.run_id) is run:
                del self.runs[run.run_id]
            self._waiting.discard(run.run_id)
            self.finished.add(
                fingerprint(run.run_id),
                Known(run.first_offset, run.last_offset, run.next_seq - 1),
                chunk_ids[run.partition],
            )

    def drop_partitions(self, partitions: Iterable[int]) -> None:
        gone = set(partitions)
        for run_id in [r for r, run in self.runs.items() if run.partition in gone]:
            del self.runs[run_id]
            self._waiting.discard(run_id)
        self.finished.drop_partitions(gone)
        kept = [(r, v) for r, v in self._dropped.items() if v.partition not in gone]
        self._dropped.clear()  # in place: the attestation part holds the same container
        self._dropped.update(kept)
        self._forget[:] = [(k, p) for k, p in self._forget if p not in gone]

    def clear(self) -> None:
        self.runs.clear()
        self._waiting.clear()
        self.finished.clear()
        self._dropped.clear()
        self._migrate.clear()
        self._forget.clear()

    @property
    def attest_every(self) -> int | None:
        """The deployment's agent_attest_every: a keyed run's notes may not stop for longer
        (None: not checked); the attestation part's, which reads it."""
        return self.attest.attest_every

    @attest_every.setter
    def attest_every(self, every: int | None) -> None:
        self.attest.attest_every = every

    def sweep(self, out: BatchOutput, now_us: int) -> None:
        """Gaps whose oldest held event waited ``gap_timeout`` closed (``_gaps``)."""
        self.gaps.sweep(out, now_us)

    def close_idle(self, out: BatchOutput, now_us: int) -> None:
        """Runs idle for ``idle_close`` closed (``_gaps``)."""
        self.gaps.close_idle(out, now_us)

    @property
    def held_count(self) -> int:
        return sum(len(self.runs[r].held) for r in self._waiting if r in self.runs)

    # -- rules -------------------------------------------------------------------------------

    def apply(  # noqa: PLR0917 - positional: called once per event
        self,
        out: BatchOutput,
        key: bytes | None,
        value: bytes | None,
        partition: int,
        offset: int,
        now_us: int,
    ) -> None:
        """Apply the rules to one raw record, appending what to write to ``out``.

        Never raises because of the record (docs/design.md, "Sequencer rules"): whatever
        goes wrong with one record, foreseen or not, ends as a DLQ record with its reason,
        so no record can stop the service or come back at every restart. Only
        :class:`ServiceUnavailableError` (the broker, while reading a run's sealed history)
        propagates: that is no fault of the record, and the loop's recovery handles it.
        """
        try:
            self._apply(out, key, value, partition, offset, now_us)
        except ServiceUnavailableError:
            raise
        except Exception as exc:  # the point: no record may escape the rules
            self.refusals.unexpected(out, (key, value, partition, offset), exc)

    def _apply(  # noqa: PLR0917 - positional: called once per event
        self,
        out: BatchOutput,
        key: bytes | None,
        value: bytes | None,
        partition: int,
        offset: int,
        now_us: int,
    ) -> None:
        """Rule 1 (readable and valid), the horizon for a run new here (rule 7), then the
        seq against the run's head (rules 2-5)."""
        src = (key, value, partition, offset)
        if value is None:
            self.refusals.refuse(out, src, DlqReason.UNDECODABLE, "record has no value (tombstone)")
            return
        read = self._read(out, src, value)
        if read is None:
            return
        run_id, seq, kind = read
        run = self.runs.get(run_id)
        if not self._valid(out, src, run, run_id, seq, kind):
            return
        if run is None:
            known = self.finished.get(fingerprint(run_id))
            if known is not None:
                self._resent_after_finish(out, run_id, partition, known, seq, value, src)
                return
            if not self._recent_enough(out, value, run_id, seq, src, now_us):
                return
            run = self.runs[run_id] = _Run(Head.new(run_id, partition))
        run.seen_us = now_us
        self._place(out, run, src, seq, kind is _FINISHED, now_us)

    def _read(
        self, out: BatchOutput, src: _Source, value: bytes
    ) -> tuple[str, int, EventKind] | None:
        """(run_id, seq, kind) of a decodable event with canonical JSON and a size a sealed
        record can carry; else None, and the DLQ record says why."""
        _key, _value, partition, offset = src
        refuse = self.refusals.refuse
        try:
            peeked = peek_event(value)
            if peeked is None:  # not plain v1, or broken: the full codec decides and explains
                ev = decode_event(
                    value, check_json=False, what=f"{self.raw_topic}[{partition}]@{offset}"
                )
                run_id, seq, kind, request, response = (
                    ev.run_id, ev.seq, ev.kind, ev.request, ev.response
                )  # fmt: skip
            else:
                run_id, seq, kind, request, response = peeked
        except SchemaError as exc:
            refuse(out, src, DlqReason.UNDECODABLE, str(exc))
            return None
        # Both paths check the JSON here, with run_id and seq known: the DLQ record names them.
        try:
            check_canonical(request, field="request")
            check_canonical(response, field="response")
        except NonCanonicalJSONError as exc:
            where = f"{self.raw_topic}[{partition}]@{offset} seq {seq}"
            refuse(out, src, DlqReason.INVALID, f"{where}: {exc}", run_id=run_id, seq=seq)
            return None
        except RecursionError:  # json.loads on thousands of nested brackets
            where = f"{self.raw_topic}[{partition}]@{offset} seq {seq}"
            refuse(
                out,
                src,
                DlqReason.INVALID,
                f"{where}: request or response JSON is nested deeper than a parser can read",
                run_id=run_id,
                seq=seq,
            )
            return None
        if len(value) > MAX_RAW_BYTES:
            refuse(
                out,
                src,
                DlqReason.INVALID,
                f"value is {len(value)} bytes; over {MAX_RAW_BYTES} its sealed record would "
                "exceed Kafka's 1 MiB message limit (record large payloads by reference)",
                run_id=run_id,
                seq=seq,
            )
            return None
        return run_id, seq, kind

    def _valid(  # noqa: PLR0917 - positional: called once per event
        self,
        out: BatchOutput,
        src: _Source,
        run: _Run | None,
        run_id: str,
        seq: int,
        kind: EventKind,
    ) -> bool:
        """The event's run id, key, seq, kind and partition are ones the sequencer takes;
        else False, and a DLQ ``invalid`` record says which."""
        key, _value, partition, offset = src
        # The grammar at the run's first record: a run already in the book (restored, or
        # opened before the grammar) goes on, and only such runs take the C path (_cseal.c).
        if run is None and (problem := run_id_problem(run_id)) is not None:
            where = f"{self.raw_topic}[{partition}]@{offset} seq {seq}"
            why = f"{where}: {problem}"
        elif run is None and run_id.startswith(CONTESTED_PREFIX):
            why = f"run ids {CONTESTED_PREFIX}* are the sequencer's own records"
        elif key is None or key != (run.key if run is not None else run_id.encode("utf-8")):
            why = f"key {key!r} is not the event's run_id; producers must key by run_id"
        elif seq < 0:
            why = f"seq {seq} is negative"
        elif kind is _GAP:
            why = "GAP events are written by the sequencer only"
        elif (
            want := run.partition if run is not None else partition_for(key, self.partitions)
        ) != partition:
            why = (
                f"run {run_id} belongs on partition {want} (murmur2), not {partition}; "
                "configure the producer with partitioner=murmur2_random"
            )
        else:
            return True
        self.refusals.refuse(out, src, DlqReason.INVALID, why, run_id=run_id, seq=seq)
        return False

    def _place(  # noqa: PLR0917 - positional: called once per event
        self,
        out: BatchOutput,
        run: _Run,
        src: _Source,
        seq: int,
        finishes: bool,
        now_us: int,
    ) -> None:
        """The seq against the run's head: a resend, after the finish, the next one (sealed,
        with what it frees), too far ahead, or held behind a gap."""
        _key, value, partition, offset = src
        assert value is not None  # a tombstone never gets this far
        refuse = self.refusals.refuse
        if seq < run.next_seq:
            self._past(out, run, seq, value, src)
        elif run.finished:
            refuse(
                out,
                src,
                DlqReason.AFTER_FINISH,
                f"seq {seq} comes after RUN_FINISHED at seq {run.next_seq - 1}",
                run_id=run.run_id,
                seq=seq,
            )
        elif seq == run.next_seq:
            self.gaps.seal(out, run, seq, value, partition, offset, finishes)
            if run.held:
                self.gaps.drain(out, run)
        elif seq - run.next_seq > self.max_gap:
            refuse(
                out,
                src,
                DlqReason.OUT_OF_RANGE,
                f"seq {seq} is {seq - run.next_seq} past the next expected seq {run.next_seq} "
                f"(sequencer_max_gap={self.max_gap})",
                run_id=run.run_id,
                seq=seq,
            )
        elif len(run.gaps) >= MAX_GAP_RANGES and seq not in run.held:
            refuse(
                out,
                src,
                DlqReason.OUT_OF_RANGE,
                f"seq {seq} would open another gap after seq {run.next_seq - 1}, and run "
                f"{run.run_id} already has {len(run.gaps)} sealed gaps (its head must fit one "
                "Kafka record); send a run's events in order",
                run_id=run.run_id,
                seq=seq,
            )
        elif not self.gaps.hold(
            out, run, seq=seq, value=value, partition=partition, offset=offset, now_us=now_us
        ):
            refuse(
                out,
                src,
                DlqReason.CONFLICT,
                f"seq {seq} is already held (behind a gap) with different bytes",
                run_id=run.run_id,
                seq=seq,
            )

    def _recent_enough(  # noqa: PLR0917 - positional: called once per new run
        self,
        out: BatchOutput,
        value: bytes,
        run_id: str,
        seq: int,
        src: _Source,
        now_us: int,
    ) -> bool:
        """False (and a DLQ record) for the first event of an unknown run that is too old
        to be new, or stamped too far in the future for the horizon to hold."""
        at = event_time(value)
        if at is None:
            at = decode_event(value, check_json=False).at
        if at < now_us - self.horizon_us:
            self.refusals.refuse(
                out,
                src,
                DlqReason.STALE,
                f"run {run_id} is unknown here and its seq {seq} was recorded "
                f"{(now_us - at) / 3.6e9:.1f} h ago, longer than the finished-run horizon "
                f"({self.horizon_us / 3.6e9:.1f} h, sequencer_finished_horizon_s): it may be a "
                "resend of a run finished and forgotten, so it is kept here, not sealed",
                run_id=run_id,
                seq=seq,
            )
            return False
        if at > now_us + self.skew_us:
            self.refusals.refuse(
                out,
                src,
                DlqReason.INVALID,
                f"seq {seq} of run {run_id} is stamped {(at - now_us) / 1e6:.0f}s in the "
                f"future, more than sequencer_clock_skew_s ({self.skew_us / 1e6:.0f}s): fix "
                "the producer's clock",
                run_id=run_id,
                seq=seq,
            )
            return False
        return True

    def _resent_after_finish(  # noqa: PLR0917 - positional: called once per resend
        self,
        out: BatchOutput,
        run_id: str,
        partition: int,
        known: Known,
        seq: int,
        value: bytes,
        src: _Source,
    ) -> None:
        """An event of a run finished within the horizon: a duplicate, or the DLQ."""
        if seq > known.last_seq:
            self.refusals.refuse(
                out,
                src,
                DlqReason.AFTER_FINISH,
                f"seq {seq} comes after RUN_FINISHED at seq {known.last_seq}",
                run_id=run_id,
                seq=seq,
            )
            return
        hashes = {-1: genesis(run_id)}
        hashes.update(self._history(run_id, partition, known.first_offset, known.last_offset))
        prev, h = hashes.get(seq - 1), hashes.get(seq)
        if prev is not None and h is not None and link(prev, value) == h:
            out.duplicates += 1
            return
        self.refusals.refuse(
            out,
            src,
            DlqReason.CONFLICT,
            f"seq {seq} of finished run {run_id} is already sealed with different bytes",
            run_id=run_id,
            seq=seq,
        )
        # the run left memory, its hijack did not: the same evidence is judged the same way
        for rec, s, raw, fin in self.attest.check_dropped(out, run_id, known, seq, value, src[2:]):
            self.gaps.seal(out, rec, s, raw, partition, -1, fin)

    def _past(
        self,
        out: BatchOutput,
        run: _Run,
        seq: int,
        value: bytes,
        src: _Source,
    ) -> None:
        refuse = self.refusals.refuse
        if run.in_gap(seq):
            refuse(
                out,
                src,
                DlqReason.LATE,
                f"seq {seq} was already sealed as a GAP marker",
                run_id=run.run_id,
                seq=seq,
            )
            return
        prev, h = run.hashes.get(seq - 1), run.hashes.get(seq)
        if (prev is None or h is None) and not run.history_complete:
            run.hashes.update(
                self._history(run.run_id, run.partition, run.first_offset, run.last_offset)
            )
            run.history_complete = True
            prev, h = run.hashes.get(seq - 1), run.hashes.get(seq)
        if prev is not None and h is not None and link(prev, value) == h:
            out.duplicates += 1
            return
        refuse(
            out,
            src,
            DlqReason.CONFLICT,
            f"seq {seq} is already sealed with different bytes",
            run_id=run.run_id,
            seq=seq,
        )
        # the agent's own event behind a hijack is refused here: its note may prove it
        for rec, s, raw, fin in self.attest.check_conflict(out, run, seq, value, (src[2], src[3])):
            self.gaps.seal(out, rec, s, raw, run.partition, -1, fin)

    def check_coverage(self, out: BatchOutput) -> None:
        """After a batch's rules: contest runs whose notes stopped covering them (``_attest``)."""
        for rec, s, raw, fin in self.attest.uncovered(out):
            self.gaps.seal(out, rec, s, raw, rec.partition, -1, fin)
