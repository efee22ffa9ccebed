"""The archiver's index step (``IndexStep``), fed flush by flush as the archiver feeds it: the
index it writes equals a rebuilt one (runs split across flushes, a run going on after a
restart of the step, erasure, contested and hole records); its C walk gives exactly the
Python rows; a flush indexed again writes nothing new."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.index.fleet import FLEET, Spec, sealed
from tests.services.archiver.sealed_factory import LogWriter
from tracevault.archive import Hole, ObjectStore, hole_key, open_store
from tracevault.chain import genesis, link
from tracevault.config import Settings
from tracevault.index import (
    Filters,
    IndexStep,
    IndexWorker,
    index_keys,
    load_index,
    open_views,
    rebuild,
    search,
)
from tracevault.schemas import AgentInfo, EventKind, SealedEvent, TraceEvent, encode_event
from tracevault.transparency import load_signer

Rows = tuple[list[tuple[object, ...]], list[tuple[object, ...]], list[tuple[object, ...]]]


def _rows(store: ObjectStore) -> Rows:
    con = open_views(load_index(store))
    return (
        con.execute("SELECT * FROM runs ORDER BY run_id").fetchall(),
        con.execute("SELECT * FROM events ORDER BY run_id, seq").fetchall(),
        con.execute("SELECT run_id, status, reason FROM status ORDER BY ALL").fetchall(),
    )


@pytest.fixture
def store(tmp_path: Path) -> ObjectStore:
    return open_store(f"file://{tmp_path / 'archive'}", Settings())


def _archive_in_pieces(
    store: ObjectStore,
    *,
    python: bool,
    make: Callable[[], IndexStep | IndexWorker] | None = None,
    between: Callable[[int], None] = lambda i: None,
) -> tuple[LogWriter, IndexStep | IndexWorker]:
    """The fleet, an erasure, a contested record and a hole, in flushes that split runs: each
    run's first half in one flush, the rest in the next; the step restarted (a new one, no
    state) between two halves of a run. ``make``: the step (default ``IndexStep``; the
    archiver's child-process worker in test_worker.py); ``between(i)``: called between the
    two halves of spec ``i``."""
    make = make or (lambda: IndexStep(store))
    step = make()
    if python:
        assert isinstance(step, IndexStep)
        step._walks = None  # the reference path: run_rows
    until = datetime.now(UTC) + timedelta(days=366)
    w = LogWriter(store, load_signer(), Settings().topic_prefix, until=until, index=step)
    specs = [
        *FLEET,
        Spec("erasure-1", "tracevault-erase", 20,
             start={"input": {"run": "run-mail-1", "reason": "GDPR art. 17"}}),
        Spec("tracevault.contested:c1", "tracevault-sequencer", 21,
             start={"run_id": "run-search", "seq": 2, "reason": "foreign key"}),
    ]  # fmt: skip
    for i, spec in enumerate(specs):
        evs = sealed(spec)
        half = max(1, len(evs) // 2)
        w.add(evs[:half], finishes=False)
        w.flush()
        between(i)
        if i == 2:  # a restart mid-run: the new step reads the run's first half back
            w.index = make()
            if python:
                assert isinstance(w.index, IndexStep)
                w.index._walks = None
        w.add(evs[half:], finishes=spec.finish)
        w.flush()
    hole = Hole(kind="quarantined", origin=w.origin, partition=0, first=3, end=4,
                detected_at="2026-01-20T00:00:00Z", why="record not archivable",
                runs={"run-open": 1}, reason="bad run id")  # fmt: skip
    w.plog.add_hole(hole_key(w.plog.log, 3, 4, "quarantined"), hole)
    w.add(sealed(Spec("run-late", "planner", 22)))
    w.flush()
    return w, step


@pytest.mark.parametrize("python", [False, True], ids=["c", "python"])
def test_the_step_writes_what_a_rebuild_writes(store: ObjectStore, python: bool) -> None:
    w, step = _archive_in_pieces(store, python=python)
    assert w.index is not None and w.index is not step
    assert (step.c_flushes > 0, w.index.c_flushes > 0) == (not python, not python)
    incremental = _rows(store)
    assert len(incremental[0]) == len(FLEET) + 3
    statuses = {(h.run_id, h.status) for h in search(store, Filters()).hits}
    assert {("run-mail-1", "erased"), ("run-search", "contested"),
            ("run-open", "hole"), ("run-err", "errored")} <= statuses  # fmt: skip
    rebuild(store)
    assert _rows(store) == incremental


def test_c_and_python_steps_write_the_same_rows(tmp_path: Path) -> None:
    got = []
    for python in (False, True):
        store = open_store(f"file://{tmp_path / str(python)}", Settings())
        _archive_in_pieces(store, python=python)
        got.append(_rows(store))
    assert got[0] == got[1]


def test_a_flush_indexed_again_writes_the_same_objects(store: ObjectStore) -> None:
    w, _ = _archive_in_pieces(store, python=False)
    step = w.index
    assert step is not None
    before = {k: store.get(k) for k in index_keys(store)}
    w.add(sealed(Spec("run-again", "planner", 23)))
    again = IndexStep(store).take(w.plog)  # a second instance indexing the same flush
    first = step.take(w.plog)
    w.flush()  # (the step's objects written with it)
    assert sorted(first()) == sorted(again())  # same names: the same bytes, a no-op put
    after = {k: store.get(k) for k in index_keys(store)}
    assert {k: v for k, v in after.items() if k in before} == before


REQUESTS = [
    b'{"tool":"a"}', b'{ "tool" : "b" , "x":[1,{"tool":"no"}]}', b'{"x":"}\\"","tool":"c"}',
    b'{"tool":"d\\u0041"}', b'{"tool":1}', b'{"tool":"e","tool":"f"}', b'{"tool":"g","tool":null}',
    b"[1]", b"{}", b'{"tool":"h"} x', b'{"enc":"AAAA","tool":"i","v":1}', b'{"enc":"AAAA","v":1}',
    b"not json", b'{"tool":"x","a":tru}', b'{"tool":"\xc3\xa9"}', b'{"tool":"\xff"}',
    b'{"a":{"b":[1,2,{"c":"d"}]},"tool":"j"}', b'{"tool":"k",}', b'{"tool":"l\x01"}',
]  # fmt: skip


def test_the_c_walk_reads_a_tool_name_exactly_as_python_does(tmp_path: Path) -> None:
    """Tool names from odd requests (escapes, nesting, duplicate keys, envelopes, bad JSON):
    the C walk's column equals the Python rows' (its declines go to ``tool_name``)."""
    agent = AgentInfo("a", "1", "h", "x", "0")
    evs, prev = [], genesis("odd")
    for seq, req in enumerate(REQUESTS):
        raw = encode_event(TraceEvent("odd", seq, EventKind.TOOL_CALL, 10 + seq, agent, req, b"{}"))
        evs.append(SealedEvent("odd", seq, prev, link(prev, raw), raw, 5, 0, seq, "s"))
        prev = evs[-1].hash
    tables = []
    for python in (False, True):
        step = IndexStep(store := open_store(f"file://{tmp_path / str(python)}", Settings()))
        if python:
            step._walks = None
        w = LogWriter(store, load_signer(), index=step)
        w.add(evs)
        flush = step.take(w.plog)
        w.flush()
        _, table = flush._columns(dict(flush.runs))
        assert table is not None
        tables.append(table.column("tool").to_pylist())
        assert step.c_flushes == (0 if python else 2)  # the flush, and the call here
    assert tables[0] == tables[1]
    assert tables[0][:3] == ["a", "b", "c"]


def test_a_time_no_date_can_hold_files_under_the_first_or_last_day() -> None:
    """A sealed record keeps any int64 time; the archiver's index step once raised on
    INT64_MIN (year -290308) and stopped the flush (found by the hostile-record fuzz)."""
    from tracevault.index._tables import day_of

    assert day_of(-(2**63)) == "0001-01-01"
    assert day_of(2**63 - 1) == "9999-12-31"
    assert day_of(86_400_000_000) == "1970-01-02"
