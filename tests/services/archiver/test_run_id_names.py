"""Every run id has archive names that fit every store (docs/design.md, "Run ids").

Property test (hypothesis) over the run-id grammar and over any text a run recorded before
the grammar could carry: each id's objects of every kind are written to a real ``file://``
store and to S3 (moto over HTTP), and found back by one listing of the run's prefix, with
nothing of another id in it. An id that needs no mapping keeps its readable,
percent-encoded name (archives written before keep their keys).
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tracevault.archive import ObjectStore
from tracevault.archive._store import check_key
from tracevault.archive.layout import (
    MAX_RUN_SEGMENT,
    day_index_key,
    day_index_marker,
    final_key,
    hold_record_key,
    receipt_key,
    run_id_of_segment,
    run_prefix,
    run_segment,
    segment_key,
)
from tracevault.archive.tlog import run_index_key
from tracevault.runid import MAX_RUN_ID_BYTES, run_id_problem

DAY = date(2026, 12, 1)
GRAMMAR = st.from_regex(rf"[A-Za-z0-9._:-]{{1,{MAX_RUN_ID_BYTES}}}", fullmatch=True).filter(
    lambda r: r not in (".", "..")
)
# What the Recorder accepted before the grammar (1-255 bytes of UTF-8 text), and worse.
LEGACY = st.one_of(
    st.sampled_from(["", ".", "..", "中" * 85, "x" * 255, "é" * 40, "a/b", "%2e%2e", ":" * 128]),
    st.text(max_size=300),
)
EXAMPLES = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
# The longest object names a run gets: the widest seq ranges, partition and log size.
BIG = 999_999_999_999


def _keys(run_id: str) -> list[str]:
    return [
        segment_key(run_id, BIG, BIG),
        receipt_key(run_id, BIG, BIG),
        final_key(run_id),
        run_index_key(run_prefix(run_id), 99_999, BIG, "g" + "f" * 16),
    ]


def _write_and_find(store: ObjectStore, run_id: str) -> None:
    body = run_id.encode("utf-8", "surrogatepass")  # another id under these keys: refused
    seg = run_segment(run_id)
    assert 0 < len(seg) <= MAX_RUN_SEGMENT and seg not in (".", "..")
    keys = _keys(run_id)
    until = datetime.now(UTC) + timedelta(days=200)  # taken at the write, not at import
    for key in keys:
        check_key(key)
        store.put(key, body, retain_until=until)
    marker = day_index_key(DAY, run_id)
    store.put(marker, day_index_marker(run_id), retain_until=until)
    hold = hold_record_key(run_id, datetime(2026, 12, 1, tzinfo=UTC), "h1")
    store.put(hold, body, retain_until=until)
    listed = [i.key for i in store.list(run_prefix(run_id))]
    assert sorted(listed) == sorted(keys), "the run's prefix lists its objects, only them"
    assert all(store.get(k) == body for k in listed)
    assert [i.key for i in store.list(f"legal-holds/{seg}/")] == [hold]
    named = run_id_of_segment(seg)
    assert named in (run_id, None)
    assert (named or store.get(marker).decode("utf-8", "surrogatepass")) == run_id


@EXAMPLES
@given(run_id=GRAMMAR)
def test_every_id_of_the_grammar_is_written_and_found_back(store: ObjectStore, run_id: str) -> None:
    assert run_id_problem(run_id) is None
    _write_and_find(store, run_id)
    encoded = quote(run_id, safe="-_.")
    if len(encoded) <= MAX_RUN_SEGMENT:
        assert run_segment(run_id) == encoded, "an id that needs no mapping stays readable"


@EXAMPLES
@given(run_id=LEGACY)
def test_any_id_recorded_before_the_grammar_is_written_and_found_back(
    store: ObjectStore, run_id: str
) -> None:
    _write_and_find(store, run_id)


@pytest.mark.parametrize("run_id", [".", "..", "", "中" * 85, "x" * 255, "x" * 232])
def test_odd_ids_get_distinct_hash_suffixed_names_that_keep_a_readable_start(
    run_id: str,
) -> None:
    seg = run_segment(run_id)
    assert seg != quote(run_id, safe="-_.") and "%~" in seg
    assert seg.startswith(quote(run_id, safe="-_.")[:10]), "it starts readable"
    assert run_segment(run_id) == seg, "deterministic"
    others = {run_segment(r) for r in [".", "..", "", "中" * 85, "x" * 255, "x" * 232]}
    assert len(others) == 6, "no two of them share a name"
