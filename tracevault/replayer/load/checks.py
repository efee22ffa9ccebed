"""Verification of a run's sealed records: numbered checks, the first failure raised.

Checks on every record, in seq order (the first failing one is raised as a
:class:`ChainError` naming the seq and the object the record came from):

1. **run** — the record belongs to this run.
2. **seq** — seqs are contiguous from 0 (a deleted or swapped event fails here).
3. **link** — ``prev_hash`` is the previous record's hash; seq 0's is the run's genesis.
4. **hash** — ``hash == SHA-256(domain ‖ prev_hash ‖ raw)`` (``tracevault.chain.link``): a
   flipped bit anywhere in the producer's bytes fails here.
5. **content** — ``raw`` is a TraceEvent of this run at this seq (an event moved in from
   another run and re-chained fails here).
6. **shape** — seq 0 is RUN_STARTED and nothing follows RUN_FINISHED.

Then the source's own evidence (archive: A1-A3 in ``_verify_archive``; topic: T1, the
sequencer's committed head, in ``verify``).

Verifiers raise, they never return False (sigstore's rule).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import repeat
from operator import itemgetter
from typing import Any

from tracevault.chain import genesis, link
from tracevault.errors import ChainError, SchemaError
from tracevault.schemas import (
    MAGIC,
    EventKind,
    TraceEvent,
    avro_long,
    decode_event,
    default_schemas,
)
from tracevault.schemas.fast import SealedColumns, fast_decode_event

__all__ = ["RECORD_CHECKS", "RecordsSummary", "check_records", "fail"]

RECORD_CHECKS = (
    "1 run: every record belongs to the run",
    "2 seq: seqs are contiguous from 0",
    "3 link: every prev_hash is the previous hash (seq 0: the run's genesis)",
    "4 hash: every hash is SHA-256(domain, prev_hash, raw)",
    "5 content: every raw value is a TraceEvent of this run at its seq",
    "6 shape: seq 0 is RUN_STARTED and nothing follows RUN_FINISHED",
)

_ACTION = (
    "Operator action: treat the run as tampered or damaged; compare with the other copy "
    "(topic vs archive, or an exported bundle) and keep this one for the investigation"
)


def fail(check: str, seq: int | None, obj: str | None, what: str) -> ChainError:
    """The ChainError for a failed numbered check (``check`` is e.g. ``"4 hash"``)."""
    where = "" if seq is None else f" at seq {seq}"
    inside = "" if obj is None else f" in {obj}"
    return ChainError(
        f"verify failed: check {check}{where}{inside}: {what}. {_ACTION}", seq=seq, obj=obj
    )


@lru_cache(maxsize=1)
def _layouts() -> Mapping[bytes, tuple[str, ...]]:
    """Header -> enum symbols, for TraceEvent versions that start (run_id, seq, kind).

    Those let check 5 compare a value's prefix with the expected bytes instead of decoding
    the whole event; any other version falls back to a full decode.
    """
    out: dict[bytes, tuple[str, ...]] = {}
    for v in default_schemas().versions("TraceEvent"):
        f = v.source.get("fields", [])
        if (
            len(f) >= 3
            and (f[0]["name"], f[0]["type"]) == ("run_id", "string")
            and (f[1]["name"], f[1]["type"]) == ("seq", "long")
            and f[2]["name"] == "kind"
            and isinstance(f[2]["type"], dict)
            and f[2]["type"].get("type") == "enum"
        ):
            out[MAGIC + v.fingerprint] = tuple(f[2]["type"]["symbols"])
    return out


@dataclass(frozen=True, slots=True)
class RecordsSummary:
    """What checks 1-6 learnt: the chain head, each event's kind, the GAP seqs.

    ``events`` holds every event decoded when the checks were asked to rebuild the run.
    """

    head: bytes
    kinds: tuple[str, ...]
    gaps: tuple[int, ...]
    events: list[TraceEvent] | None = None

    @property
    def finished(self) -> bool:
        return bool(self.kinds) and self.kinds[-1] == EventKind.RUN_FINISHED.value


def _event(raw: bytes, run_id: str, seq: int, obj: str | None) -> TraceEvent:
    """Check 5 on a fully decoded event (no canonical-JSON re-check: see the module doc)."""
    try:
        ev = decode_event(raw, check_json=False, what=f"raw value of seq {seq}")
    except SchemaError as exc:
        raise fail(
            "5 content", seq, obj, f"the raw value is not a readable TraceEvent ({exc})"
        ) from exc
    if ev.run_id != run_id:
        raise fail(
            "5 content",
            seq,
            obj,
            f"the event inside is seq {ev.seq} of run {ev.run_id!r}, moved in from another run",
        )
    if ev.seq != seq:
        raise fail("5 content", seq, obj, f"the event inside says it is seq {ev.seq}")
    return ev


def _slow_kind(raw: bytes, run_id: str, seq: int, obj: str | None) -> str:
    return _event(raw, run_id, seq, obj).kind.value


_ROW_FIELDS = itemgetter("run_id", "seq", "prev_hash", "hash", "raw")


def _rebuild(
    run_id: str,
    rows: Sequence[Mapping[str, Any]],
    objects: Sequence[str],
    columns: SealedColumns | None,
) -> RecordsSummary:
    """Checks 1-6 with every event decoded once: check 5 reads the decoded event.

    Kept apart from the prefix-only loop in :func:`check_records` so neither pays for the
    other; both raise the same failures with the same messages. ``columns`` (the source's
    values walked once, each ``raw`` decoded in the same walk) stand in for ``rows``: the
    loop reads the same five fields and the event ``fast_decode_event`` gives for ``raw``.
    """
    prev = genesis(run_id)
    kinds: list[str] = []
    events: list[TraceEvent] = []
    add_kind, add_event = kinds.append, events.append
    chain, decode = link, fast_decode_event  # locals: this loop runs once per event
    items: Iterable[tuple[tuple[str, int, bytes, bytes, bytes], TraceEvent | None]]
    if columns is None:
        items = zip(map(_ROW_FIELDS, rows), repeat(None))
    else:
        c = columns
        fields = zip(c.run_ids, c.seqs, c.prev_hashes, c.hashes, c.raws, strict=True)
        items = zip(fields, c.events, strict=True)
    for i, ((rid, seq, prev_hash, hash_, raw), walked) in enumerate(items):
        if rid != run_id or seq != i or prev_hash != prev:
            _check_row(run_id, i, rid, seq, prev_hash, prev, objects)
        h = chain(prev, raw)
        if h != hash_:
            raise _hash_failure(i, hash_, h, objects)
        ev = decode(raw) if walked is None else walked
        if ev is None or ev.seq != i or ev.run_id != run_id:
            # the codec decides: another schema version, or check 5 fails naming the seq
            ev = _event(raw, run_id, i, objects[i])
        add_kind(ev.kind)  # an EventKind is its str value (StrEnum)
        add_event(ev)
        prev = h
    return _summary(prev, kinds, objects, events)


def _check_row(  # noqa: PLR0917 - the row's fields, as the loops have them
    run_id: str,
    i: int,
    rid: str,
    seq: int,
    prev: bytes,
    expected_prev: bytes,
    objects: Sequence[str],
) -> None:
    """Checks 1-3 on one row (raises at the first that fails)."""
    if rid != run_id:
        raise fail(
            "1 run",
            i,
            objects[i],
            f"the record belongs to run {rid!r} (seq {seq})",
        )
    if seq != i:
        what = (
            f"seq {i} is missing (the next record is seq {seq})"
            if seq > i
            else f"found seq {seq} where seq {i} belongs (events out of order)"
        )
        raise fail("2 seq", i, objects[i], what)
    if prev != expected_prev:
        raise fail(
            "3 link",
            i,
            objects[i],
            f"prev_hash {bytes(prev).hex()[:16]}… is not the hash of seq {i - 1} "
            f"({expected_prev.hex()[:16]}…)"
            if i
            else "prev_hash is not the run's genesis hash",
        )


def _hash_failure(i: int, said: bytes, h: bytes, objects: Sequence[str]) -> Exception:
    return fail(
        "4 hash",
        i,
        objects[i],
        f"the event's bytes hash to {h.hex()[:16]}…, the record says "
        f"{bytes(said).hex()[:16]}…: the bytes were changed after sealing",
    )


def _summary(
    head: bytes, kinds: list[str], objects: Sequence[str], events: list[TraceEvent] | None
) -> RecordsSummary:
    """Check 6 over the kinds, then what the checks learnt."""
    if kinds and kinds[0] != EventKind.RUN_STARTED.value:
        raise fail("6 shape", 0, objects[0], f"seq 0 is {kinds[0]}, not RUN_STARTED")
    fin = EventKind.RUN_FINISHED.value
    if fin in kinds[:-1]:  # searched in C: a run has 100,000s of kinds
        i = kinds.index(fin)
        raise fail("6 shape", i + 1, objects[i + 1], f"seq {i + 1} follows RUN_FINISHED at seq {i}")
    gap = EventKind.GAP.value
    return RecordsSummary(
        head=head,
        kinds=tuple(kinds),
        gaps=tuple(i for i, k in enumerate(kinds) if k == gap) if gap in kinds else (),
        events=events,
    )


def check_records(
    run_id: str,
    rows: Sequence[Mapping[str, Any]],
    objects: Sequence[str],
    *,
    rebuild: bool = False,
    columns: SealedColumns | None = None,
) -> RecordsSummary:
    """Checks 1-6 over SealedEvent rows in the order the source returned them.

    With ``rebuild`` every event is also decoded (``RecordsSummary.events``); without it,
    check 5 reads only the run id, seq and kind at the front of each value. ``columns``
    (with ``rebuild``): the same records walked once into columns, read instead of ``rows``.
    """
    if rebuild:
        return _rebuild(run_id, rows, objects, columns)
    expected_prev = genesis(run_id)
    rid = run_id.encode("utf-8")
    rid_prefix = avro_long(len(rid)) + rid
    layouts = _layouts()
    kinds: list[str] = []
    append = kinds.append
    for i, r in enumerate(rows):
        if r["run_id"] != run_id or r["seq"] != i or r["prev_hash"] != expected_prev:
            _check_row(run_id, i, r["run_id"], r["seq"], r["prev_hash"], expected_prev, objects)
        raw = r["raw"]
        h = link(expected_prev, raw)
        if h != r["hash"]:
            raise _hash_failure(i, r["hash"], h, objects)
        symbols = layouts.get(raw[:10])
        kind: str | None = None
        if symbols is not None:
            p = rid_prefix + avro_long(i)
            at = 10 + len(p)
            if len(raw) > at and raw.startswith(p, 10) and raw[at] < 0x80:
                idx = raw[at] >> 1
                if idx < len(symbols):
                    kind = symbols[idx]
        append(kind if kind is not None else _slow_kind(raw, run_id, i, objects[i]))
        expected_prev = h
    return _summary(expected_prev, kinds, objects, None)
