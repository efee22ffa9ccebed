"""The Publisher's counters as Prometheus metrics, for the agent process that records.

The Recorder runs inside the agent, not as a service, so it serves no ``/metrics`` of its
own: the agent registers :func:`publisher_metrics` on the registry it already exposes (or
serves the one returned). Read at scrape time from ``Publisher.stats()``; nothing is counted
on the recording path. The spool backlog is what the alert "spool growing" watches
(docs/operations.md, "Metrics"; deploy/prometheus/alerts.yml).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tracevault.producer._delivery import PublisherStats

__all__ = ["publisher_metrics"]


class _HasStats(Protocol):
    def stats(self) -> PublisherStats: ...


class _PublisherCollector(Collector):
    def __init__(self, publisher: _HasStats) -> None:
        self._publisher = publisher

    def collect(self) -> Iterator[Metric]:
        st = self._publisher.stats()
        for name, doc, value in (
            ("published", "events handed to the Publisher by recorders", st.published),
            ("delivered", "events acknowledged by Kafka directly", st.delivered),
            ("spooled", "events written to the local spool (Kafka away or slow)", st.spooled),
            ("drained", "events sent from the spool and acknowledged", st.drained),
            ("lost", "events neither delivered nor spooled (a full disk)", st.lost),
            (
                "backpressure_waits",
                "recorder calls that waited for the publisher's thread to catch up",
                st.held,
            ),
            (
                "backpressure_seconds",
                "seconds recorder calls waited for the publisher's thread in all",
                st.held_s,
            ),
        ):
            yield CounterMetricFamily(f"tracevault_recorder_{name}", doc, value=value)
        for name, doc, level in (
            (
                "spool_backlog_events",
                "events spooled by this process and not yet drained",
                max(0, st.spooled - st.drained),
            ),
            ("spooling", "1 while the Publisher writes to the spool", int(st.spooling)),
            ("queued_events", "events not yet taken by the background thread", st.queued),
        ):
            yield GaugeMetricFamily(f"tracevault_recorder_{name}", doc, value=level)


def publisher_metrics(
    publisher: _HasStats, registry: CollectorRegistry | None = None
) -> CollectorRegistry:
    """``tracevault_recorder_*`` of ``publisher`` on ``registry`` (a new one by default).

    ``prometheus_client.start_http_server(port, registry=publisher_metrics(pub))`` serves
    them; an agent with its own registry passes it."""
    r = registry if registry is not None else CollectorRegistry(auto_describe=True)
    r.register(_PublisherCollector(publisher))
    return r
