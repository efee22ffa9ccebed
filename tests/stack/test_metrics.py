"""Prometheus naming conventions on what the live services expose (docs/operations.md,
"Metrics"): counters end in ``_total``, durations are ``_seconds`` histograms (the
sequencer's produce->sealed latency, the archiver's flush and checkpoint verification), and a
freshly started sequencer reports its true lag (0 when caught up), not the whole topic.

One live stack (tests/stack/live_stack.py) per module, scraped over HTTP and parsed with
prometheus_client's own text parser.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from prometheus_client.metrics_core import Metric

from tests.stack.live_stack import Stack, live_stack, wait_for


@pytest.fixture(scope="module")
def stack(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory, log_key: str, log_vkey: str
) -> Iterator[Stack]:
    with live_stack(kafka_bootstrap, tmp_path_factory.mktemp("metrics"), log_key, log_vkey) as s:
        yield s


def _scrape(stack: Stack) -> dict[str, dict[str, Metric]]:
    out = {name: svc.families() for name, svc in stack.services.items()}
    for name, fams in out.items():
        assert fams, f"{name} served no /metrics\n{stack.services[name].tail()}"
    return out


def test_counters_end_in_total_and_durations_are_seconds_histograms(stack: Stack) -> None:
    scraped = _scrape(stack)
    for service, fams in scraped.items():
        for name, fam in fams.items():
            assert name.startswith(f"tracevault_{service}_"), (service, name)
            if fam.type == "counter":
                names = {s.name for s in fam.samples}
                assert names <= {f"{name}_total", f"{name}_created"}, (name, names)
            if name.endswith("_seconds"):
                assert fam.type == "histogram", (name, fam.type)
            # a count is never a gauge: only levels (lag, sizes, what is held) are
            if fam.type == "gauge":
                assert not name.endswith(("_total", "_archived", "_written", "_holes")), name
    arc, seq = scraped["archiver"], scraped["sequencer"]
    assert arc["tracevault_archiver_events_archived"].type == "counter"
    gauges = {n for n, f in arc.items() if f.type == "gauge"}
    assert gauges == {"tracevault_archiver_consumer_lag", "tracevault_archiver_healthy"}
    for service, fams in scraped.items():  # /healthz as a series, 1 while it answers 200
        assert fams[f"tracevault_{service}_healthy"].samples[0].value == 1, service
    assert scraped["witness"]["tracevault_witness_refused"].type == "counter"

    def count(fam: Metric) -> float:
        return sum(s.value for s in fam.samples if s.name.endswith("_count"))

    def total(fam: Metric) -> float:
        return sum(s.value for s in fam.samples if s.name.endswith("_sum"))

    for fam in (
        arc["tracevault_archiver_flush_seconds"],
        arc["tracevault_archiver_checkpoint_verify_seconds"],
        seq["tracevault_sequencer_produce_to_sealed_seconds"],
    ):
        assert fam.type == "histogram" and count(fam) > 0, fam.name
    latency = seq["tracevault_sequencer_produce_to_sealed_seconds"]
    # the events were stamped as they were produced, minutes at most before being sealed: a
    # misread `at` (ms for µs, the epoch) would be off by orders of magnitude
    assert 0 <= total(latency) / count(latency) < 600


def test_a_fresh_sequencer_reports_its_true_lag(stack: Stack) -> None:
    """Caught up, a sequencer started again reports lag 0 on every partition (it counted
    from offset 0 until it consumed something: the whole topic, while doctor said caught
    up)."""
    old = stack.services["sequencer"]
    old.stop()
    assert old.proc.returncode == 0, old.tail()
    fresh = stack.start("sequencer", ["sequencer", "--instance-id", "ops-seq-2"])
    parts = [str(p) for p in range(stack.settings.partitions)]

    def lags() -> dict[str, float | None]:
        return {p: fresh.sample("tracevault_sequencer_consumer_lag", partition=p) for p in parts}

    wait_for(
        lambda: None not in lags().values(),
        120,
        "the fresh sequencer's lag on every partition",
        fresh.tail,
    )
    assert lags() == dict.fromkeys(parts, 0.0), fresh.tail()
    wait_for(lambda: fresh.health().get("lag") is not None, 60, "/healthz lag", fresh.tail)
    assert fresh.health()["lag"] == 0


def test_a_fresh_archiver_reports_its_true_lag(stack: Stack) -> None:
    """The same for the archiver (its /healthz lag and its gauge): caught up is 0. It was on
    main too; this guards the LagReader the three services now share."""
    old = stack.services["archiver"]
    old.stop()
    assert old.proc.returncode == 0, old.tail()
    fresh = stack.start("archiver", ["archiver", "--archive", stack.settings.archive_url])
    wait_for(lambda: fresh.health().get("lag") is not None, 60, "/healthz lag", fresh.tail)
    assert fresh.health()["lag"] == 0, fresh.tail()
    assert fresh.sample("tracevault_archiver_consumer_lag") == 0
