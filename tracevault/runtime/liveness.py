"""Where the sequencer and the witness import the service runtime from until they move onto
:mod:`tracevault.services.runtime` (issue 35: the archiver moved first; this module and its
package go when the last of them does). Nothing is defined here."""

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
