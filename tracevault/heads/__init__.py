"""The heads record (one per run, the sequencer's state) and finding a run by it.

Import from here::

    from tracevault.heads import Head, decode_head, locate_run

    loc = locate_run(settings, "run-42")
    # loc.partition, loc.start_offset: seek <prefix>.sealed there and read records keyed
    # "run-42" until seq == loc.last_seq (or offset == loc.end_offset).

The record format lives beneath the sequencer (which writes it) and the replayer (which reads
it); see docs/design.md, "Layout". Reading heads from Kafka needs confluent-kafka; the record
format alone (:mod:`tracevault.heads._record`) does not.
"""

from tracevault.heads._finished import (
    FINISHED_KEY_PREFIX,
    FinishedChunk,
    fingerprint,
    is_finished_key,
)
from tracevault.heads._proof import ProvenState, Rejection, prove_state
from tracevault.heads._read import (
    HeadsState,
    RunLocation,
    find_head,
    heads_partition_count,
    locate_run,
    read_heads,
    read_heads_and_trees,
    read_state,
)
from tracevault.heads._record import (
    GapRange,
    Head,
    HeldEvent,
    decode_head,
    encode_head,
    head_v1_header,
    plain_head_value,
)

__all__ = [
    # the record
    "GapRange",
    "Head",
    "HeldEvent",
    "decode_head",
    "encode_head",
    "head_v1_header",
    "plain_head_value",
    # finished runs within the horizon
    "FINISHED_KEY_PREFIX",
    "FinishedChunk",
    "fingerprint",
    "is_finished_key",
    # finding a run
    "HeadsState",
    "RunLocation",
    "find_head",
    "read_state",
    "heads_partition_count",
    "locate_run",
    "read_heads",
    "read_heads_and_trees",
    # proving restored state against sealed (the sequencer's restore)
    "ProvenState",
    "Rejection",
    "prove_state",
]
