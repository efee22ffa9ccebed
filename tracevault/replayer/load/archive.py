"""Loading a run from the archive: one listing of ``runs/<run>/``, then its objects.

Every segment is read as Avro OCF of SealedEvent rows (directly when it has the archiver's
own shape, else with fastavro; ``sealed_at`` may come back as micros or a datetime); a segment
that cannot be read (truncated, corrupted) fails here, named, because nothing after it can be
trusted. Receipts are fetched as bytes and parsed by the verifier, which decides whether a
disagreement is the receipt's fault or the segment's.

A store that keeps versions (S3) is read through its ``history``: each object's original,
locked version is what is verified, and any later version or delete marker over it fails
check A0, naming the object: it is what overwriting or deleting a locked object leaves. Only
the objects the verification reads are checked (the run's own prefix, and the log objects
``run_log_keys`` names, one version listing each), so a run's check does not cost more as
the partition's log grows.
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from io import BytesIO
from typing import Any, NoReturn, Protocol, runtime_checkable

from fastavro import reader as ocf_reader

from tracevault.archive import (
    LOST,
    Hole,
    ObjectInfo,
    ObjectVersion,
    parse_hole_key,
    read_log_head,
    read_log_run,
    run_index_keys,
    run_log_keys,
)
from tracevault.archive.layout import (
    FinalReceipt,
    SegmentReceipt,
    final_key,
    parse_segment_key,
    receipt_key,
    run_id_of_segment,
    run_prefix,
)
from tracevault.archive.tlog import RunIndex, checkpoint_prefix, parse_checkpoint_key
from tracevault.errors import ArchiveError, ChainError, NotFoundError, SchemaError
from tracevault.replayer._records import SealedRows, sealed_of
from tracevault.replayer._results import LoadedRun, SegmentInfo
from tracevault.replayer.load._nogc import gc_paused
from tracevault.replayer.load.checks import fail
from tracevault.schemas import Codec, SealedEvent
from tracevault.schemas.fast import sealed_columns, sealed_rows, segment_rows
from tracevault.transparency import contested_prefix

__all__ = [
    "ReadableStore",
    "VersionedStore",
    "load_from_archive",
    "load_head",
    "read_segment_rows",
    "sealed_reader",
]


class ReadableStore(Protocol):
    """The reading half of ``ObjectStore``: all the replayer needs (bundles implement it too)."""

    @property
    def url(self) -> str: ...

    def get(self, key: str) -> bytes: ...

    def list(self, prefix: str) -> Sequence[ObjectInfo]: ...


@runtime_checkable
class VersionedStore(ReadableStore, Protocol):
    """A store that can show every version of a key (``ObjectStore``; bundles cannot)."""

    def get(self, key: str, *, version_id: str | None = None) -> bytes: ...

    def history(self, prefix: str, *, start_after: str = "") -> list[ObjectVersion]: ...

    def versions(self, key: str) -> list[ObjectVersion]: ...

    @property
    def keeps_versions(self) -> bool: ...


# version listings in flight at once when checking a run's log objects (one per object)
_PARALLEL = 8


def _tampered(key: str, orig: ObjectVersion | None, later: list[ObjectVersion]) -> ChainError:
    markers = sum(v.delete_marker for v in later)
    rng = parse_segment_key(key)
    return fail(
        "A0 versions",
        None if rng is None else rng[0],
        key,
        f"{len(later) - markers} later version(s) and {markers} delete marker(s) lie "
        f"over the locked original (version {None if orig is None else orig.version_id}): "
        "the object was overwritten or deleted outside the archiver (tampering)",
    )


class _Originals:
    """A versioned store read at each object's original version (check A0 on what is read).

    Under ``prefix`` (the run's own ``runs/<run>/``) one history listing checks every key up
    front. Any other key (the partition log's tiles, bundles and checkpoints) is checked on
    its own, with one version listing of exactly that key: ahead of reading by ``check``
    (the keys a verify will read, in parallel), else when first read. A0 so covers exactly
    the objects the run's verification reads, and its cost does not grow with the rest of
    the log (docs/log.md, "Archive").
    """

    def __init__(self, store: VersionedStore, prefix: str) -> None:
        self._store = store
        self._prefix = prefix
        self._first: dict[str, ObjectVersion] = {}
        self._listed: dict[str, list[ObjectInfo]] = {}
        layered: dict[str, list[ObjectVersion]] = {}
        for v in store.history(prefix):
            if v.key not in self._first:
                self._first[v.key] = v
            else:
                layered.setdefault(v.key, []).append(v)
        for key, later in sorted(layered.items()):
            raise _tampered(key, self._first[key], later)

    @property
    def url(self) -> str:
        return self._store.url

    def check(self, keys: Iterable[str]) -> None:
        """A0 over ``keys`` outside the eagerly checked prefix, one listing per key."""
        todo = sorted({k for k in keys if k not in self._first and not self._eager(k)})
        if not todo:
            return
        with ThreadPoolExecutor(min(_PARALLEL, len(todo))) as pool:
            found = list(pool.map(self._store.versions, todo))
        for key, versions in zip(todo, found, strict=True):
            if versions:
                self._first[key] = versions[0]
                if len(versions) > 1 or versions[0].delete_marker:
                    raise _tampered(key, versions[0], versions[1:])

    def _eager(self, key: str) -> bool:
        return key.startswith(self._prefix)

    def get(self, key: str) -> bytes:
        if key not in self._first and not self._eager(key):
            self.check([key])
            if key not in self._first:
                raise NotFoundError(f"object {key} does not exist in {self.url}")
        v = self._first.get(key)
        return self._store.get(key, version_id=None if v is None else v.version_id)

    def list(self, prefix: str) -> list[ObjectInfo]:
        """The run's own keys from its history; any other prefix (a log's checkpoints) as
        the store lists it now, plus one version listing of the keys after the newest listed:
        a newer one that only a delete marker hides is tampering."""
        if self._eager(prefix):
            return [
                ObjectInfo(k, v.size)
                for k, v in sorted(self._first.items())
                if k.startswith(prefix) and not v.delete_marker
            ]
        got = self._listed.get(prefix)
        if got is None:
            got = self._listed[prefix] = list(self._store.list(prefix))
            after = got[-1].key if got else ""
            hidden: dict[str, list[ObjectVersion]] = {}
            for v in self._store.history(prefix, start_after=after):
                hidden.setdefault(v.key, []).append(v)
            for key, versions in sorted(hidden.items()):
                if any(v.delete_marker for v in versions):
                    orig = next((v for v in versions if not v.delete_marker), None)
                    raise _tampered(key, orig, [v for v in versions if v is not orig])
        return got


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


def load_head(store: ReadableStore, run_id: str, n: int) -> tuple[list[SealedEvent], int] | None:
    """The first ``n`` sealed records of ``run_id`` and how many the archive lists, read from
    the first objects only (the static log's first index objects and data bundles, or the
    first segments), or None when the archive has no object of the run.

    NOT verified, and read at each object's current version: what the desk shows under
    "verifying…" while ``load_from_archive`` and ``verify`` read and prove the whole run
    (docs/desk.md, "The UI"). Unreadable objects raise as the full load would.
    """
    keys = sorted(i.key for i in store.list(run_prefix(run_id)))
    if not keys:
        return None
    index_keys = run_index_keys(keys)
    if index_keys:
        try:
            head = read_log_head(store.get, run_id, index_keys, n)
        except NotFoundError as exc:
            raise ArchiveError(f"run {run_id!r}: {exc}") from exc
        seqs = range(len(head.values))
        rows = sealed_reader(run_id, seqs, head.objects)(head.values)
        return [sealed_of(r) for r in rows], head.total
    segs = sorted((rng, k) for k in keys if (rng := parse_segment_key(k)) is not None)
    got: list[dict[str, Any]] = []
    for (first, _), key in segs:
        if len(got) >= n:
            break
        got.extend(read_segment_rows(store.get(key), key, first))
    total = segs[-1][0][1] + 1 if segs else 0
    return [sealed_of(r) for r in got[:n]], total


def find_contested(store: ReadableStore, run_id: str) -> tuple[LoadedRun, ...]:
    """The sequencer's contested records naming ``run_id``, found by one listing of the
    ids they take (``tracevault.transparency.contested_prefix``), each loaded like a run."""
    runs = "runs/"
    listed = store.list(run_prefix(contested_prefix(run_id)).removesuffix("/"))
    ids = {run_id_of_segment(i.key[len(runs) :].partition("/")[0]) for i in listed}
    return tuple(load_from_archive(store, cid) for cid in sorted(c for c in ids if c))


def _load_log(store: ReadableStore, run_id: str, index_keys: list[str]) -> LoadedRun:
    """A run of the static-log layout: records from the data bundles, with its log evidence.

    On a versioned store each log object the verification reads (tiles, bundles,
    checkpoints: ``run_log_keys``) is read at its original version and checked first (A0:
    a later version or a delete marker over one is named as tampering)."""
    if isinstance(store, _Originals):
        _check_log_objects(store, index_keys)
    try:
        lr = read_log_run(
            store.get,
            lambda prefix: [i.key for i in store.list(prefix)],
            run_id,
            index_keys,
        )
    except ArchiveError as exc:
        raise fail("A1 log", None, getattr(exc, "obj", None) or index_keys[-1], str(exc)) from exc
    if lr.lost is not None:
        raise fail("A5 hole", *lr.lost)
    if lr.unindexed:
        leaf, seq, ekey = lr.unindexed[0]
        raise fail(
            "A4 index",
            seq,
            ekey,
            f"leaf {leaf} of the log holds run {run_id} seq {seq} but no index object of the "
            f"run lists it ({len(lr.unindexed)} such leaves): the run's last index object(s) "
            "were deleted (the tail of the run is hidden)",
        )
    objects = list(lr.objects)
    seqs = getattr(lr.evidence.leaves, "seqs", None) or range(len(lr.values))
    return LoadedRun(
        run_id=run_id,
        source="archive",
        records=SealedRows(
            values=lr.values, read=sealed_reader(run_id, seqs, objects), walk=sealed_columns
        ),
        objects=objects,
        log_evidence=lr.evidence,
        log_index_keys=lr.index_keys,
        log_head=lr.head if lr.finished else None,
        expected_finished=True if lr.finished else None,
    )


def _check_log_objects(store: _Originals, index_keys: list[str]) -> None:
    """A0 over the log objects the run's verification will read, before reading any.

    Anything unreadable here is left for ``read_log_run`` to name; a key it reads that
    this did not foresee is checked when read."""
    try:
        indexes = [RunIndex.from_json(store.get(k), k) for k in index_keys]
    except (ArchiveError, NotFoundError):
        return
    if not indexes:
        return
    cps = store.list(checkpoint_prefix(indexes[0].log))
    newest = parse_checkpoint_key(cps[-1].key) if cps else None
    if newest is not None:
        store.check(run_log_keys(indexes, newest))


def sealed_reader(
    run_id: str, seqs: Sequence[int], objects: Sequence[str], *, fast: bool = True
) -> Callable[[Sequence[bytes]], list[dict[str, Any]]]:
    """How a run's sealed values become rows: the v1 fast path (``fast``), else the codec.

    The codec decides what is readable: a value it refuses fails check A1 naming the run,
    the seq (from the run's index) and the data bundle it came from.
    """

    def read(values: Sequence[bytes]) -> list[dict[str, Any]]:
        rows = sealed_rows(values) if fast else None
        if rows is not None:
            return rows
        codec, out = _sealed_codec(), []
        for seq, v, o in zip(seqs, values, objects, strict=True):
            try:
                out.append(codec.decode(v, what=f"run {run_id} seq {seq} in {o}"))
            except SchemaError as exc:
                what = f"run {run_id} seq {seq} is not a readable SealedEvent ({exc})"
                raise fail("A1 log", seq, o, what) from exc
        return out

    return read


_CODEC: Codec | None = None


def _sealed_codec() -> Codec:
    global _CODEC  # noqa: PLW0603 - built on first use, not at import
    if _CODEC is None:
        _CODEC = Codec("SealedEvent")
    return _CODEC


def originals(store: ReadableStore, run_id: str) -> ReadableStore:
    """``store`` as a run's verification reads it: on a store that keeps versions, every
    object at its locked original version, anything layered over one named (check A0)."""
    if isinstance(store, VersionedStore) and store.keeps_versions:
        return _Originals(store, run_prefix(run_id))
    return store


def _load(store: ReadableStore, run_id: str) -> LoadedRun:
    store = originals(store, run_id)
    infos = store.list(run_prefix(run_id))
    keys = {i.key for i in infos}
    if not keys:
        _not_found(store, run_id)
    index_keys = run_index_keys(sorted(keys))
    if index_keys:
        return _load_log(store, run_id, index_keys)
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


def _not_found(store: ReadableStore, run_id: str) -> NoReturn:
    """The run has no object: say so, and name the holes that may have taken it.

    Only a hole whose records were gone (``gone``, ``unread``) can hide a whole run; its
    object names the runs the archiver saw right after it. A run it names lost its events
    to it (``HoleError``); otherwise the holes are listed, since the archive cannot tell
    whether the run was in one (docs/log.md, "Holes")."""
    lost = [
        h
        for i in store.list("holes/")
        if (h := parse_hole_key(i.key)) is not None and h.kind in LOST
    ]
    if not lost:
        raise NotFoundError(
            f"run {run_id!r} is not in the archive {store.url} (nothing under "
            f"{run_prefix(run_id)}); check the run id and that the archiver is running"
        )
    for h in lost:
        hole = Hole.from_json(store.get(h.key), h.key)
        if run_id in hole.runs:
            raise fail(
                "A5 hole",
                0,
                h.key,
                f"run {run_id!r} is not in the archive: it lost its events to a hole: "
                f"{hole.describe()}",
            )
    names = ", ".join(h.key for h in lost[:5]) + (" …" if len(lost) > 5 else "")
    raise NotFoundError(
        f"run {run_id!r} is not in the archive {store.url} (nothing under "
        f"{run_prefix(run_id)}), and the archive has {len(lost)} hole(s) where sealed "
        f"records were gone before the archiver read them ({names}): the run may have been "
        "sealed into one of them; its head in `<prefix>.heads` names its partition"
    )
