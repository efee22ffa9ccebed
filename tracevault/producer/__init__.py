"""The agent-side SDK: record every crossing of the harness boundary to Kafka.

::

    from tracevault.producer import Publisher, Recorder, Tool

    publisher = Publisher(settings)            # one per process, shared by every run
    output = Recorder(publisher=publisher, agent_id="triage-bot", agent_version="1.2.0",
                      model=call_model, tools={"search": search}).run(agent, task)
    publisher.close()                          # delivers or spools what is left

Import from here, never from the private modules. The import is light: no object-store,
transparency-log or key-provider code, and no Prometheus client until ``publisher_metrics`` is
asked for; identity and encryption load theirs when a Recorder is built with them.
"""

from typing import TYPE_CHECKING

from tracevault.producer._delivery import CloseReport, PublisherStats, producer_config
from tracevault.producer._publisher import Publisher
from tracevault.producer._recorder import Recorder
from tracevault.producer._spool_drain import DrainReport, SegmentReport, drain_spool, spool_status
from tracevault.producer._tool import Tool

if TYPE_CHECKING:
    from tracevault.producer._metrics import publisher_metrics

__all__ = [
    # recording
    "Recorder",
    "Tool",
    # publishing
    "Publisher",
    "PublisherStats",
    "CloseReport",
    "producer_config",
    "publisher_metrics",
    # the spool
    "DrainReport",
    "SegmentReport",
    "drain_spool",
    "spool_status",
]


def __getattr__(name: str) -> object:
    """``publisher_metrics`` on first use: only an agent that serves metrics needs
    prometheus_client."""
    if name == "publisher_metrics":
        from tracevault.producer._metrics import publisher_metrics  # noqa: PLC0415

        return publisher_metrics
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
