"""The rules' state: a run's mutable form, and what one batch produces (no logic here).

The C path (``_cseal.c``) reads and writes ``_Run``'s slots by name and builds ``SealOut``
tuples itself: a slot renamed here is renamed there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from tracevault.chain import genesis
from tracevault.heads import GapRange, Head, HeldEvent
from tracevault.services.sequencer._records import DlqRecord

__all__ = ["BatchOutput", "FactsLoader", "HistoryLoader", "RunFacts", "SealOut"]


class _Run:
    """Mutable state of one run (the in-memory form of a :class:`Head`)."""

    __slots__ = (
        "agent_key",
        "conflicts",
        "enc",
        "finished",
        "first_offset",
        "gaps",
        "hashes",
        "held",
        "hijacked",
        "history_complete",
        "key",
        "last_hash",
        "last_offset",
        "leaf",
        "next_seq",
        "noted",
        "partition",
        "persisted",
        "run_id",
        "seen_us",
    )

    def __init__(self, head: Head) -> None:
        self.run_id = head.run_id
        # (name, key id) of the agent key that signed seq 0 (None: none did); a run restored
        # past seq 0 reads it from its sealed seq 0 when a note needs it (``_attest``,
        # docs/identity.md)
        self.agent_key: tuple[str, bytes] | None = None if head.next_seq == 0 else ("", b"")
        # the seq of the last event whose note held (a restored run: its last sealed seq, so
        # the coverage check counts from there until its next note names its key; parked far
        # ahead once a stretch no note covers is contested, until the next note)
        self.noted = head.next_seq - 1
        # (seq, raw partition, raw offset, bytes or None) of the run's events refused as
        # ``conflict`` (in memory only): a later note of the run's key that proves a hijack
        # names which of them are its agent's own (``_attest``); None until the first one
        self.conflicts: list[tuple[int, int, int, bytes | None]] | None = None
        # a contested record already names this run as hijacked
        self.hijacked = False
        self.key = head.run_id.encode("utf-8")  # the Kafka key of its records
        # the writer's per-run cache of encoded pieces (opaque here; None until first use)
        self.enc: tuple[bytes, bytes] | None = None
        # the writer's cached start of the run's log leaves (tracevault.transparency.leaf_prefix)
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
#: What a run that left memory needs to judge a hijack's evidence, read with its history:
#: (seq 0's raw bytes or None, the seqs the sequencer wrote itself: GAP and closing markers).
RunFacts = tuple[bytes | None, frozenset[int]]
FactsLoader = Callable[[str, int, int, int], RunFacts]


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
    #: agent notes that did not match their run (``_attest``): each an ALERT and a record
    contested: int = 0

    def __bool__(self) -> bool:
        return bool(self.sealed or self.dlq or self.touched or self.duplicates or self.expired)
