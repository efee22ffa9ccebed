"""The agent-side SDK: record every crossing of the harness boundary to Kafka.

::

    from tracevault.producer import Publisher, Recorder, Tool

    publisher = Publisher(settings)            # one per process, shared by every run
    output = Recorder(publisher=publisher, agent_id="triage-bot", agent_version="1.2.0",
                      model=call_model, tools={"search": search}).run(agent, task)
    publisher.close()                          # delivers or spools what is left

Import from here, never from the private modules.
"""

from tracevault.producer._delivery import CloseReport, PublisherStats, producer_config
from tracevault.producer._metrics import publisher_metrics
from tracevault.producer._publisher import Publisher
from tracevault.producer._recorder import Recorder
from tracevault.producer._spool_drain import DrainReport, SegmentReport, drain_spool, spool_status
from tracevault.producer._tool import Tool

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
