"""produce->sealed latency: each sampled event's ``at`` to the commit, at most
LATENCY_SAMPLES events a transaction (docs/operations.md, "Metrics")."""

from __future__ import annotations

import pytest

from tests.conftest import NOW_US
from tests.services.sequencer.support import raw_event
from tracevault.services.sequencer._metrics import LATENCY_SAMPLES, SequencerMetrics


@pytest.mark.parametrize("n", [1, LATENCY_SAMPLES - 1, LATENCY_SAMPLES + 1, 500])
def test_latency_is_sampled_and_measured_from_each_events_at(n: int) -> None:
    m = SequencerMetrics("lat")
    # events stamped 2.5 s before the commit (their `at` is NOW_US + seq by default)
    batch = [(None, s, b"", b"", raw_event("run-lat", s, at=NOW_US), 0, s) for s in range(n)]
    m.sealed_latency(batch, NOW_US + 2_500_000)
    labels = {"instance_id": "lat"}
    count = m.registry.get_sample_value(
        "tracevault_sequencer_produce_to_sealed_seconds_count", labels
    )
    total = m.registry.get_sample_value(
        "tracevault_sequencer_produce_to_sealed_seconds_sum", labels
    )
    assert count is not None
    # evenly spread: at most LATENCY_SAMPLES, more than half of them (or every event of a few)
    assert min(n, LATENCY_SAMPLES) // 2 < count <= min(n, LATENCY_SAMPLES)
    assert total == pytest.approx(2.5 * count)
    assert (
        m.registry.get_sample_value(
            "tracevault_sequencer_produce_to_sealed_seconds_bucket", {**labels, "le": "1.0"}
        )
        == 0
    )
