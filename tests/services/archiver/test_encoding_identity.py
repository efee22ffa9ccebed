"""The archiver's hand-written encoders give the bytes the plain ones gave.

Why it matters: a flush redone after a crash writes its objects again, and a store refuses
different bytes at an existing key (docs/log.md, "Archive"); so an encoder made faster must
not change one byte. Each is compared with the reference it replaced, over generated input.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from tracevault.archive.layout import run_prefix
from tracevault.archive.tlog import RunIndex, run_index_key
from tracevault.services.archiver._logwriter import LeafRecord, PartitionLog
from tracevault.transparency import TileState, hash_leaf, leaf_data

_text = st.text(st.characters(codec="utf-8"), max_size=40) | st.sampled_from(
    ['run-"quoted"', "back\\slash", "ünïcødé-run", "tab\there", "emoji-\U0001f600", "\x00\x1f"]
)
_u64 = st.integers(min_value=0, max_value=(1 << 64) - 1)


def _reference(idx: RunIndex) -> bytes:
    """What RunIndex.to_json wrote before it was written out by hand."""
    obj = {
        "finished": idx.finished,
        "head": idx.head,
        "leaves": [list(x) for x in idx.leaves],
        "log": idx.log,
        "origin": idx.origin,
        "partition": idx.partition,
        "run_id": idx.run_id,
        "size": idx.size,
        "version": idx.version,
    }
    return json.dumps(obj, separators=(",", ":")).encode()


_indexes = st.builds(
    RunIndex,
    run_id=_text,
    log=_text,
    origin=_text,
    partition=st.integers(min_value=-5, max_value=1 << 40),
    size=_u64,
    leaves=st.lists(st.tuples(_u64, _u64), max_size=30).map(tuple),
    finished=st.booleans(),
    head=st.one_of(st.just(""), st.binary(min_size=32, max_size=32).map(bytes.hex), _text),
    version=st.integers(min_value=-3, max_value=3),
)


@settings(max_examples=300, deadline=None)
@given(idx=_indexes)
def test_run_index_json_is_json_dumps(idx: RunIndex) -> None:
    got = idx.to_json()
    assert got == _reference(idx)
    if idx.version == 1:
        assert RunIndex.from_json(got, "k") == idx


def test_run_index_json_of_odd_field_types_is_still_json_dumps() -> None:
    """Types only a caller outside the archiver passes (bool leaves, int subclasses, lists)
    take json.dumps itself, so even those bytes do not change."""

    class Big(int):
        def __repr__(self) -> str:
            return "Big"

    for idx in (
        RunIndex("r", "l", "o", 0, 5, ((True, False),)),  # type: ignore[arg-type]
        RunIndex("r", "l", "o", Big(3), 5, ((1, 2),)),
        RunIndex("r", "l", "o", 0, 5, ((1, 2, 3),)),  # type: ignore[arg-type]
        RunIndex("r", "l", "o", 0, 5, ([1, 2],)),  # type: ignore[arg-type]
        RunIndex("r", "l", "o", 0, 5, (), finished=1),  # type: ignore[arg-type]
    ):
        assert idx.to_json() == _reference(idx)


class _NoStore:
    def put(self, key: str, data: bytes, *, retain_until: datetime) -> None:
        raise AssertionError("take_flush writes nothing itself")


@settings(max_examples=60, deadline=None)
@given(
    runs=st.lists(
        st.tuples(_text.filter(lambda r: 0 < len(r.encode()) < 200), st.integers(1, 6)),
        min_size=1,
        max_size=8,
        unique_by=lambda r: r[0],
    ),
    start=st.integers(0, 600),
    partition=st.integers(0, 40),
)
def test_a_flush_writes_each_run_index_as_json_dumps_of_its_fields(
    runs: list[tuple[str, int]], start: int, partition: int
) -> None:
    """take_flush encodes the run indexes itself (not through RunIndex): the same bytes."""
    plog = PartitionLog(
        _NoStore(), f'log/p"x/{partition}/', "p", f"ö/{partition}", partition, TileState(), b""
    )
    plog.extend([_leaf(f"pad-{i}", i) for i in range(start)])
    plog.archived = plog.size
    plog.runs.clear()
    plog.leaf_index.clear()
    expected: dict[str, list[tuple[int, int]]] = {}
    recs = [(r, seq) for r, n in runs for seq in range(n)]
    for i, (run, seq) in enumerate(sorted(recs, key=lambda x: x[1])):
        expected.setdefault(run, []).append((start + i, seq))
    plog.extend([_leaf(run, seq, fin=seq == n - 1) for run, seq, n in _by_seq(runs)])
    plog.note, plog.note_size = "note", plog.size
    job = plog.take_flush(datetime(2031, 1, 1, tzinfo=UTC))
    got = dict(job.puts)
    for run, n in runs:
        fin_rec = _leaf(run, n - 1, fin=True)
        idx = RunIndex(
            run,
            plog.log,
            plog.origin,
            partition,
            plog.size,
            tuple(expected[run]),
            finished=True,
            head=fin_rec.chain_hash.hex(),
        )
        key = run_index_key(run_prefix(run), partition, plog.size)
        assert got[key] == _reference(idx)


def _by_seq(runs: list[tuple[str, int]]) -> list[tuple[str, int, int]]:
    return sorted(((r, seq, n) for r, n in runs for seq in range(n)), key=lambda x: x[1])


def _leaf(run: str, seq: int, *, fin: bool = False) -> LeafRecord:
    h = bytes([seq % 256]) * 32
    data = leaf_data(run, seq, h)
    return LeafRecord(run, seq, h, fin, 1_764_460_800_000_000, data, hash_leaf(data), b"v")
