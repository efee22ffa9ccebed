"""One walk of a run's sealed values for the replayer's verify + rebuild: columns and events.

A rebuild needs, of each SealedEvent v1 value, the fields the checks read (run id, seq,
``prev_hash``, ``hash``, ``raw``) and ``raw`` decoded as a TraceEvent. Reading the value into
a row dict (``sealed_rows``) and then the rows again for the events walked every value twice
and built a dict per event that only the checks read. :func:`sealed_columns` walks each value
once: the checked fields go into columns, ``raw`` is decoded in the same pass, and the fields
after ``raw`` (``sealed_at``, ``source_partition``, ``source_offset``, ``sequencer_id``) are
validated, not built: one regular expression (:data:`_TRAILER`) matches exactly the varints
``read_long`` accepts there (a long of at most 10 bytes that fits 64 bits; an int of at most
5 bytes that fits 32 bits), and the sequencer id must be a whole UTF-8 string ending the value.

Like every walk here (``_guard.py``) it declines, returning None, on anything it does not
read exactly (a non-v1 value, a varint in an unusual width, a value that does not end where
its last field does); the caller then reads the rows with ``sealed_rows`` or the codec,
which decide. An event is None where ``fast_decode_event`` declines that ``raw``: the caller
decodes it with the codec, which names the problem. ``tests/schemas/test_fast_pinned.py``
pins the columns to fastavro's reading.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import NamedTuple

from tracevault.schemas._events import TraceEvent
from tracevault.schemas.fast._event import fast_decode_event
from tracevault.schemas.fast._guard import DECLINE
from tracevault.schemas.fast._sealed import _arm
from tracevault.schemas.fast._varint import read_long

__all__ = ["SealedColumns", "sealed_columns"]

_LONG = rb"(?:[\x80-\xff]{0,8}[\x00-\x7f]|[\x80-\xff]{9}[\x00\x01])"  # fits 64 bits
_INT = rb"(?:[\x80-\xff]{0,3}[\x00-\x7f]|[\x80-\xff]{4}[\x00-\x0f])"  # zig-zag fits 32 bits
#: sealed_at (long), source_partition (int), source_offset (long), in one C-level match.
_TRAILER = re.compile(_LONG + _INT + _LONG, re.DOTALL)


class SealedColumns(NamedTuple):
    """What checks 1-6 read of each sealed value, as columns, and each ``raw`` decoded."""

    run_ids: list[str]
    seqs: list[int]
    prev_hashes: list[bytes]
    hashes: list[bytes]
    raws: list[bytes]
    events: list[TraceEvent | None]


def sealed_columns(values: Sequence[bytes]) -> SealedColumns | None:
    """The columns of whole SealedEvent v1 values and their decoded events, or None.

    One flat loop on purpose: it runs once per event of a verified run.
    """
    header = _arm()
    if header is None:
        return None
    cols = SealedColumns([], [], [], [], [], [])
    add_rid, add_seq, add_raw = cols.run_ids.append, cols.seqs.append, cols.raws.append
    add_prev, add_hash, add_ev = cols.prev_hashes.append, cols.hashes.append, cols.events.append
    decode, trailer = fast_decode_event, _TRAILER.match
    rid_bytes, run_id = b"\x00", ""
    sid_bytes = b"\x00"  # the encoded sequencer id last seen (valid UTF-8)
    try:
        for v in values:
            if not v.startswith(header):
                return None
            end = len(v)
            if v.startswith(rid_bytes, 10):  # a run's values share their run id
                p = 10 + len(rid_bytes)
            else:
                n, q = read_long(v, 10)
                p = q + n
                if n < 0 or p > end:
                    return None
                run_id, rid_bytes = v[q:p].decode("utf-8"), v[10:p]
            # seq: a 1-3 byte varint, read byte by byte (cheaper than slicing a word)
            b = v[p]
            if b < 0x80:
                seq, p = (b >> 1) ^ -(b & 1), p + 1
            elif (c := v[p + 1]) < 0x80:
                z = (b & 0x7F) | c << 7
                seq, p = (z >> 1) ^ -(z & 1), p + 2
            elif (e := v[p + 2]) < 0x80:
                z = (b & 0x7F) | (c & 0x7F) << 7 | e << 14
                seq, p = (z >> 1) ^ -(z & 1), p + 3
            else:
                seq, p = read_long(v, p)
            q = p + 64
            if q > end:
                return None
            prev_hash, hash_ = v[p : p + 32], v[p + 32 : q]
            n = v[q]  # raw's length: values below 8 KiB take 1-2 bytes
            if n < 0x80:
                n, p = (n >> 1) ^ -(n & 1), q + 1
            elif v[q + 1] < 0x80:
                n = (n & 0x7F) | v[q + 1] << 7
                n, p = (n >> 1) ^ -(n & 1), q + 2
            else:
                n, p = read_long(v, q)
            q = p + n
            if n < 0 or q > end:
                return None
            raw = v[p:q]
            m = trailer(v, q)
            if m is None:
                return None
            p = m.end()
            if not (v.startswith(sid_bytes, p) and p + len(sid_bytes) == end):
                n, q = read_long(v, p)  # another sequencer: read its id whole
                if n < 0 or q + n != end:
                    return None
                v[q:end].decode("utf-8")
                sid_bytes = v[p:end]
            add_rid(run_id)
            add_seq(seq)
            add_prev(prev_hash)
            add_hash(hash_)
            add_raw(raw)
            add_ev(decode(raw))
    except DECLINE:
        return None
    return cols
