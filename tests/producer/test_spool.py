"""The local spool: durable, ordered, resumable; drained by later Publishers and by the CLI."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from tests.kafka_harness import free_port
from tests.producer.conftest import read_partition
from tests.services.sequencer.support import raw_event
from tracevault.cli import tracevault
from tracevault.config import Settings
from tracevault.edges import JSON
from tracevault.kafka import partition_for
from tracevault.producer import Publisher, Recorder
from tracevault.producer._spool import SpoolSegment, SpoolWriter, list_segments
from tracevault.schemas import EventKind


def test_segment_round_trip_and_cursor_resume(tmp_path: Path) -> None:
    writer = SpoolWriter(tmp_path, "p.raw")
    records = [(f"run-{i % 3}".encode(), bytes([i]) * (i + 1)) for i in range(50)]
    writer.append(records[:20])
    writer.append(records[20:])
    writer.close()
    (seg,) = list_segments(tmp_path)
    seg.read_header()
    assert seg.topic == "p.raw"
    got = list(seg.records(seg.cursor()))
    assert [(r.key, r.value) for r in got] == records
    seg.commit(got[29].end)
    again = SpoolSegment(seg.path)
    again.read_header()
    assert [(r.key, r.value) for r in again.records(again.cursor())] == records[30:]


def test_torn_tail_and_flipped_byte_are_detected(tmp_path: Path) -> None:
    writer = SpoolWriter(tmp_path, "p.raw")
    writer.append([(b"k", b"v" * 100) for _ in range(10)])
    writer.close()
    (seg,) = list_segments(tmp_path)
    seg.read_header()
    ends = [r.end for r in seg.records(seg.header_end)]
    data = seg.path.read_bytes()

    # A crash mid-append: the last record is cut short.
    seg.path.write_bytes(data[: ends[-1] - 7])
    torn = SpoolSegment(seg.path)
    torn.read_header()
    assert len(list(torn.records(torn.header_end))) == 9
    assert torn.corruption is not None and "torn" in torn.corruption.reason
    assert torn.corruption.offset == ends[-2]

    # A flipped bit inside record 4: records 0..3 are still good, the rest is refused.
    flipped = bytearray(data)
    flipped[ends[3] + 20] ^= 0x01
    seg.path.write_bytes(bytes(flipped))
    bad = SpoolSegment(seg.path)
    bad.read_header()
    assert len(list(bad.records(bad.header_end))) == 4
    assert bad.corruption is not None and "crc32" in bad.corruption.reason


def _agent(task: JSON, edges: Any) -> JSON:
    for i in range(task):
        edges.decision("step", i)
    return task


def _spool_a_run(settings: Settings, steps: int = 20) -> tuple[str, int]:
    """Record a run with Kafka unreachable; it all ends up in the spool on close."""
    dead = settings.model_copy(
        update={"bootstrap_servers": f"127.0.0.1:{free_port()}", "spool_after_ms": 100}
    )
    publisher = Publisher(dead)
    rec = Recorder(publisher=publisher, agent_id="a", agent_version="1")
    rec.run(_agent, steps)  # returns at once: nothing waits on the missing broker
    report = publisher.close(timeout=2.0)
    assert report.delivered == 0
    assert report.undelivered == steps + 2 == report.spooled
    assert report.lost == 0 and len(report.spool_files) == 1
    return rec.run_id, steps + 2


def _check_run(settings: Settings, run_id: str, count: int) -> None:
    got = read_partition(
        settings, partition_for(run_id, settings.partitions), count, key=run_id.encode()
    )
    assert [ev.seq for _, ev in got] == list(range(count))
    assert got[0][1].kind is EventKind.RUN_STARTED and got[-1][1].kind is EventKind.RUN_FINISHED


def _cli(settings: Settings, *args: str, bootstrap: str | None = None) -> Any:
    return CliRunner().invoke(
        tracevault,
        [
            "--bootstrap-servers",
            bootstrap or settings.bootstrap_servers,
            "--prefix",
            settings.topic_prefix,
            "spool",
            *args,
            "--spool-dir",
            settings.spool_dir,
            "--json",
        ],
    )


def test_cli_status_and_drain_deliver_a_spooled_run_in_order(
    settings_factory: Callable[..., Settings],
) -> None:
    settings = settings_factory(partitions=3)
    run_id, count = _spool_a_run(settings)

    status = _cli(settings, "status")
    assert status.exit_code == 0, status.output
    body = json.loads(status.output)
    assert body["remaining"] == count
    assert [s["status"] for s in body["segments"]] == ["pending"]

    # Kafka still away: exit 3, nothing lost.
    dead = _cli(settings, "drain", "--timeout", "1", bootstrap=f"127.0.0.1:{free_port()}")
    assert dead.exit_code == 3, dead.output
    assert json.loads(_cli(settings, "status").output)["remaining"] == count

    drained = _cli(settings, "drain")
    assert drained.exit_code == 0, drained.output
    result = json.loads(drained.output)
    assert result["delivered"] == count and result["remaining"] == 0
    assert list_segments(Path(settings.spool_dir)) == []
    _check_run(settings, run_id, count)


def test_cli_drain_of_a_corrupt_segment_sends_the_intact_part_and_exits_1(
    settings_factory: Callable[..., Settings],
) -> None:
    settings = settings_factory(partitions=1)
    run_id, count = _spool_a_run(settings, steps=8)
    (seg,) = list_segments(Path(settings.spool_dir))
    seg.read_header()
    ends = [r.end for r in seg.records(seg.header_end)]
    data = bytearray(seg.path.read_bytes())
    data[ends[4] + 12] ^= 0xFF  # inside the 6th record (seq 5)
    seg.path.write_bytes(bytes(data))

    result = _cli(settings, "drain")
    assert result.exit_code == 1, result.output
    body = json.loads(result.output)
    assert body["segments"][0]["status"] == "corrupt"
    assert body["delivered"] == 5
    got = read_partition(settings, 0, 5, key=run_id.encode())
    assert [ev.seq for _, ev in got] == [0, 1, 2, 3, 4]
    assert seg.path.exists()  # kept for a person to look at
    assert count == 10


def test_a_later_publisher_adopts_and_delivers_a_dead_process_spool(
    settings_factory: Callable[..., Settings],
) -> None:
    settings = settings_factory(partitions=3)
    old_run, old_count = _spool_a_run(settings)
    with Publisher(settings) as publisher:
        rec = Recorder(publisher=publisher, agent_id="a", agent_version="1")
        rec.run(_agent, 3)
        assert publisher.flush(30)
        stats = publisher.stats()
    # Until the adopted spool is delivered, new events queue behind it in the spool too.
    assert stats.drained == old_count + 5 and stats.spooled == 5 and not stats.spooling
    assert list_segments(Path(settings.spool_dir)) == []
    _check_run(settings, old_run, old_count)
    _check_run(settings, rec.run_id, 5)


def test_drain_refuses_and_reports_an_event_older_than_the_spool_bound(
    settings_factory: Callable[..., Settings],
) -> None:
    """docs/fleet.md, "The spool's bound": never sent, never dropped, reported with exit 1."""
    settings = settings_factory(partitions=3)
    run_id, count = _spool_a_run(settings)
    old_run = "old-run"
    two_days_ago = time.time_ns() // 1000 - 2 * 86_400_000_000
    stale = raw_event(old_run, 0, at=two_days_ago)
    writer = SpoolWriter(Path(settings.spool_dir), settings.topics.raw)
    writer.append([(old_run.encode(), stale)])
    writer.close()

    result = _cli(settings, "drain")
    assert result.exit_code == 1, result.output
    body = json.loads(result.output)
    assert body["rejected"] == 1 and body["delivered"] == count
    assert any("older than spool_max_age_s" in s["detail"] for s in body["segments"])
    _check_run(settings, run_id, count)
    kept = list_segments(Path(settings.spool_dir) / "rejected")
    assert len(kept) == 1
    kept[0].read_header()
    assert [r.value for r in kept[0].records(kept[0].header_end)] == [stale]
    assert (
        read_partition(settings, partition_for(old_run, 3), 1, key=old_run.encode(), timeout=3.0)
        == []
    ), "the old event never reached Kafka"
