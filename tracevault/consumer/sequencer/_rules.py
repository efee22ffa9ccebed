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

State lives in mutable ``_Run`` objects owned by one :class:`RunBook`; the transactional loop
throws the whole book away and restores it from the heads topic when a transaction aborts,
so nothing here has to be undoable.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from tracevault.chain import genesis, link
from tracevault.consumer.sequencer._finished import FinishedRuns, Known
from tracevault.consumer.sequencer._records import (
    DlqReason,
    DlqRecord,
    closed_event,
    gap_event,
)
from tracevault.errors import NonCanonicalJSONError, SchemaError, ServiceUnavailableError
from tracevault.heads import FinishedChunk, GapRange, Head, HeldEvent, fingerprint
from tracevault.kafka import partition_for
from tracevault.runid import run_id_problem
from tracevault.schemas import EventKind, check_canonical, decode_event
from tracevault.schemas.fast import event_time, peek_event

__all__ = ["BatchOutput", "HistoryLoader", "RunBook", "SealOut"]

log = logging.getLogger(__name__)

#: Held raw bytes per run beyond which the gap is closed at once: the head record that
#: carries them must stay well under Kafka's 1 MiB default message size.
MAX_HELD_BYTES = 256 * 1024
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


def _sha256(data: bytes | None) -> str:
    return hashlib.sha256(data or b"").hexdigest()


class _Run:
    """Mutable state of one run (the in-memory form of a :class:`Head`)."""

    __slots__ = (
        "enc",
        "finished",
        "first_offset",
        "gaps",
        "hashes",
        "held",
        "history_complete",
        "key",
        "last_hash",
        "last_offset",
        "leaf",
        "next_seq",
        "partition",
        "persisted",
        "run_id",
        "seen_us",
    )

    def __init__(self, head: Head) -> None:
        self.run_id = head.run_id
        self.key = head.run_id.encode("utf-8")  # the Kafka key of its records
        # the writer's per-run cache of encoded pieces (opaque here; None until first use)
        self.enc: tuple[bytes, bytes] | None = None
        # the writer's cached start of the run's log leaves (tracevault.log.leaf_prefix)
        self.leaf: bytes | None = None
        self.partition = head.partition
        self.next_seq = head.next_seq
        self.last_hash = head.last_hash
        self.finished = head.finished
        self.first_offset = head.first_offset
        self.last_offset = head.last_offset
        self.gaps: list[GapRange] = list(head.gaps)
        self.held: dict[int, HeldEvent] = {h.seq: h for h in head.held}
        # seq -> hash of sealed events known in memory; -1 -> genesis. A run restored from
        # its head knows only its last hash until the history loader reads the sealed topic.
        self.hashes: dict[int, bytes] = {-1: genesis(head.run_id)}
        if head.next_seq > 0:
            self.hashes[head.next_seq - 1] = head.last_hash
        self.history_complete = head.next_seq == 0
        # when the run last had an event (its head's time after a restore): idle close
        self.seen_us = head.updated_at
        # a head record of this run is committed in the heads topic (restored, or written by
        # a committed transaction): only then does its finish need a tombstone
        self.persisted = head.updated_at > 0

    def to_head(self, updated_at: int, sequencer_id: str) -> Head:
        return Head(
            run_id=self.run_id,
            next_seq=self.next_seq,
            last_hash=self.last_hash,
            finished=self.finished,
            partition=self.partition,
            first_offset=self.first_offset,
            last_offset=self.last_offset,
            gaps=tuple(self.gaps),
            held=tuple(self.held[s] for s in sorted(self.held)),
            updated_at=updated_at,
            sequencer_id=sequencer_id,
        )

    def in_gap(self, seq: int) -> bool:
        return any(seq in g for g in self.gaps)


#: (key, value, partition, offset) of the raw record being judged, for its DLQ record.
_Source = tuple[bytes | None, bytes | None, int, int]

#: Reads a run's sealed history: seq -> hash of every sealed event of ``run``.
HistoryLoader = Callable[[str, int, int, int], dict[int, bytes]]


class SealOut(NamedTuple):
    """One record to write to ``sealed`` (its offset comes from the delivery report)."""

    run: _Run
    seq: int
    prev_hash: bytes
    hash: bytes
    raw: bytes
    source_partition: int
    source_offset: int


# SealOut(...) without the generated __new__'s Python frame (one per sealed event).
_new_tuple = tuple.__new__


