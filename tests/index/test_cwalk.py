"""The index's C walk (``_ccolumns.columns``) against its Python reference (``run_rows``), fed
packed values (docs/index.md, "Writing"): the fleet's sealed values, then the same values
with a byte changed or cut short. Where the C reads a flush it gives exactly the Python's
events table and run parts; where a value is not its shape it declines the flush (the
Python rows read it). End offsets that go backwards or past the data are refused before any
value is read. ``.ci/native`` runs this under the sanitizers, ``FUZZ_SCALE`` times the
examples, where a read out of bounds aborts."""

from __future__ import annotations

import tempfile
from array import array
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.index.fleet import FLEET, sealed
from tests.native import examples, extension
from tracevault.archive import open_store
from tracevault.config import Settings
from tracevault.index._step import FlushSlices, IndexStep, RunSlice, _Flush, _Part
from tracevault.schemas import encode_sealed
from tracevault.schemas.fast import armed_walks

ccolumns = extension("tracevault.index._ccolumns")
VALUES = {spec.run_id: [encode_sealed(e) for e in sealed(spec)] for spec in FLEET}
_STORE = tempfile.TemporaryDirectory(prefix="tv-cwalk-")


def _steps() -> tuple[IndexStep, IndexStep]:
    store = open_store(f"file://{Path(_STORE.name) / 'archive'}", Settings())
    c, python = IndexStep(store), IndexStep(store)
    python._walks = None
    return c, python


STEPS = _steps()


def _columns(
    step: IndexStep, runs: dict[str, list[bytes]]
) -> tuple[dict[str, _Part], pa.Table | None]:
    """One flush of ``runs`` (each from seq 0) through ``step``'s columns, packed."""
    slices: dict[str, RunSlice] = {r: (0, True, b"\0" * 32, len(v)) for r, v in runs.items()}
    values = [v for vs in runs.values() for v in vs]
    ends = array("q")
    total = 0
    for v in values:
        total += len(v)
        ends.append(total)
    leaves = {r: list(range(len(v))) for r, v in runs.items()}
    flush = FlushSlices("log/p/0", "o", 0, (0, len(values)), slices, leaves, [],
                        b"".join(values), ends.tobytes())  # fmt: skip
    f = _Flush(step, flush)
    return f._columns(flush.runs)


def _same_when_read(runs: dict[str, list[bytes]]) -> bool:
    """The C's rows equal the Python's wherever the C reads the flush; whether it read it."""
    c_step, python_step = STEPS
    before = c_step.c_flushes
    c_parts, c_table = _columns(c_step, runs)
    if c_step.c_flushes == before:
        return False  # declined: the Python rows were taken, as the step does
    py_parts, py_table = _columns(python_step, runs)
    assert c_parts == py_parts
    assert c_table is not None and py_table is not None
    assert c_table.equals(py_table), (c_table.to_pylist(), py_table.to_pylist())
    return True


@pytest.mark.skipif(armed_walks() is None, reason="the schema walks are not armed")
def test_the_fleets_values_read_the_same_in_c_and_python() -> None:
    assert _same_when_read(VALUES)


@pytest.mark.skipif(armed_walks() is None, reason="the schema walks are not armed")
@settings(max_examples=examples(150), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])  # fmt: skip
@given(st.data())
def test_a_changed_or_cut_value_reads_as_python_or_is_declined(data: st.DataObject) -> None:
    names = data.draw(st.lists(st.sampled_from(sorted(VALUES)), min_size=1, unique=True))
    runs = {r: list(VALUES[r]) for r in names}
    run = data.draw(st.sampled_from(names))
    i = data.draw(st.integers(0, len(runs[run]) - 1))
    v = runs[run][i]
    if data.draw(st.booleans()):
        at = data.draw(st.integers(0, len(v) - 1))
        runs[run][i] = v[:at] + bytes([data.draw(st.integers(0, 255))]) + v[at + 1 :]
    else:
        runs[run][i] = v[: data.draw(st.integers(0, len(v) - 1))]
    _same_when_read(runs)


@pytest.mark.skipif(armed_walks() is None, reason="the schema walks are not armed")
@settings(max_examples=examples(200), deadline=None)
@given(
    data=st.binary(max_size=64),
    ends=st.lists(st.integers(-(2**63), 2**63 - 1) | st.integers(-2, 70), max_size=6),
)
def test_end_offsets_outside_the_data_are_refused(data: bytes, ends: list[int]) -> None:
    walks = armed_walks()
    assert walks is not None
    sealed_header, trace_header, kinds = walks
    good = all(0 <= e <= len(data) for e in ends) and ends == sorted(ends)
    packed = array("q", ends).tobytes()
    counts = [len(ends)] if ends else []
    try:
        got = ccolumns.columns(data, packed, counts, sealed_header, trace_header, len(kinds), 0)
    except ValueError:
        assert not good
        return
    assert good
    assert got is None or got[0] == len(ends)
