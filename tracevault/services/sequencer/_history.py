"""Read a run's sealed hashes back from ``<prefix>.sealed`` (for resent old duplicates).

The sequencer keeps hashes of what it sealed in memory, but after a restart (or once a run
has finished) it knows only each run's last hash. An event resent with an old seq then needs
the sealed hash of that seq and of the one before it to tell a harmless duplicate from a
conflict. The head's exact ``first_offset``/``last_offset`` bound the read to the run's own
span of one partition; this is rare (a producer resending long-sealed events) and cheap.

Liveness (docs/liveness.md): the read runs in the sequencer's main thread, so it must not
outlast the broker. It gives up as soon as ``abort`` names a reason (stop was asked, or no
broker is reachable) instead of waiting out its timeout; a reader whose read failed is closed,
and the sequencer closes it with every Kafka session it replaces, so the next read starts on a
fresh consumer rather than one left behind by a broker crash. A run's span read once is kept
(``_CACHED`` spans): an agent that resends a thousand sealed events of a finished run after
the broker returns costs one read, not one each.

The same read keeps what a run that left memory (finished, or closed for idleness) needs to
judge a hijack's evidence (docs/identity.md): its seq 0's bytes (the note that names the run's
key) and the seqs the sequencer wrote itself (GAP and closing markers), :meth:`facts`.
"""

from __future__ import annotations

import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from tracevault.config import Settings
from tracevault.errors import ServiceUnavailableError
from tracevault.kafka import new_consumer
from tracevault.schemas import decode_sealed
from tracevault.services.sequencer._state import RunFacts
from tracevault.transparency import is_checkpoint_record

__all__ = ["SealedHistory"]

_CACHED = 256  # run spans kept (a few dozen hashes each)


class SealedHistory:
    """Callable ``(run_id, partition, first_offset, last_offset) -> {seq: hash}``."""

    def __init__(
        self,
        settings: Settings,
        *,
        timeout: float = 30.0,
        abort: Callable[[], str | None] | None = None,
        client_config: dict[str, Any] | None = None,
    ) -> None:
        self._settings = settings
        self._extra = client_config or {}
        self._timeout = timeout
        self._abort = abort
        self._consumer: Consumer | None = None
        self._spans: OrderedDict[tuple[str, int, int, int], dict[int, bytes]] = OrderedDict()
        self._facts: OrderedDict[tuple[str, int, int, int], RunFacts] = OrderedDict()

    def _client(self) -> Consumer:
        if self._consumer is None:
            self._consumer = new_consumer(
                self._settings,
                **{
                    "group.id": f"tracevault-sealed-history-{uuid.uuid4().hex[:8]}",
                    "enable.auto.commit": False,
                    "isolation.level": "read_committed",
                    # a position reset (after a broker crash) must not park it at the end,
                    # waiting for records only the blocked sequencer could write
                    "auto.offset.reset": "earliest",
                    "log_level": 0,
                    **self._extra,
                },
            )
        return self._consumer

    def __call__(
        self, run_id: str, partition: int, first_offset: int, last_offset: int
    ) -> dict[int, bytes]:
        if first_offset < 0 or last_offset < first_offset:
            return {}
        span = (run_id, partition, first_offset, last_offset)
        got = self._spans.get(span)
        if got is None:
            try:
                got = self._read(run_id, partition, first_offset, last_offset)
            except BaseException:
                self.close()  # the next read starts on a fresh consumer
                raise
            self._spans[span] = got
            if len(self._spans) > _CACHED:
                self._spans.popitem(last=False)
        else:
            self._spans.move_to_end(span)
        return dict(got)

    def facts(self, run_id: str, partition: int, first_offset: int, last_offset: int) -> RunFacts:
        """Seq 0's bytes and the sequencer's own seqs of the run's span (read with its hashes)."""
        span = (run_id, partition, first_offset, last_offset)
        if span not in self._facts:
            self._spans.pop(span, None)  # read once more: these were not kept the first time
            self(run_id, partition, first_offset, last_offset)
        return self._facts.get(span, (None, frozenset()))

    def _read(
        self, run_id: str, partition: int, first_offset: int, last_offset: int
    ) -> dict[int, bytes]:
        topic = self._settings.topics.sealed
        consumer = self._client()
        consumer.assign([TopicPartition(topic, partition, first_offset)])
        key = run_id.encode("utf-8")
        hashes: dict[int, bytes] = {}
        start: bytes | None = None
        own: set[int] = set()
        deadline = time.monotonic() + self._timeout
        try:
            while True:
                why = self._abort() if self._abort is not None else None
                if why is not None:
                    raise ServiceUnavailableError(
                        f"reading run {run_id}'s sealed history from {topic}[{partition}] "
                        f"stopped: {why}"
                    )
                if time.monotonic() > deadline:
                    raise ServiceUnavailableError(
                        f"reading run {run_id}'s sealed history from {topic}[{partition}] "
                        f"offsets {first_offset}..{last_offset} did not finish in "
                        f"{self._timeout:.0f}s; check the broker"
                    )
                done = False
                for msg in consumer.consume(1000, timeout=0.05):
                    err = msg.error()
                    if err is not None:
                        if err.code() != KafkaError._PARTITION_EOF:
                            raise ServiceUnavailableError(f"reading {topic}: {err}")
                        continue
                    if msg.key() == key and not is_checkpoint_record(msg.headers()):
                        value = msg.value()
                        if value is not None:
                            sealed = decode_sealed(value)
                            hashes[sealed.seq] = sealed.hash
                            if sealed.seq == 0:
                                start = sealed.raw
                            if sealed.source_offset < 0:
                                own.add(sealed.seq)
                    if (msg.offset() or 0) >= last_offset:
                        done = True
                        break
                if done:
                    span = (run_id, partition, first_offset, last_offset)
                    self._facts[span] = (start, frozenset(own))
                    if len(self._facts) > _CACHED:
                        self._facts.popitem(last=False)
                    return hashes
        except KafkaException as exc:
            raise ServiceUnavailableError(f"reading {topic}: {exc}") from exc
        finally:
            consumer.unassign()

    def close(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            consumer.close()