@dataclass(slots=True)
class BatchOutput:
    """Everything one batch (or one gap sweep) produces; written in one transaction."""

    sealed: list[SealOut] = field(default_factory=list)
    dlq: list[DlqRecord] = field(default_factory=list)
    touched: dict[str, _Run] = field(default_factory=dict)
    duplicates: int = 0
    gap_markers: int = 0
    #: runs whose RUN_FINISHED this batch seals: tombstoned in heads, kept in a chunk
    finished: dict[str, _Run] = field(default_factory=dict)
    #: (key, partition) of finished-run chunks past the horizon: tombstoned in heads
    expired: list[tuple[bytes, int]] = field(default_factory=list)
    closed_idle: int = 0

    def __bool__(self) -> bool:
        return bool(self.sealed or self.dlq or self.touched or self.duplicates or self.expired)


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
        horizon_us: int = 172_800_000_000,
        skew_us: int = 300_000_000,
        idle_close_us: int = 86_400_000_000,
    ) -> None:
        self.raw_topic = raw_topic
        self.partitions = partitions
        self.sequencer_id = sequencer_id
        self.gap_timeout_us = gap_timeout_us
        self.max_gap = max_gap
        self._history = history
        self.horizon_us = horizon_us
        self.skew_us = skew_us
        self.idle_close_us = idle_close_us
        self.runs: dict[str, _Run] = {}
        self.finished = FinishedRuns()
        self._waiting: set[str] = set()  # runs with held events
        self._migrate: list[_Run] = []  # restored heads to write again (finished: to retire)
        self._forget: list[tuple[bytes, int]] = []  # heads keys to tombstone (docs/design.md)

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
        self._forget = [(k, p) for k, p in self._forget if p not in gone]

    def clear(self) -> None:
        self.runs.clear()
        self._waiting.clear()
        self.finished.clear()
        self._migrate.clear()
        self._forget.clear()

    @property
    def held_count(self) -> int:
        return sum(len(self.runs[r].held) for r in self._waiting if r in self.runs)

    # -- rules -------------------------------------------------------------------------------

    def _refuse(
        self,
        out: BatchOutput,
        src: _Source,
        reason: DlqReason,
        detail: str,
        *,
        run_id: str | None = None,
        seq: int | None = None,
    ) -> None:
        key, value, partition, offset = src
        if len(key or b"") + len(value or b"") > MAX_DLQ_COPY_BYTES:
            # Too large to copy: a DLQ record over the producer's limit would fail the whole
            # transaction at every retry. The original stays on raw until its retention.
            detail += (
                f"; key ({len(key or b'')} bytes, sha256 {_sha256(key)}) and value "
                f"({len(value or b'')} bytes, sha256 {_sha256(value)}) are too large to copy "
                f"here: the original is {self.raw_topic}[{partition}]@{offset}"
            )
            key = value = None
        out.dlq.append(
            DlqRecord(reason, detail, key, value, self.raw_topic, partition, offset, run_id, seq)
        )

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
            self._unexpected(out, (key, value, partition, offset), exc)

    def _unexpected(self, out: BatchOutput, src: _Source, exc: Exception) -> None:
        """Account for a record the rules failed on: DLQ ``internal``, unless it got through.

        Every step of the rules is atomic (a seal, a hold, a refusal), so the book is
        consistent here; the record either took effect before the failure (sealed or held:
        then a held event behind it failed, and that one has its own DLQ record) or not at
        all, and then it goes to the DLQ with the exception named.
        """
        _key, _value, partition, offset = src
        where = f"{self.raw_topic}[{partition}]@{offset}"
        log.error(
            "ALERT sequencer rules failed on %s (%s: %s); the record goes to the DLQ as %r",
            where,
            type(exc).__name__,
            exc,
            DlqReason.INTERNAL.value,
            exc_info=exc,
        )
        here = (partition, offset)
        if (
            any((s.source_partition, s.source_offset) == here for s in out.sealed)
            or any((d.source_partition, d.source_offset) == here for d in out.dlq)
            or any(
                (h.source_partition, h.source_offset) == here
                for r in self._waiting
                if r in self.runs
                for h in self.runs[r].held.values()
            )
        ):
            return
        self._refuse(
            out,
            src,
            DlqReason.INTERNAL,
            f"{where}: the sequencer failed on this record ({type(exc).__name__}: {exc}); "
            "it is kept here unchanged, and the service went on",
        )

    def _apply(  # noqa: PLR0917 - positional: called once per event
        self,
        out: BatchOutput,
        key: bytes | None,
        value: bytes | None,
        partition: int,
        offset: int,
        now_us: int,
    ) -> None:
        src = (key, value, partition, offset)
        refuse = self._refuse
        if value is None:
            refuse(out, src, DlqReason.UNDECODABLE, "record has no value (tombstone)")
            return
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
            return
        # Both paths check the JSON here, with run_id and seq known: the DLQ record names them.
        try:
            check_canonical(request, field="request")
            check_canonical(response, field="response")
        except NonCanonicalJSONError as exc:
            where = f"{self.raw_topic}[{partition}]@{offset} seq {seq}"
            refuse(out, src, DlqReason.INVALID, f"{where}: {exc}", run_id=run_id, seq=seq)
            return
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
            return
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
            return
        run = self.runs.get(run_id)
        # The grammar at the run's first record: a run already in the book (restored, or
        # opened before the grammar) goes on, and only such runs take the C path (_cseal.c).
        if run is None and (problem := run_id_problem(run_id)) is not None:
            where = f"{self.raw_topic}[{partition}]@{offset} seq {seq}"
            refuse(out, src, DlqReason.INVALID, f"{where}: {problem}", run_id=run_id, seq=seq)
            return
        if key is None or key != (run.key if run is not None else run_id.encode("utf-8")):
            refuse(
                out,
                src,
                DlqReason.INVALID,
                f"key {key!r} is not the event's run_id; producers must key by run_id",
                run_id=run_id,
                seq=seq,
            )
            return
        if seq < 0:
            refuse(out, src, DlqReason.INVALID, f"seq {seq} is negative", run_id=run_id, seq=seq)
            return
        if kind is _GAP:
            refuse(
                out,
                src,
                DlqReason.INVALID,
                "GAP events are written by the sequencer only",
                run_id=run_id,
                seq=seq,
            )
            return
        want = run.partition if run is not None else partition_for(key, self.partitions)
        if want != partition:
            refuse(
                out,
                src,
                DlqReason.INVALID,
                f"run {run_id} belongs on partition {want} (murmur2), not {partition}; "
                "configure the producer with partitioner=murmur2_random",
                run_id=run_id,
                seq=seq,
            )
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
        if seq < run.next_seq:
            self._past(out, run, seq, value, src)
        elif run.finished:
            refuse(
                out,
                src,
                DlqReason.AFTER_FINISH,
                f"seq {seq} comes after RUN_FINISHED at seq {run.next_seq - 1}",
                run_id=run_id,
                seq=seq,
            )
        elif seq == run.next_seq:
            self._seal(out, run, seq, value, partition, offset, kind is _FINISHED)
            if run.held:
                self._drain(out, run)
        elif seq - run.next_seq > self.max_gap:
            refuse(
                out,
                src,
                DlqReason.OUT_OF_RANGE,
                f"seq {seq} is {seq - run.next_seq} past the next expected seq {run.next_seq} "
                f"(sequencer_max_gap={self.max_gap})",
                run_id=run_id,
                seq=seq,
            )
        elif len(run.gaps) >= MAX_GAP_RANGES and seq not in run.held:
            refuse(
                out,
                src,
                DlqReason.OUT_OF_RANGE,
                f"seq {seq} would open another gap after seq {run.next_seq - 1}, and run "
                f"{run_id} already has {len(run.gaps)} sealed gaps (its head must fit one "
                "Kafka record); send a run's events in order",
                run_id=run_id,
                seq=seq,
            )
        else:
            self._hold(
                out,
                run,
                seq=seq,
                value=value,
                partition=partition,
                offset=offset,
                now_us=now_us,
                src=src,
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
            self._refuse(
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
            self._refuse(
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
            self._refuse(
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
        self._refuse(
            out,
            src,
            DlqReason.CONFLICT,
            f"seq {seq} of finished run {run_id} is already sealed with different bytes",
            run_id=run_id,
            seq=seq,
        )

    def _past(
        self,
        out: BatchOutput,
        run: _Run,
        seq: int,
        value: bytes,
        src: _Source,
    ) -> None:
        refuse = self._refuse
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

    def _seal(  # noqa: PLR0917 - positional: called once per event
        self,
        out: BatchOutput,
        run: _Run,
        seq: int,
        raw: bytes,
        source_partition: int,
        source_offset: int,
        finishes: bool,
    ) -> None:
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

    def _drain(self, out: BatchOutput, run: _Run) -> None:
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
            self._seal(
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

    def _hold(
        self,
        out: BatchOutput,
        run: _Run,
        *,
        seq: int,
        value: bytes,
        partition: int,
        offset: int,
        now_us: int,
        src: _Source,
    ) -> None:
        refuse = self._refuse
        held = run.held.get(seq)
        if held is not None:
            if held.raw == value:
                out.duplicates += 1
            else:
                refuse(
                    out,
                    src,
                    DlqReason.CONFLICT,
                    f"seq {seq} is already held (behind a gap) with different bytes",
                    run_id=run.run_id,
                    seq=seq,
                )
            return
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
            self._drain(out, run)

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
                self._drain(out, run)

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
                self._drain(out, run)
            if run.finished:  # a held RUN_FINISHED was sealed by the drain
                continue
            log.warning(
                "run %s: no event for %.0fs; closing it with a RUN_FINISHED marker at seq %d",
                run.run_id,
                idle_s,
                run.next_seq,
            )
            raw = closed_event(run.run_id, run.next_seq, idle_s, self.sequencer_id)
            self._seal(
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
            self._seal(
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
