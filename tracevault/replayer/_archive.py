"""Loading a run from the archive: one listing of ``runs/<run>/``, then its objects.

Every segment is read as Avro OCF of SealedEvent rows (directly when it has the archiver's
own shape, else with fastavro; ``sealed_at`` may come back as micros or a datetime); a segment
that cannot be read (truncated, corrupted) fails here, named, because nothing after it can be
trusted. Receipts are fetched as bytes and parsed by the verifier, which decides whether a
disagreement is the receipt's fault or the segment's.
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Sequence
from io import BytesIO
from typing import Any, Protocol

from fastavro import reader as ocf_reader

from tracevault.archive import ObjectInfo
from tracevault.archive.layout import (
    FinalReceipt,
    SegmentReceipt,
    final_key,
    parse_segment_key,
    receipt_key,
    run_prefix,
)
from tracevault.errors import ArchiveError, NotFoundError
from tracevault.replayer._checks import fail
from tracevault.replayer._nogc import gc_paused
from tracevault.replayer._records import SealedRows
from tracevault.replayer._results import LoadedRun, SegmentInfo
from tracevault.schemas.fast import segment_rows

__all__ = ["ReadableStore", "load_from_archive", "read_segment_rows"]


class ReadableStore(Protocol):
    """The reading half of ``ObjectStore``: all the replayer needs (bundles implement it too)."""

    @property
    def url(self) -> str: ...

    def get(self, key: str) -> bytes: ...

    def list(self, prefix: str) -> Sequence[ObjectInfo]: ...


def read_segment_rows(data: bytes, key: str, first_seq: int) -> list[dict[str, Any]]:
    """The SealedEvent rows of one segment; ChainError naming ``key`` if it is unreadable.

    Segments in the archiver's own shape are read directly (``schemas.fast.segment_rows``);
    anything else, and any segment that reader finds unusual, is read and judged by fastavro.
    """
    fast = segment_rows(data)
    if fast is not None:
        return fast
    try:
        rows = [r for r in ocf_reader(BytesIO(data)) if isinstance(r, dict)]
    except (ValueError, EOFError, KeyError, IndexError, TypeError, zlib.error) as exc:
        raise fail(
            "A1 segments",
            first_seq,
            key,
            f"the segment is not a readable Avro container file ({type(exc).__name__}: {exc}): "
            "it was truncated or corrupted",
        ) from exc
    return rows


def _receipt(data: bytes | None, key: str) -> SegmentReceipt | None:
    if data is None:
        return None
    try:
        return SegmentReceipt.from_json(data, key)
    except (ArchiveError, TypeError):
        return None  # the verifier reports it, naming the key


def load_from_archive(store: ReadableStore, run_id: str) -> LoadedRun:
    """Every object of ``run_id`` in ``store``: segments in seq order, receipts, final receipt."""
    with gc_paused():
        return _load(store, run_id)


def _load(store: ReadableStore, run_id: str) -> LoadedRun:
    infos = store.list(run_prefix(run_id))
    keys = {i.key for i in infos}
    if not keys:
        raise NotFoundError(
            f"run {run_id!r} is not in the archive {store.url} (nothing under "
            f"{run_prefix(run_id)}); check the run id and that the archiver is running"
        )
    segs = sorted(
        ((rng, k) for k in keys if (rng := parse_segment_key(k)) is not None),
        key=lambda x: x[0],
    )
    rows: list[dict[str, Any]] = []
    objects: list[str] = []
    infos_out: list[SegmentInfo] = []
    for (first, last), key in segs:
        data = store.get(key)
        seg_rows = read_segment_rows(data, key, first)
        rkey = receipt_key(run_id, first, last)
        rbytes = store.get(rkey) if rkey in keys else None
        infos_out.append(
            SegmentInfo(
                key=key,
                first_seq=first,
                last_seq=last,
                sha256=hashlib.sha256(data).hexdigest(),
                size=len(data),
                receipt_key=rkey,
                receipt=_receipt(rbytes, rkey),
                receipt_bytes=rbytes,
                count=len(seg_rows),
            )
        )
        rows.extend(seg_rows)
        objects.extend([key] * len(seg_rows))
    fkey = final_key(run_id)
    fbytes = store.get(fkey) if fkey in keys else None
    final: FinalReceipt | None = None
    if fbytes is not None:
        try:
            final = FinalReceipt.from_json(fbytes, fkey)
        except (ArchiveError, TypeError):
            final = None
    return LoadedRun(
        run_id=run_id,
        source="archive",
        records=SealedRows(rows),
        objects=objects,
        segments=tuple(infos_out),
        final_receipt=final,
        final_receipt_key=fkey,
        final_receipt_bytes=fbytes,
    )
