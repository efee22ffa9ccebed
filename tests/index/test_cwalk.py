"""The index's C walk (``_ccolumns.columns``) never reads what its Python reference refuses.

Where ``run_rows`` refuses a run's sealed values (a record fastavro cannot decode), the C walk
must decline the flush (return None) so the step takes the Python rows, which skip that run
with a warning; reading it instead put into the index a run the archive's own reader refuses.
The fleet's sealed values, then the same values with a byte changed or cut short, and the
two string fields of the sealed envelope the walk once did not check (the run id and the
sequencer id, not UTF-8: stop 40's fuzzing found them). ``.ci/native`` runs this under the
sanitizers, ``FUZZ_SCALE`` times the examples, where a read out of bounds aborts.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.index.fleet import FLEET, sealed
from tests.native import examples, extension
from tracevault.errors import TraceVaultError
from tracevault.index._rows import run_rows
from tracevault.schemas import decode_sealed, encode_sealed
from tracevault.schemas.fast import armed_walks

ccolumns = extension("tracevault.index._ccolumns")
VALUES = {spec.run_id: [encode_sealed(e) for e in sealed(spec)] for spec in FLEET}


def _c_reads(values: list[bytes]) -> bool:
    walks = armed_walks()
    assert walks is not None, "the schema walks are not armed: this test pins the C walk"
    sealed_header, trace_header, kinds = walks
    tool_kind = [k.value for k in kinds].index("TOOL_CALL")
    got = ccolumns.columns(values, [len(values)], sealed_header, trace_header, len(kinds),
                           tool_kind)  # fmt: skip
    return got is not None


def _python_reads(run_id: str, values: list[bytes]) -> bool:
    try:
        run_rows(run_id, values, list(range(len(values))), None, finished=False, head="")
    except TraceVaultError:
        return False
    return True


def _with(value: bytes, old: bytes, new: bytes, *, last: bool = False) -> bytes:
    """``value`` with its first (or last) ``old`` replaced by ``new`` of the same length."""
    assert len(old) == len(new)
    at = value.rindex(old) if last else value.index(old)
    return value[:at] + new + value[at + len(old) :]


def test_the_fleets_values_are_read_by_both() -> None:
    for run_id, values in VALUES.items():
        assert (_c_reads(values), _python_reads(run_id, values)) == (True, True), run_id


@pytest.mark.parametrize("field", ["run_id", "sequencer_id"])
def test_a_sealed_string_that_is_not_utf8_is_declined(field: str) -> None:
    run_id, values = next(iter(VALUES.items()))
    text = str(getattr(decode_sealed(values[1]), field)).encode()
    values = list(values)
    # the run id is the record's first string; the sequencer id its last
    values[1] = _with(values[1], text, text[:-1] + b"\xff", last=field == "sequencer_id")
    assert not _python_reads(run_id, values)
    assert not _c_reads(values)


@settings(max_examples=examples(150), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])  # fmt: skip
@given(st.data())
def test_a_changed_or_cut_value_python_refuses_is_declined(data: st.DataObject) -> None:
    run_id = data.draw(st.sampled_from(sorted(VALUES)))
    values = list(VALUES[run_id])
    i = data.draw(st.integers(0, len(values) - 1))
    v = values[i]
    if data.draw(st.booleans()):
        at = data.draw(st.integers(0, len(v) - 1))
        values[i] = v[:at] + bytes([data.draw(st.integers(0, 255))]) + v[at + 1 :]
    else:
        values[i] = v[: data.draw(st.integers(0, len(v) - 1))]
    if not _python_reads(run_id, values):
        assert not _c_reads(values), (i, values[i])
