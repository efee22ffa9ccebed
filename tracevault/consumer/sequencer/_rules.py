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

State lives in mutable ``_Run`` objects owned by one :class:`RunBook`; the transactional loop
throws the whole book away and restores it from the heads topic when a transaction aborts,
so nothing here has to be undoable.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from tracevault.chain import genesis, link
from tracevault.consumer.sequencer._records import DlqReason, DlqRecord, gap_event
from tracevault.errors import NonCanonicalJSONError, SchemaError, ServiceUnavailableError
from tracevault.heads import GapRange, Head, HeldEvent
from tracevault.kafka import partition_for
from tracevault.schemas import EventKind, check_canonical, decode_event
from tracevault.schemas.fast import peek_event

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
#: The Recorder's bound on a run id (UTF-8 bytes); it is the Kafka key and names archive paths.
MAX_RUN_ID_BYTES = 255
#: Key plus value of a refused record copied into its DLQ record; beyond this only their
#: sizes and SHA-256 go in (the DLQ record with its headers, at most about 5.5 KB, must fit
#: the same limit). Every event the rules accept (then hold) fits, with its key.
MAX_DLQ_COPY_BYTES = MAX_RAW_BYTES + MAX_RUN_ID_BYTES

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
        "run_id",
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

    def __bool__(self) -> bool:
        return bool(self.sealed or self.dlq or self.touched or self.duplicates)


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
    ) -> None:
        self.raw_topic = raw_topic
        self.partitions = partitions
        self.sequencer_id = sequencer_id
        self.gap_timeout_us = gap_timeout_us
        self.max_gap = max_gap
        self._history = history
        self.runs: dict[str, _Run] = {}
        self._waiting: set[str] = set()  # runs with held events

    # -- ownership ---------------------------------------------------------------------------

    def restore(self, heads: Iterable[Head]) -> None:
        for head in heads:
            run = _Run(head)
            self.runs[head.run_id] = run
            if run.held:
                self._waiting.add(run.run_id)

    def drop_partitions(self, partitions: Iterable[int]) -> None:
        gone = set(partitions)
        for run_id in [r for r, run in self.runs.items() if run.partition in gone]:
            del self.runs[run_id]
            self._waiting.discard(run_id)

    def clear(self) -> None:
        self.runs.clear()
        self._waiting.clear()

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
        if run is None and not 0 < len(run_id.encode("utf-8")) <= MAX_RUN_ID_BYTES:
            refuse(
                out,
                src,
                DlqReason.INVALID,
                f"run_id is {len(run_id.encode('utf-8'))} bytes; a run id is 1 to "
                f"{MAX_RUN_ID_BYTES} bytes of text (as the Recorder enforces)",
                run_id=run_id,
                seq=seq,
            )
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
            run = self.runs[run_id] = _Run(Head.new(run_id, partition))
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
        """Seal GAP markers for every gap whose oldest held event has waited too long."""
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
