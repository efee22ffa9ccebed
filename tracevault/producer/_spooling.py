"""The spool side of the Publisher's background thread: entering, writing, draining.

Split from ``_publisher`` (which holds the agent's side, librdkafka's callbacks, the
``direct`` state, close and the states' overview): here is everything the thread does in the
``spooling`` state — the purge into the spool sorted by (run, seq), writing the queue oldest
first in fsync'd chunks, adopting a dead process's segments, the broker probe on its own
thread, and sending the oldest spooled events again (``_drain.py``) until the spool is empty.
:class:`SpoolSide` is the Publisher's base class; the methods are the Publisher's own, moved
whole, and run only on its background thread.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaException, Producer

from tracevault.producer._backpressure import Backpressure
from tracevault.producer._drain import TooOld, drain_batch
from tracevault.producer._shadow import Shadow
from tracevault.producer._spool import SpoolSegment, SpoolWriter, list_segments
from tracevault.producer._wire import read_run_seq

__all__ = ["Item", "SpoolSide"]

# the Publisher logs under one name wherever its code sits (log filters, tests)
logger = logging.getLogger("tracevault.producer._publisher")

_RETRY_S = 1.0
_DRAIN_BATCH = 5000
#: Events encoded and fsync'd per spool write, so the oldest are durable first.
_SPOOL_CHUNK = 1000
_PROBE_S = 2.0

Item = tuple[bytes, Callable[..., bytes], tuple[Any, ...]]


class _Probe:
    """One metadata request on its own thread: does the broker answer?

    ``list_topics`` waits up to its timeout while the broker is away; on the background
    thread that wait would leave the agent's events in memory, unspooled, for seconds.
    """

    def __init__(self, producer: Producer, topic: str) -> None:
        self.done = threading.Event()
        self.ok = False
        threading.Thread(
            target=self._run, args=(producer, topic), name="tracevault-probe", daemon=True
        ).start()

    def _run(self, producer: Producer, topic: str) -> None:
        try:
            producer.list_topics(topic, timeout=_PROBE_S)
            self.ok = True
        except KafkaException:
            self.ok = False
        finally:
            self.done.set()


class SpoolSide:
    """The ``spooling`` state's work (the Publisher's base class; its state is set there)."""

    topic: str
    _spool_dir: Path
    _spool_after: float
    _too_old: TooOld
    _queue: deque[Item]
    _producer: Producer | None
    _direct: bool
    _held: bool
    _spool_requested: bool
    _purged: list[tuple[bytes, bytes]]
    _carry: list[tuple[bytes, bytes]]
    _writer: SpoolWriter
    _shadow: Shadow
    _backlog: deque[SpoolSegment]
    _offsets: dict[Path, int]
    _own_paths: set[Path]
    _busy_since: float | None
    _next_drain: float
    _probe: _Probe | None
    _answered: bool
    _handled: int
    _produced: int
    _published: int
    _hold: Backpressure
    _spooled: int
    _drained: int
    _drained_own: int
    _lost: int

    if TYPE_CHECKING:  # the Publisher's

        def _encode(self, item: Item) -> bytes | None: ...

        def _closing_late(self) -> bool: ...

    def _pump_to_spool(self) -> None:
        """Write the queue to the spool, oldest first, one fsync per ``_SPOOL_CHUNK``.

        After each chunk the agents waiting for it are released, and how long a full chunk
        took tells them how long a queue this thread keeps within the bound
        (``_backpressure.py``).
        """
        queue, hold = self._queue, self._hold
        mark, upto = time.monotonic(), self._published
        while queue:
            began = time.monotonic()
            records: list[tuple[bytes, bytes]] = []
            while queue and len(records) < _SPOOL_CHUNK:
                item = queue.popleft()
                value = self._encode(item)
                self._handled += 1
                if value is not None:
                    records.append((item[0], value))
            self._append(records)
            if len(records) == _SPOOL_CHUNK:
                hold.wrote(_SPOOL_CHUNK, time.monotonic() - began)
            if self._handled >= upto:
                hold.fresh(mark)
                mark, upto = time.monotonic(), self._published
            hold.took(self._handled)
        if self._handled >= upto:
            hold.fresh(mark)

    def _enter_spool(self) -> None:
        producer = self._producer
        assert producer is not None
        self._spool_requested = False
        if self._direct:
            logger.warning(
                "Kafka is away (every broker down, or no acknowledgement for %.1fs); "
                "spooling to %s",
                self._spool_after,
                self._spool_dir,
            )
            # Only what was never sent is taken back. A request in flight may be written
            # already (its acknowledgement not back: "possibly persisted"), and a purged
            # event sent again from the spool would reach raw twice; the idempotent producer
            # delivers those exactly once, in order, when Kafka answers, and until then the
            # shadow keeps them on disk. They are older than anything spooled now.
            producer.purge(in_queue=True, in_flight=False)
            left = -1
            while left != len(producer):  # serve the purge's reports
                left = len(producer)
                producer.poll(0)
            if left > 0:
                self._held = True
                self._shadow.tick(self._produced, left, math.inf)
        self._direct = False
        lost = self._lost
        self._spool_purged()
        carry, self._carry = self._carry, []
        self._append(carry)
        self._hold.took(self._handled)
        self._hold.spooling(True)
        if not self._held:
            self._shadow.recent.clear()
            if self._lost == lost:
                self._shadow.drop()  # what it copied is delivered or in the spool, durably
        self._busy_since = None
        self._next_drain = time.monotonic() + _RETRY_S

    def _held_done(self) -> bool:
        """Whether the client holds nothing produced before spooling started any more.

        The spool is drained only then: its events are newer than those, and a run's events
        must reach Kafka in seq order. Once they are all acknowledged (or failed, and
        spooled), the shadow copy of them is deleted.
        """
        if not self._held:
            return True
        producer = self._producer
        assert producer is not None
        producer.poll(0)
        if len(producer) > 0:
            return False
        self._held = False
        lost = self._lost
        self._spool_purged()  # refused by Kafka (not purged): in the spool now
        self._shadow.recent.clear()
        if self._lost == lost:
            self._shadow.drop()
        logger.info("the events the Kafka client held when spooling started are delivered")
        return True

    def _spool_held(self) -> None:
        """At close, with Kafka still away: take back what the client holds.

        These are purged (the process is ending) and may have been written all the same.
        The shadow segment, older than every spool segment, holds them in order already; a
        drainer sends it first. Only a purged event the shadow lacks is spooled (after newer
        ones: the sequencer holds a run's later events until the gap fills). Either way the
        event can reach raw twice, the same bytes, which the sequencer drops.
        """
        producer = self._producer
        assert producer is not None
        if not self._held:
            return
        self._held = False
        producer.purge(in_queue=True, in_flight=True)
        deadline = time.monotonic() + 5.0
        while len(producer) > 0 and time.monotonic() < deadline:
            producer.poll(0.01)
        purged, self._purged = self._purged, []
        kept = self._shadow.holding(purged)
        missing = [kv for kv in purged if kv not in kept]
        self._spooled += len(purged) - len(missing)
        self._purged = missing
        self._spool_purged()

    def _spool_purged(self) -> None:
        if not self._purged:
            return
        purged, self._purged = self._purged, []
        # Per run (key) in seq order: librdkafka may report in-flight and queued separately.
        purged.sort(key=lambda kv: (kv[0], _seq_of(kv[1])))
        self._append(purged)

    def _append(self, records: list[tuple[bytes, bytes]]) -> None:
        if not records:
            return
        try:
            if self._writer.full:
                self._writer.close()
            self._writer.append(records)
        except OSError as exc:
            self._lost += len(records)
            logger.error(
                "could not write %s events to the spool %s (%s): they are lost; free disk "
                "space or fix TRACEVAULT_SPOOL_DIR",
                len(records),
                self._spool_dir,
                exc,
            )
            return
        self._spooled += len(records)
        path = self._writer.path
        assert path is not None
        if not self._backlog or self._backlog[-1].path != path:
            # holds the segment's lock until drained, past the writer closing it when full
            self._backlog.append(self._writer.segment())
            self._own_paths.add(path)

    def _adopt_orphans(self) -> None:
        """Take over segments whose writer died, so this process delivers them.

        Cutting a torn tail reads a whole segment: the agent's events queued meanwhile are
        spooled every 1,024 records read and after each segment, so adopting a large spool
        does not keep them in memory past the bound (this process's segment goes after the
        adopted ones).
        """
        adopted: list[SpoolSegment] = []
        for seg in list_segments(self._spool_dir):
            try:
                if not seg.try_lock():
                    continue
                seg.read_header()
            except FileNotFoundError:
                continue  # delivered and deleted by its owner meanwhile
            except (OSError, ValueError) as exc:
                logger.error("cannot adopt spool segment %s: %s", seg.path, exc)
                seg.unlock()
                continue
            if seg.topic != self.topic:
                seg.unlock()  # another deployment's spool in the same directory
                continue
            if self._direct:
                self._direct = False
                self._hold.spooling(True)
            try:
                # a writer killed mid-append; logged as a warning
                seg.repair_tail(self._pump_to_spool)
            except OSError as exc:
                logger.error("cannot cut the torn tail of spool segment %s: %s", seg.path, exc)
            adopted.append(seg)
            self._pump_to_spool()
        if adopted:
            self._backlog.extendleft(reversed(adopted))
            logger.warning(
                "found %s spool segment(s) from an earlier process; delivering them first",
                len(adopted),
            )

    def _spool_tick(self) -> None:
        self._spool_purged()
        self._pump_to_spool()
        if not self._held_done():
            return
        now = time.monotonic()
        if now < self._next_drain:
            return
        answered = self._broker_answers(wait=False)
        if answered is None:
            return  # the probe is still out: spool on, look again next tick
        if not answered:
            self._next_drain = time.monotonic() + _RETRY_S
            return
        progressed = self._drain_once(self._closing_late)
        # Trust the broker for the next batch only while batches are acknowledged.
        self._answered = progressed
        if not self._backlog and not self._queue and not self._spool_requested:
            self._direct = True
            self._hold.spooling(False)
            self._answered = False
            logger.warning("Kafka is back: spool delivered, publishing directly again")
            return
        self._next_drain = now if progressed else time.monotonic() + _RETRY_S

    def _broker_answers(self, *, wait: bool) -> bool | None:
        """Whether the broker answered a metadata request; None while one is out.

        Asked before sending from the spool: while the broker is away nothing is produced,
        so nothing has to be purged later (a purged record that Kafka did write becomes a
        duplicate when it is sent again). The request runs on a :class:`_Probe` thread.
        """
        if self._answered:
            return True
        producer = self._producer
        assert producer is not None
        if self._probe is None:
            self._probe = _Probe(producer, self.topic)
        if wait:
            self._probe.done.wait(_PROBE_S + 1.0)
        if not self._probe.done.is_set():
            return None
        ok, self._probe = self._probe.ok, None
        return ok

    def _drain_once(self, give_up: Callable[[], bool]) -> bool:
        """Send one batch of the oldest spooled events; True if any were delivered.

        The batch is never purged while this process lives (``_drain.py``): the wait for its
        acknowledgements ends only when they are all in, or at ``give_up()`` (close's
        deadline passed).
        """
        producer = self._producer
        assert producer is not None
        if not self._backlog:
            return False
        seg = self._backlog[0]
        own = seg.path == self._writer.path
        start = self._offsets.get(seg.path)
        if start is None:
            start = seg.cursor()
        result = drain_batch(
            producer,
            seg,
            start=start,
            end=self._writer.size if own else None,
            batch=_DRAIN_BATCH,
            timeout=None,
            between=self._pump_to_spool,
            too_old=self._too_old,
            give_up=give_up,
        )
        self._offsets[seg.path] = result.offset
        self._drained += result.delivered
        if seg.path in self._own_paths:
            self._drained_own += result.delivered
        if result.reached_end or seg.corruption is not None:
            if seg.corruption is not None:
                logger.error(
                    "spool segment %s is corrupt at byte %s (%s); events after it are left "
                    "there for `tracevault spool status`",
                    seg.path,
                    seg.corruption.offset,
                    seg.corruption.reason,
                )
            # The writer's segment is finished only if nothing was appended meanwhile (by
            # ``between``, which may also have filled it and moved the writer to a new one).
            writing = seg.path == self._writer.path
            if writing:
                finished = result.offset >= self._writer.size
            else:
                finished = not own or result.offset >= seg.path.stat().st_size
            if finished:
                if writing:
                    self._writer.close()
                if seg.corruption is None:
                    seg.remove()
                else:
                    seg.unlock()
                self._offsets.pop(seg.path, None)
                self._backlog.popleft()
        return result.delivered > 0


def _seq_of(value: bytes) -> int:
    """The seq an event's bytes carry, for ordering the purged events of a run; -1 for bytes
    that are not an event (``Publisher.publish`` takes any bytes): they are spooled as they
    came and the sequencer sends them to its DLQ, where they are named. Reading them must
    not stop the Publisher's thread, which lost every later event when it did."""
    try:
        return read_run_seq(value)[1]
    except (IndexError, UnicodeDecodeError, ValueError):
        return -1
