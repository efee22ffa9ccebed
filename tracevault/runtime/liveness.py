"""Where the sequencer imports the service runtime from until it moves onto
:mod:`tracevault.services.runtime` (issue 35: the archiver and the witness moved first; this
module and its package go when the sequencer does). Nothing is defined here."""

from tracevault.services.runtime import (
    BlockingCalls,
    Broken,
    CallDeadline,
    Health,
    KafkaWatch,
    LagReader,
    OffsetCommits,
    Restart,
    Sessions,
    Stopping,
    backoff,
    close_quietly,
    consumer_lag,
    is_fenced,
    is_outage,
    raise_for,
    serve,
    stop_on_signals,
)

__all__ = [
    "BlockingCalls",
    "Broken",
    "CallDeadline",
    "Health",
    "KafkaWatch",
    "LagReader",
    "OffsetCommits",
    "Restart",
    "Sessions",
    "Stopping",
    "backoff",
    "close_quietly",
    "consumer_lag",
    "is_fenced",
    "is_outage",
    "raise_for",
    "serve",
    "stop_on_signals",
]
