"""The encode dispatch: a batch's sealed values, its log leaves and its plain heads.

Each goes through the C path (``_cseal.values``, ``_cseal.heads``) when the caller passes
the built module and the current layouts are the v1 ones it writes; else Python writes the
same bytes (tests/services/sequencer/test_cseal.py). The caller passes the module so that
one switch (``_step._cseal``) turns the C path off for both.
"""

from __future__ import annotations

import hashlib
import struct
from types import ModuleType
from typing import Any

from tracevault.heads import head_v1_header, plain_head_value
from tracevault.schemas import avro_long
from tracevault.services.sequencer._records import (
    avro_str,
    sealed_v1,
    sealed_v1_header,
    sealed_value,
)
from tracevault.services.sequencer._rules import BatchOutput
from tracevault.transparency import leaf_prefix

__all__ = ["encode_values", "head_values", "leaves", "run_enc", "run_leaf"]

_U64 = struct.Struct(">Q").pack
_sha256 = hashlib.sha256


def encode_values(
    out: BatchOutput, sealed_at: int, sid: str, cseal: ModuleType | None
) -> tuple[list[bytes], dict[int, list[bytes]]]:
    """The batch's sealed values, and its log leaf hashes by partition, in order: in C
    (``cseal.values``) when it is given, else here; the same bytes either way."""
    if sealed_v1_header() is None:  # a newer SealedEvent is current: the codec writes it
        values = [
            sealed_value(
                run_id=rec.run.run_id,
                seq=rec.seq,
                prev_hash=rec.prev_hash,
                hash_=rec.hash,
                raw=rec.raw,
                source_partition=rec.source_partition,
                source_offset=rec.source_offset,
                sequencer_id=sid,
                sealed_at=sealed_at,
            )
            for rec in out.sealed
        ]
        return values, leaves(out)
    at = avro_long(sealed_at)
    sid_enc = avro_str(sid)
    if cseal is not None:
        try:
            done: tuple[list[bytes], dict[int, list[bytes]]] = cseal.values(
                out.sealed, at, sid_enc, run_enc, run_leaf
            )
            return done
        except ValueError:  # a record sealed_v1 does not take: Python says which
            pass
    values = []
    for rec in out.sealed:
        run = rec.run
        enc = run.enc
        if enc is None:
            enc = run_enc(run)
        values.append(
            sealed_v1(
                enc[0],
                rec.seq,
                rec.prev_hash,
                rec.hash,
                rec.raw,
                at,
                rec.source_partition,
                rec.source_offset,
                sid_enc,
            )
        )
    return values, leaves(out)


def head_values(runs: list[Any], suffix: bytes, cseal: ModuleType | None) -> list[bytes | None]:
    """HeadState v1 of each run whose head is the plain shape (not finished, no gaps,
    nothing held), None for the others: in C (``cseal.heads``) when it is given."""
    if head_v1_header() is None:  # a newer HeadState is current: the codec writes all
        return [None] * len(runs)
    if cseal is not None:
        try:
            done: list[bytes | None] = cseal.heads(runs, suffix, run_enc)
            return done
        except ValueError:  # a run the plain layout does not take: Python says which
            pass
    values: list[bytes | None] = []
    for run in runs:
        if run.finished or run.gaps or run.held or len(run.last_hash) != 32:
            values.append(None)
            continue
        enc = run.enc
        if enc is None:
            enc = run_enc(run)
        values.append(
            plain_head_value(
                enc[1],
                run.next_seq,
                run.last_hash,
                run.finished,
                run.partition,
                run.first_offset,
                run.last_offset,
                suffix,
            )
        )
    return values


def run_enc(run: Any) -> tuple[bytes, bytes]:
    """The run's encoded value prefixes, (SealedEvent v1, HeadState v1), cached on the run.
    Each is used only while its layout is the current one (``encode_values``,
    ``head_values``)."""
    rid = avro_str(run.run_id)
    enc = ((sealed_v1_header() or b"") + rid, (head_v1_header() or b"") + rid)
    run.enc = enc
    return enc


def run_leaf(run: Any) -> bytes:
    """The run's leaf prefix (tracevault.transparency.leaf_prefix), cached on the run."""
    lp: bytes = leaf_prefix(run.run_id)
    run.leaf = lp
    return lp


def leaves(out: BatchOutput) -> dict[int, list[bytes]]:
    """The log leaf hashes of the batch's sealed records, by partition, in order."""
    by_part: dict[int, list[bytes]] = {}
    for rec in out.sealed:
        run = rec.run
        lp = run.leaf
        if lp is None:
            lp = run_leaf(run)
        hashes = by_part.get(run.partition)
        if hashes is None:
            hashes = by_part[run.partition] = []
        hashes.append(_sha256(lp + _U64(rec.seq) + rec.hash).digest())
    return by_part
