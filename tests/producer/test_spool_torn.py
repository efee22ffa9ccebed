"""A torn spool tail (an agent killed mid-append) is cut, reported and drained past.

docs/design.md, "The spool": the bytes of a record cut short were never reported as
spooled, so the drainer that takes the segment over truncates them, logs a warning and
reports ``torn_bytes``; ``spool status`` shows it and exits 0. Damage with intact records
after it, or a whole record whose bytes changed, is still corruption (exit 1).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from tests.producer.conftest import read_partition
from tests.producer.test_spool import _check_run, _cli, _spool_a_run
from tracevault.config import Settings
from tracevault.kafka import partition_for
from tracevault.producer import Publisher, Recorder
from tracevault.producer._spool import SpoolSegment, SpoolWriter, list_segments


def _tear_last_record(settings: Settings) -> tuple[Path, int]:
    """Really cut the segment's bytes in the middle of its last record; the bytes left."""
    (seg,) = list_segments(Path(settings.spool_dir))
    seg.read_header()
    ends = [r.end for r in seg.records(seg.header_end)]
    keep = ends[-2] + (ends[-1] - ends[-2]) // 2
    with seg.path.open("r+b") as f:
        f.truncate(keep)
    return seg.path, keep - ends[-2]


def test_status_reports_a_torn_tail_and_drain_cuts_it_and_sends_the_rest(
    settings_factory: Callable[..., Settings],
) -> None:
    settings = settings_factory(partitions=3)
    run_id, count = _spool_a_run(settings)
    path, torn = _tear_last_record(settings)

    status = _cli(settings, "status")
    assert status.exit_code == 0, status.output
    body = json.loads(status.output)
    assert body["remaining"] == count - 1 and body["torn_bytes"] == torn
    (seg,) = body["segments"]
    assert seg["status"] == "pending" and "torn tail" in seg["detail"]
    assert path.stat().st_size == len(path.read_bytes())  # status changed nothing

    drained = _cli(settings, "drain")
    assert drained.exit_code == 0, drained.output
    body = json.loads(drained.output)
    assert body["delivered"] == count - 1 and body["torn_bytes"] == torn
    assert "cut a torn tail" in body["segments"][0]["detail"]
    assert list_segments(Path(settings.spool_dir)) == []
    # run_finished was the torn record: the run is whole up to it, in order, once
    _check_run_prefix(settings, run_id, count - 1)


def _check_run_prefix(settings: Settings, run_id: str, count: int) -> None:
    got = read_partition(
        settings, partition_for(run_id, settings.partitions), count, key=run_id.encode()
    )
    assert [ev.seq for _, ev in got] == list(range(count))


def test_a_later_publisher_cuts_a_dead_process_torn_tail_and_delivers_the_rest(
    settings_factory: Callable[..., Settings],
) -> None:
    settings = settings_factory(partitions=3)
    old_run, old_count = _spool_a_run(settings)
    _tear_last_record(settings)
    with Publisher(settings) as publisher:
        rec = Recorder(publisher=publisher, agent_id="a", agent_version="1")
        rec.run(lambda task, edges: task, None)
        assert publisher.flush(30)
        stats = publisher.stats()
    assert stats.drained == old_count - 1 + 2, stats
    assert list_segments(Path(settings.spool_dir)) == []
    _check_run_prefix(settings, old_run, old_count - 1)
    _check_run(settings, rec.run_id, 2)


def _repaired(path: Path, data: bytes) -> tuple[SpoolSegment, int]:
    """Write ``data`` as the segment at ``path``, then repair it as a drainer would."""
    path.write_bytes(data)
    seg = SpoolSegment(path)
    seg.read_header()
    assert seg.try_lock()
    try:
        return seg, seg.repair_tail()
    finally:
        seg.unlock()


def test_zero_bytes_at_the_end_are_a_torn_tail_but_a_changed_record_is_not(
    tmp_path: Path,
) -> None:
    writer = SpoolWriter(tmp_path, "p.raw")
    writer.append([(b"k", bytes([i]) * 50) for i in range(5)])
    writer.close()
    (seg,) = list_segments(tmp_path)
    seg.read_header()
    good = seg.path.read_bytes()

    # A power loss can leave the file longer than what was written, filled with zeros.
    assert _repaired(seg.path, good + bytes(37))[1] == 37
    assert seg.path.read_bytes() == good

    # A whole last record with a changed byte is not what a crash leaves: kept, reported.
    changed = bytearray(good)
    changed[-3] ^= 0x01
    bad, cut = _repaired(seg.path, bytes(changed))
    assert cut == 0 and seg.path.read_bytes() == bytes(changed)
    assert len(list(bad.records(bad.header_end))) == 4
    assert bad.corruption is not None and not bad.corruption.tail


def test_a_changed_length_field_is_corruption_not_a_torn_tail(tmp_path: Path) -> None:
    """A flipped high bit in a record's length makes it run past the end of the file, as a
    torn record would; cutting there would drop the intact records after it."""
    writer = SpoolWriter(tmp_path, "p.raw")
    writer.append([(b"k", bytes([i]) * 50) for i in range(6)])
    writer.close()
    (seg,) = list_segments(tmp_path)
    seg.read_header()
    ends = [r.end for r in seg.records(seg.header_end)]
    data = bytearray(seg.path.read_bytes())
    data[ends[2]] ^= 0x80  # the top byte of record 3's big-endian length
    bad, cut = _repaired(seg.path, bytes(data))
    assert cut == 0 and seg.path.read_bytes() == bytes(data)
    assert len(list(bad.records(bad.header_end))) == 3
    assert bad.corruption is not None and not bad.corruption.tail
    assert "impossible" in bad.corruption.reason
