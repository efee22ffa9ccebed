"""The heads record: the sequencer's per-run state, as written to ``<prefix>.heads``.

The sequencer keeps one :class:`Head` per run in the compacted ``<prefix>.heads`` topic
(key = run_id, value = Avro single-object ``HeadState.v1``, written in the same Kafka
transaction as the sealed records it describes). Heads are co-partitioned with raw and
sealed: a run's head lives at ``partition_for(run_id, partitions)`` of every one of them.

``first_offset`` is **exact**: the sequencer learns the sealed offsets from the delivery
reports inside the transaction, before it writes the head in that same transaction, so a
committed head never points at an aborted record. ``start_offset`` of a :class:`RunLocation`
is that offset of seq 0 (records of other runs sharing the partition are interleaved after it;
filter by key).

Why Avro: heads are read by other components (replayer, operators' tools) and outlive
releases; a published, fingerprinted schema gives them the same evolution rules as events.
The record also carries events held behind a gap (``held``) so a crash loses none of them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tracevault.chain import genesis
from tracevault.schemas import MAGIC, Codec, avro_long

__all__ = [
    "GapRange",
    "Head",
    "HeldEvent",
    "decode_head",
    "encode_head",
    "head_v1_header",
    "plain_head_value",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class GapRange:
    """An inclusive seq range sealed as GAP markers (one GAP event per missing seq)."""

    missing_from: int
    missing_to: int

    def __contains__(self, seq: object) -> bool:
        return isinstance(seq, int) and self.missing_from <= seq <= self.missing_to


@dataclass(frozen=True, slots=True)
class HeldEvent:
    """A raw event that arrived past a gap, waiting for the gap to fill or to time out."""

    seq: int
    raw: bytes
    source_partition: int
    source_offset: int
    held_at: int  # micros since the epoch; the gap timeout counts from the oldest


@dataclass(frozen=True, slots=True)
class Head:
    """The chain head of one run after the last committed sequencer transaction.

    Every seq below ``next_seq`` is sealed, exactly once, at offsets ``first_offset`` (seq 0)
    .. ``last_offset`` (seq ``next_seq - 1``) of ``<prefix>.sealed`` partition ``partition``;
    ``last_hash`` is the hash of seq ``next_seq - 1`` (the genesis before seq 0 is sealed).
    """

    run_id: str
    next_seq: int
    last_hash: bytes
    finished: bool
    partition: int
    first_offset: int = -1
    last_offset: int = -1
    gaps: tuple[GapRange, ...] = ()
    held: tuple[HeldEvent, ...] = ()
    updated_at: int = 0
    sequencer_id: str = ""

    @classmethod
    def new(cls, run_id: str, partition: int) -> Head:
        """The head of a run nothing of which is sealed yet."""
        return cls(run_id, 0, genesis(run_id), False, partition)

    @property
    def last_seq(self) -> int:
        """The last sealed seq, -1 when nothing is sealed."""
        return self.next_seq - 1

    def in_gap(self, seq: int) -> bool:
        return any(seq in g for g in self.gaps)


_CODEC: Codec | None = None


def _codec() -> Codec:
    global _CODEC  # noqa: PLW0603 - built on first use, not at import
    if _CODEC is None:
        _CODEC = Codec("HeadState")
    return _CODEC


_V1_HEADER: bytes | None = None


def head_v1_header() -> bytes | None:
    """``C3 01`` + fingerprint when HeadState v1 is the current version (else None)."""
    global _V1_HEADER  # noqa: PLW0603 - computed on first use, not at import
    if _V1_HEADER is None:
        current = _codec().reader
        _V1_HEADER = MAGIC + current.fingerprint if current.version == 1 else b""
    return _V1_HEADER or None


def plain_head_value(  # noqa: PLR0917 - positional: called once per event
    prefix: bytes,
    next_seq: int,
    last_hash: bytes,
    finished: bool,
    partition: int,
    first_offset: int,
    last_offset: int,
    suffix: bytes,
) -> bytes:
    """HeadState v1 of a head with no gaps and nothing held, from pre-encoded pieces.

    ``prefix`` is :func:`head_v1_header` + the Avro string ``run_id``; ``suffix`` is the Avro
    long ``updated_at`` + the Avro string ``sequencer_id``; ``last_hash`` is 32 bytes. The
    sequencer keeps both per run and per transaction; :func:`encode_head` goes through here
    too, so its byte-for-byte test against the codec covers this layout.
    """
    return b"".join(
        (
            prefix,
            avro_long(next_seq),
            last_hash,
            b"\x01" if finished else b"\x00",
            avro_long(partition),
            avro_long(first_offset),
            avro_long(last_offset),
            b"\x00\x00",  # gaps, held: empty arrays
            suffix,
        )
    )


def encode_head(head: Head) -> bytes:
    """Single-object Avro (``HeadState.v1``) of ``head``: the value written to ``heads``.

    The sequencer writes one head per touched run per transaction, so the common shape (no
    gaps, nothing held) is written directly in v1's field order; a test pins it byte for
    byte to the codec, which writes every other shape.
    """
    header = head_v1_header()
    if head.gaps or head.held or header is None or len(head.last_hash) != 32:
        return _encode_head_avro(head)
    rid = head.run_id.encode("utf-8")
    sid = head.sequencer_id.encode("utf-8")
    return plain_head_value(
        header + avro_long(len(rid)) + rid,
        head.next_seq,
        head.last_hash,
        head.finished,
        head.partition,
        head.first_offset,
        head.last_offset,
        avro_long(head.updated_at) + avro_long(len(sid)) + sid,
    )


def _encode_head_avro(head: Head) -> bytes:
    rec: dict[str, Any] = {
        "run_id": head.run_id,
        "next_seq": head.next_seq,
        "last_hash": head.last_hash,
        "finished": head.finished,
        "partition": head.partition,
        "first_offset": head.first_offset,
        "last_offset": head.last_offset,
        "gaps": [{"missing_from": g.missing_from, "missing_to": g.missing_to} for g in head.gaps],
        "held": [
            {
                "seq": h.seq,
                "raw": h.raw,
                "source_partition": h.source_partition,
                "source_offset": h.source_offset,
                "held_at": h.held_at,
            }
            for h in head.held
        ],
        "updated_at": head.updated_at,
        "sequencer_id": head.sequencer_id,
    }
    return _codec().encode(rec)


def decode_head(data: bytes) -> Head:
    """Read a heads value; raises :class:`SchemaError` for bytes that are not a HeadState."""
    rec: Mapping[str, Any] = _codec().decode(data, what="heads value")
    return Head(
        run_id=rec["run_id"],
        next_seq=rec["next_seq"],
        last_hash=bytes(rec["last_hash"]),
        finished=rec["finished"],
        partition=rec["partition"],
        first_offset=rec["first_offset"],
        last_offset=rec["last_offset"],
        gaps=tuple(GapRange(g["missing_from"], g["missing_to"]) for g in rec["gaps"]),
        held=tuple(
            HeldEvent(
                h["seq"], bytes(h["raw"]), h["source_partition"], h["source_offset"], h["held_at"]
            )
            for h in rec["held"]
        ),
        updated_at=rec["updated_at"],
        sequencer_id=rec["sequencer_id"],
    )
