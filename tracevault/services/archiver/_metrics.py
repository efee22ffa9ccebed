"""The archiver's metrics, on a private Prometheus registry (``--metrics-port``).

The counts are the archiver's own counters (``ArchiverStats``), read at scrape time and
exposed as Prometheus counters (``_total``); lag is a gauge; a flush's write and a
checkpoint's verification are ``_seconds`` histograms. docs/operations.md ("Metrics") lists
every series and the dashboard and alert rules in deploy/ query them by these names.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tracevault.services.archiver._quarantine import QuarantineReason as Why
from tracevault.services.archiver._state import ArchiverStats
from tracevault.services.runtime import Health

__all__ = ["ArchiverMetrics"]

#: seconds: a flush writes a few objects (ms on a disk, tens of ms to S3); a checkpoint's
#: verification is one Ed25519 check and a tree (sub-ms)
_FLUSH_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
_VERIFY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 1)

_Read = Callable[[], float]


class _Counts(Collector):
    """The counters and the lag gauge, read from the archiver's state at each scrape."""

    def __init__(self, counters: list[tuple[str, str, _Read]], lag: _Read) -> None:
        self._counters = counters
        self._lag = lag

    def collect(self) -> Iterator[Metric]:
        for name, doc, read in self._counters:
            yield CounterMetricFamily(f"tracevault_archiver_{name}", doc, value=read())
        yield GaugeMetricFamily(
            "tracevault_archiver_consumer_lag", "sealed records not yet consumed", value=self._lag()
        )


class ArchiverMetrics:
    """``tracevault_archiver_*``: counters since start, lag, flush and verify durations."""

    def __init__(self, st: ArchiverStats, health: Health) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        q = st.quarantined
        counters: list[tuple[str, str, _Read]] = [
            ("events_archived", "events written to the archive", lambda: st.events_archived),
            ("events_skipped", "events the archive already held", lambda: st.events_skipped),
            ("segments_written", "log flushes written", lambda: st.segments_written),
            ("runs_finished", "runs archived with their end", lambda: st.runs_finished),
            (
                "checkpoints_verified",
                "checkpoint records whose signature and root held",
                lambda: st.checkpoints_verified,
            ),
            (
                "records_quarantined",
                "sealed records refused (any reason, not-in-log included)",
                lambda: st.events_quarantined,
            ),
            (
                "records_not_in_log",
                "sealed records no signed checkpoint lists (injected)",
                lambda: q.get(Why.NOT_IN_LOG.value, 0),
            ),
            (
                "checkpoints_refused",
                "checkpoint records that failed verification",
                lambda: q.get(Why.BAD_CHECKPOINT.value, 0),
            ),
            (
                "holes",
                "holes recorded: sealed records gone before the archiver read them",
                lambda: st.holes,
            ),
            ("leaves_lost", "leaves of the log in holes", lambda: st.leaves_lost),
            (
                "leaves_quarantined",
                "leaves of the log whose records are quarantined, not run history",
                lambda: st.leaves_quarantined,
            ),
            ("session_restarts", "Kafka sessions replaced", lambda: health.restarts),
        ]
        self.registry.register(_Counts(counters, lambda: health.lag or 0))
        self.flush_seconds = Histogram(
            "tracevault_archiver_flush_seconds",
            "time to write one flush of a partition's log (its objects and checkpoint)",
            buckets=_FLUSH_BUCKETS,
            registry=self.registry,
        )
        self.verify_seconds = Histogram(
            "tracevault_archiver_checkpoint_verify_seconds",
            "time to verify one checkpoint record (signature, origin, tree, leaves)",
            buckets=_VERIFY_BUCKETS,
            registry=self.registry,
        )
