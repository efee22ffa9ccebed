"""The sequencer's counters, on a private Prometheus registry (optionally served on a port).

A registry per instance, not the process-global one, so tests and embedders can run several
sequencers in one process without duplicate-metric errors. Counters are incremented only
after their transaction commits: an aborted batch is counted as an abort, nothing else.
docs/design.md ("Metrics") lists every series; tests/test_docs.py keeps the two equal.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from tracevault.schemas.fast import event_time
from tracevault.services.sequencer._records import DlqReason

__all__ = ["SequencerMetrics"]

#: seconds from an event's ``at`` (the Recorder's clock) to its transaction's commit: ms
#: when the pipeline keeps up, minutes after an outage the spool rode out
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900)
#: events per transaction whose latency is observed, evenly spread: reading ``at`` costs
#: a few µs an event in Python (measured 9 µs under load), so the histogram samples instead of
#: slowing the sealing path (8 samples: under 0.1 ms a transaction)
LATENCY_SAMPLES = 8


class SequencerMetrics:
    """``tracevault_sequencer_*`` counters and gauges of one sequencer instance."""

    def __init__(self, instance: str) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        labels = {"instance_id": instance}
        self._labels = labels
        r = self.registry
        self.sealed = Counter(
            "tracevault_sequencer_sealed", "events sealed into a chain", ["instance_id"], registry=r
        ).labels(**labels)
        self.duplicates = Counter(
            "tracevault_sequencer_duplicates",
            "resent duplicates dropped (same seq, same bytes)",
            ["instance_id"],
            registry=r,
        ).labels(**labels)
        self._dlq = Counter(
            "tracevault_sequencer_dlq",
            "events refused to the DLQ, by reason",
            ["instance_id", "reason"],
            registry=r,
        )
        self.contested = _counter(r, labels, "contested", "agent notes not matching their run")
        self.gap_markers = Counter(
            "tracevault_sequencer_gap_markers",
            "GAP markers sealed for seqs that never arrived",
            ["instance_id"],
            registry=r,
        ).labels(**labels)
        self._txn = Counter(
            "tracevault_sequencer_transactions",
            "Kafka transactions, by outcome",
            ["instance_id", "outcome"],
            registry=r,
        )
        self._lag = Gauge(
            "tracevault_sequencer_consumer_lag",
            "raw records not yet consumed, per assigned partition",
            ["instance_id", "partition"],
            registry=r,
        )
        self.held = Gauge(
            "tracevault_sequencer_held_events",
            "events waiting behind a gap",
            ["instance_id"],
            registry=r,
        ).labels(**labels)
        self.rebalances = Counter(
            "tracevault_sequencer_rebalances",
            "partition assignments, revocations and losses",
            ["instance_id"],
            registry=r,
        ).labels(**labels)
        self._runs = Gauge(
            "tracevault_sequencer_runs",
            "runs in memory: open, or finished within the horizon",
            ["instance_id", "state"],
            registry=r,
        )
        self.finished_bytes = Gauge(
            "tracevault_sequencer_finished_state_bytes",
            "bytes held for runs finished within the horizon (docs/fleet.md)",
            ["instance_id"],
            registry=r,
        ).labels(**labels)
        self.closed_idle = Counter(
            "tracevault_sequencer_closed_idle",
            "open runs closed with a RUN_FINISHED marker after the idle timeout",
            ["instance_id"],
            registry=r,
        ).labels(**labels)
        self._rejected = Counter(
            "tracevault_sequencer_state_rejected",
            "restored heads records that did not prove themselves against sealed, by what "
            "they held (head, tree, chunk); each is an ALERT and is rebuilt from sealed",
            ["instance_id", "what"],
            registry=r,
        )
        self.latency = _latency(r, labels)
        self._precreate(instance)

    def _precreate(self, instance: str) -> None:
        """Every labelled series at 0 from the start, so a scrape shows it before it counts."""
        for what in ("head", "tree", "chunk"):
            self._rejected.labels(instance_id=instance, what=what)
        for reason in DlqReason:
            self._dlq.labels(instance_id=instance, reason=reason.value)
        for outcome in ("committed", "aborted"):
            self._txn.labels(instance_id=instance, outcome=outcome)

    def dlq(self, reason: DlqReason, n: int = 1) -> None:
        self._dlq.labels(reason=reason.value, **self._labels).inc(n)

    def rejected(self, what: str) -> None:
        self._rejected.labels(what=what, **self._labels).inc()

    def state(self, book: Any) -> None:
        """Sizes of the run book (a RunBook): open runs, finished runs, their bytes."""
        self._runs.labels(state="open", **self._labels).set(len(book.runs))
        self._runs.labels(state="finished", **self._labels).set(len(book.finished))
        self.finished_bytes.set(book.finished.nbytes)

    def transaction(self, outcome: str) -> None:
        self._txn.labels(outcome=outcome, **self._labels).inc()

    def sealed_latency(self, raws: Sequence[Any], sealed_us: int) -> None:
        """Observe produce->sealed latency of up to LATENCY_SAMPLES of a committed batch's
        sealed records (``SealOut``: the event's bytes are field 4)."""
        n = len(raws)
        if not n:
            return
        step = -(-n // LATENCY_SAMPLES)  # ceil: at most LATENCY_SAMPLES indices
        for i in range(0, n, step):
            at = event_time(raws[i][4])
            if at is not None:  # None: a schema this prefix read does not know
                self.latency.observe(max(0, sealed_us - at) / 1e6)

    def set_lag(self, lag: Mapping[int, int]) -> None:
        self._lag.clear()
        for partition, value in lag.items():
            self._lag.labels(partition=str(partition), **self._labels).set(value)

    def serve(self, port: int) -> None:
        """Serve ``/metrics`` on ``port`` (0 picks a free one) in a daemon thread."""
        start_http_server(port, registry=self.registry)

    def snapshot(self) -> dict[str, float]:
        """Every sample as ``name{labels}`` -> value, for logs and tests."""
        out: dict[str, float] = {}
        for metric in self.registry.collect():
            for s in metric.samples:
                if s.name.endswith("_created"):
                    continue
                extra = ",".join(
                    f"{k}={v}" for k, v in sorted(s.labels.items()) if k != "instance_id"
                )
                out[f"{s.name}{{{extra}}}" if extra else s.name] = s.value
        return out


def _counter(r: CollectorRegistry, labels: dict[str, str], name: str, doc: str) -> Any:
    """A ``tracevault_sequencer_<name>`` counter of this instance (docs/design.md, Metrics)."""
    return Counter(f"tracevault_sequencer_{name}", doc, ["instance_id"], registry=r).labels(
        **labels
    )


def _latency(r: CollectorRegistry, labels: dict[str, str]) -> Any:
    """The produce->sealed histogram of this instance (docs/operations.md, "Metrics")."""
    return Histogram(
        "tracevault_sequencer_produce_to_sealed_seconds",
        "seconds from an event's `at` to the commit that sealed it (sampled: at most "
        f"{LATENCY_SAMPLES} events per transaction)",
        ["instance_id"],
        buckets=_LATENCY_BUCKETS,
        registry=r,
    ).labels(**labels)
