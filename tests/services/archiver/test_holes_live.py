"""Holes are evidence, not a wedge: sealed records expire before the archiver reads them.

The issue's case, on a real broker of its own (so its retention check can run every half
second; the shared broker checks every five minutes): the real sequencer seals runs, the
real archiver archives the first and stops, an admin drops ``retention.ms`` on ``sealed``
and Kafka deletes the segments holding the next runs, retention is restored, more runs are
sealed, and the archiver is restarted. It records the hole and archives every later run;
``replay verify`` names the run that lost seqs to it, with the seqs, and never calls the run
that vanished whole "not in the archive, check the run id".
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from confluent_kafka import Consumer, TopicPartition

from tests.kafka_harness import LocalBroker, set_topic_config
from tests.replayer.pipeline import fresh_settings
from tests.services.sequencer.support import produce_raw, raw_event, running, wait_until
from tests.transparency.signed_sealed import cli_env
from tracevault.archive import hold_run, open_store
from tracevault.archive._holes import Hole
from tracevault.cli import tracevault as main
from tracevault.config import Settings
from tracevault.heads import locate_run
from tracevault.services.archiver import Archiver


def _sealed_to(settings: Settings, run_id: str, seq: int) -> None:
    def done() -> bool:
        loc = locate_run(settings, run_id)
        return loc is not None and loc.last_seq >= seq

    wait_until(done, timeout=60, what=f"{run_id} sealed through seq {seq}", every=0.2)


def _produce(settings: Settings, run_id: str, seqs: range, last: int | None) -> None:
    produce_raw(settings, [(run_id, raw_event(run_id, s, last=last)) for s in seqs])
    _sealed_to(settings, run_id, seqs[-1])


def _watermarks(settings: Settings) -> tuple[int, int]:
    c = Consumer(settings.kafka_config(**{"group.id": "holes-watch", "log_level": 0}))
    try:
        return c.get_watermark_offsets(TopicPartition(settings.topics.sealed, 0), timeout=10)
    finally:
        c.close()


def _retention(settings: Settings, **conf: str) -> None:
    set_topic_config(settings.bootstrap_servers, settings.topics.sealed, **conf)


def _archive(settings: Settings) -> Archiver:
    archiver = Archiver(settings)
    archiver.run(until_idle=2)
    return archiver


def _verify(settings: Settings, run_id: str, vkey: str) -> Any:
    return CliRunner().invoke(
        main,
        ["replay", "--archive-url", settings.archive_url, "verify", run_id, "--json",
         "--trusted-key", vkey, "--no-agent-check"],  # hand-made runs, unsigned
        env=cli_env(settings),
    )  # fmt: skip


def test_records_expired_before_archiving_are_a_hole_and_later_runs_archive(
    local_broker_factory: Callable[..., LocalBroker], tmp_path: Path, log_vkey: str
) -> None:
    broker = local_broker_factory(
        log_retention_check_interval_ms="500", log_segment_delete_delay_ms="0"
    )
    settings = fresh_settings(broker.bootstrap, tmp_path, "holes", partitions=1)
    with running(settings) as (_seq, errors):
        _produce(settings, "h-before", range(3), 2)
        assert _archive(settings).stats.events_archived == 3
        # the archiver is stopped; these are sealed and signed, then expire unread
        _produce(settings, "h-lost", range(3), 2)
        _produce(settings, "h-cut", range(4), None)
        _, high = _watermarks(settings)
        _retention(settings, retention_ms="1000", segment_ms="200")
        _produce(settings, "h-cut", range(4, 5), None)  # its append rolls the segment
        wait_until(
            lambda: _watermarks(settings)[0] >= high,
            timeout=60,
            what="Kafka deleting the expired segments of sealed",
        )
        _retention(settings, retention_ms=str(30 * 86_400_000), segment_ms=str(3_600_000))
        _produce(settings, "h-cut", range(5, 6), 5)
        _produce(settings, "h-after", range(3), 2)
    assert not errors, errors

    archiver = _archive(settings)
    assert archiver.stats.holes == 1, archiver.stats
    assert archiver.registry.get_sample_value("tracevault_archiver_holes_total") == 1
    store = open_store(settings.archive_url, settings)
    (info,) = store.list("holes/")
    hole = Hole.from_json(store.get(info.key), info.key)
    assert hole.kind in {"gone", "unread"} and hole.first == 3, hole
    assert "h-cut" in hole.runs, hole
    lost = archiver.registry.get_sample_value("tracevault_archiver_leaves_lost_total")
    assert lost == hole.end - hole.first >= 3 + 4, (lost, hole)  # h-lost and h-cut's 0..3

    for run_id in ("h-before", "h-after"):
        res = _verify(settings, run_id, log_vkey)
        assert res.exit_code == 0, res.output
        assert json.loads(res.stdout)["log_checked"] is True
    # h-before is proven against the checkpoint where the hole began: a hold keeps it
    held = hold_run(store, "h-before", True).objects
    assert info.key in held and any(k.endswith(f"checkpoint/{3:020d}") for k in held), held
    cut = _verify(settings, "h-cut", log_vkey)
    assert cut.exit_code == 1, cut.output
    # seqs 0..3 expired; seq 4 too when Kafka applied the restored retention after rolling
    assert re.search(r"lost seqs 0\.\.[34] ", cut.output) and info.key in cut.output, cut.output
    gone = _verify(settings, "h-lost", log_vkey)
    assert gone.exit_code == 3, gone.output
    assert "check the run id" not in gone.output and info.key in gone.output, gone.output
