"""``publisher_metrics``: the Publisher's counters as Prometheus series, read at scrape time."""

from __future__ import annotations

from dataclasses import replace

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tracevault.producer import PublisherStats, publisher_metrics


class _Stats:
    def __init__(self, st: PublisherStats) -> None:
        self.st = st

    def stats(self) -> PublisherStats:
        return self.st


def _scrape(registry: object) -> dict[str, tuple[str, float]]:
    text = generate_latest(registry).decode()  # type: ignore[arg-type]
    return {
        s.name: (f.type, s.value)
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if not s.name.endswith("_created")
    }


def test_counts_are_counters_and_the_backlog_follows_the_spool() -> None:
    source = _Stats(PublisherStats(10, 4, 6, 2, 0, 0, spooling=True, lost=0, held=3, held_s=0.25))
    registry = publisher_metrics(source)
    got = _scrape(registry)
    assert got["tracevault_recorder_backpressure_waits_total"] == ("counter", 3)
    assert got["tracevault_recorder_backpressure_seconds_total"] == ("counter", 0.25)
    assert got["tracevault_recorder_spooled_total"] == ("counter", 6)
    assert got["tracevault_recorder_published_total"] == ("counter", 10)
    assert got["tracevault_recorder_spool_backlog_events"] == ("gauge", 4)
    assert got["tracevault_recorder_spooling"] == ("gauge", 1)
    # read at each scrape: drained, the backlog is gone (never negative: adopted segments)
    source.st = replace(source.st, drained=9, spooling=False)
    got = _scrape(registry)
    assert got["tracevault_recorder_spool_backlog_events"] == ("gauge", 0)
    assert got["tracevault_recorder_spooling"] == ("gauge", 0)
