"""Reading one run back from the archive: one listing of ``runs/<run>/``, then the objects.

This is what the replayer builds on. It reports what the archive *says*; checking the chain
and the receipts against the bytes is the verifier's job (``check_run`` does the archive's
own consistency checks, which the archiver's crash test and ``archive verify`` use).

A segment without its receipt is the trace of a crash between the two writes: it is listed in
``unreceipted`` and never among ``segments``, so nobody takes it as complete. The archiver
writes the missing receipt when it next sees the run.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from tracevault.archive._segment import read_segment
from tracevault.archive._store import ObjectStore
from tracevault.archive.layout import (
    FinalReceipt,
    SegmentReceipt,
    final_key,
    parse_segment_key,
    receipt_key,
    run_prefix,
)
from tracevault.chain import genesis, link
from tracevault.errors import ChainError, NotFoundError
from tracevault.schemas import SealedEvent

__all__ = ["RunObjects", "SegmentObject", "check_run", "list_run", "read_run_objects"]


@dataclass(frozen=True, slots=True)
class SegmentObject:
    """One receipted segment: its key, seq range, exact bytes and receipt."""

    key: str
    first_seq: int
    last_seq: int
    data: bytes
    receipt: SegmentReceipt

    def events(self) -> list[SealedEvent]:
        """The segment's SealedEvents (decoded with fastavro)."""
        return read_segment(self.data, key=self.key)


@dataclass(frozen=True, slots=True)
class RunListing:
    """The keys of one run, from one listing, before anything is fetched."""

    run_id: str
    segments: tuple[tuple[str, int, int], ...]  # (key, first, last) with a receipt, seq order
    unreceipted: tuple[str, ...]
    has_final: bool


@dataclass(frozen=True, slots=True)
class RunObjects:
    """A run as archived: receipted segments in seq order and the final receipt, if any."""

    run_id: str
    segments: tuple[SegmentObject, ...]
    final: FinalReceipt | None
    unreceipted: tuple[str, ...] = ()

    @property
    def complete(self) -> bool:
        """The run finished and its final receipt is written."""
        return self.final is not None

    def events(self) -> list[SealedEvent]:
        """Every archived SealedEvent of the run, in seq order."""
        return [e for s in self.segments for e in s.events()]


def list_run(store: ObjectStore, run_id: str) -> RunListing:
    """Classify the keys under ``runs/<run>/`` (one listing); nothing is fetched."""
    keys = {i.key for i in store.list(run_prefix(run_id))}
    segs: list[tuple[str, int, int]] = []
    unreceipted: list[str] = []
    for key in sorted(keys):
        rng = parse_segment_key(key)
        if rng is None:
            continue
        if receipt_key(run_id, *rng) in keys:
            segs.append((key, *rng))
        else:
            unreceipted.append(key)
    segs.sort(key=lambda s: (s[1], s[2]))
    return RunListing(run_id, tuple(segs), tuple(unreceipted), final_key(run_id) in keys)


def read_run_objects(store: ObjectStore, run_id: str) -> RunObjects:
    """The run's segments (bytes + receipts) in seq order and its final receipt.

    ``NotFoundError`` naming the run when the archive holds nothing for it.
    """
    listing = list_run(store, run_id)
    if not listing.segments and not listing.unreceipted and not listing.has_final:
        raise NotFoundError(
            f"run {run_id!r} is not in the archive {store.url}; check the run id "
            "(tracevault archive ls) and that the archiver is running"
        )
    segments = []
    for key, first, last in listing.segments:
        rkey = receipt_key(run_id, first, last)
        receipt = SegmentReceipt.from_json(store.get(rkey), rkey)
        segments.append(SegmentObject(key, first, last, store.get(key), receipt))
    final = None
    if listing.has_final:
        fkey = final_key(run_id)
        final = FinalReceipt.from_json(store.get(fkey), fkey)
    return RunObjects(run_id, tuple(segments), final, listing.unreceipted)


def check_run(run: RunObjects, *, decode: bool = True) -> int:
    """Check a run's archive is consistent; return its event count or raise ``ChainError``.

    Checks, in order: (1) each segment's bytes match its receipt's sha256; (2) receipts agree
    with their keys (run, seq range, count); (3) ranges are contiguous from seq 0 and each
    segment's first_prev_hash is the previous last_hash (genesis for the first); (4) with
    ``decode``, the records are the receipt's seqs in order and hash-link; (5) the final
    receipt, if present, lists exactly these segments and agrees on count and last hash.
    """
    prev_hash = genesis(run.run_id).hex()
    expect = 0
    total = 0
    for seg in run.segments:
        r = seg.receipt
        if hashlib.sha256(seg.data).hexdigest() != r.sha256:
            raise ChainError(f"segment {seg.key}: sha256 differs from its receipt", obj=seg.key)
        if (r.run_id, r.segment, r.first_seq, r.last_seq) != (
            run.run_id,
            seg.key,
            seg.first_seq,
            seg.last_seq,
        ) or r.count != seg.last_seq - seg.first_seq + 1:
            raise ChainError(f"receipt of {seg.key} does not match its key", obj=seg.key)
        if seg.first_seq != expect:
            raise ChainError(
                f"segment {seg.key} starts at seq {seg.first_seq}, expected {expect} "
                "(hole or overlap)",
                seq=expect,
                obj=seg.key,
            )
        if r.first_prev_hash != prev_hash:
            raise ChainError(
                f"segment {seg.key}: first_prev_hash does not follow the previous segment",
                seq=seg.first_seq,
                obj=seg.key,
            )
        if decode:
            _check_records(seg, prev_hash)
        prev_hash = r.last_hash
        expect = seg.last_seq + 1
        total += r.count
    if run.final is not None:
        f = run.final
        keys = [s.key for s in run.segments]
        if f.segments != keys or f.count != total or f.last_seq != expect - 1:
            raise ChainError(
                f"final receipt of run {run.run_id!r} lists {len(f.segments)} segments / "
                f"{f.count} events, the archive holds {len(keys)} / {total}",
                obj=f"{run.segments[0].key if run.segments else run.run_id}",
            )
        if f.last_hash != prev_hash:
            raise ChainError(f"final receipt of run {run.run_id!r}: last_hash differs")
    return total


def _check_records(seg: SegmentObject, prev_hex: str) -> None:
    prev = bytes.fromhex(prev_hex)
    seq = seg.first_seq
    for ev in seg.events():
        if ev.seq != seq or ev.run_id != seg.receipt.run_id:
            raise ChainError(
                f"segment {seg.key}: record {ev.run_id}/{ev.seq} where seq {seq} was expected",
                seq=seq,
                obj=seg.key,
            )
        if ev.prev_hash != prev or link(prev, ev.raw) != ev.hash:
            raise ChainError(f"segment {seg.key}: chain broken at seq {seq}", seq=seq, obj=seg.key)
        prev = ev.hash
        seq += 1
    if seq != seg.last_seq + 1 or prev.hex() != seg.receipt.last_hash:
        raise ChainError(
            f"segment {seg.key}: holds seqs up to {seq - 1}, its receipt says {seg.last_seq}",
            seq=seq,
            obj=seg.key,
        )
