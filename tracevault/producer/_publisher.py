"""The Kafka side of the Recorder: one producer per process, never blocking the agent.

The agent's thread only appends an event (its key and how to encode it) to an in-memory
queue, under a lock, and never wakes anyone: the background thread takes the queue every
5 ms (like ``linger.ms``), because waking it per event costs the agent GIL hand-offs that
showed up as a 300 µs p99. That one thread owns everything else, so the states below
change without races: it encodes the Avro bytes, produces them, tracks delivery, writes and
drains the spool. Only when that thread falls behind (a saturated CPU) does the agent's call
wait for it, on the local disk, never on Kafka (``_backpressure.py``). States:

``direct``
    events go to librdkafka (idempotent, ``acks=all``, zstd, ``murmur2_random``, key = run
    id). librdkafka retries without a deadline (``message.timeout.ms=0``) so its order is
    never broken by an expiry.
``spooling``
    entered as soon as librdkafka reports every broker down (a stopped or killed broker
    refuses connections at once), when nothing was acknowledged for ``spool_after_ms``
    while events were outstanding (a broker that hangs without closing its connections),
    or when librdkafka's queue is full. In this order, so a run's events stay in seq order:
    (1) stop producing; (2) purge librdkafka's queue (events never sent) and write it to the
    spool sorted by (run, seq); the requests in flight are left to librdkafka, with their
    shadow copy written to disk at once (never purged while the process lives: a request
    sent may have been written by the broker, and sent again it would reach raw twice);
    (3) every later event goes straight to the spool, fsync'd in batches of at most
    ``_SPOOL_CHUNK``; (4) once librdkafka holds nothing (its idempotent producer delivered
    what was in flight exactly once), the shadow is deleted and, about every second, a
    metadata request on a short-lived thread asks whether the broker answers; once it
    does, the oldest spooled events are sent again (``_drain_once``, never purged either),
    and when the spool and the queue are empty the state is ``direct`` again.

Durability bound: an event the agent handed over that Kafka has not acknowledged is
fsync'd to the spool within ``SPOOL_DURABLE_MS`` (100 ms; measured 0-62 ms), however
long the queue and however busy the CPU. While spooling, the background thread never waits
longer than 10 ms on anything but a spool write (the broker probe runs on its own thread; a
drain serves the queue every 10 ms while it waits for acknowledgements and every 256 records
while it reads and produces), and it writes the queue oldest first in chunks. When the thread
does not get the CPU in time, the agent's call waits for it (``_backpressure.py``). Before
spooling starts (a broker that hangs or is shutting down), events that stay unacknowledged
for 20 ms are copied to a shadow segment (``_shadow.py``) and deleted again once Kafka
acknowledges them. Measured under SIGKILL in
tests/producer/test_spool_kill.py; the figures are in docs/design.md, "The spool".

Segments left by a process that died are adopted at start and drained the same way (their
runs are unrelated to this process's, so order is unaffected). ``close(timeout)`` delivers
what it can within ``timeout`` and spools the rest, returning a :class:`CloseReport`.

This module is the agent's side, librdkafka's callbacks, the thread's loop and the ``direct``
state, and close; the ``spooling`` state's work is ``_spooling``'s (the Publisher's base).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import math
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from tracevault.config import Settings
from tracevault.errors import ConfigError, TraceVaultError
from tracevault.producer._backpressure import CHECK_EACH, CHECK_EVERY, Backpressure
from tracevault.producer._delivery import CloseReport, PublisherStats, producer_config
from tracevault.producer._drain import rejected_sink
from tracevault.producer._shadow import Shadow
from tracevault.producer._spool import SpoolSegment, SpoolWriter
from tracevault.producer._spooling import Item, SpoolSide, _Probe

__all__ = ["SPOOL_DURABLE_MS", "Publisher"]

logger = logging.getLogger(__name__)

_PURGED = (KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT)
_POLL_EVERY = 500
#: An accepted event Kafka has not acknowledged is on disk (fsync'd) within this many ms.
SPOOL_DURABLE_MS = 100
_SPOOL_NAP_S = 0.01


def _same(value: bytes) -> bytes:
    return value


_LIVE: weakref.WeakSet[Publisher] = weakref.WeakSet()


@atexit.register
def _close_live_publishers() -> None:  # pragma: no cover - runs at interpreter exit
    for pub in list(_LIVE):
        with contextlib.suppress(Exception):
            pub.close(timeout=5.0)


class Publisher(SpoolSide):
    """One per process: a shared, thread-safe producer of TraceEvents to ``<prefix>.raw``.

    Creating it opens nothing; the producer and its background thread start with the first
    event. Use it as a context manager or call :meth:`close` before exit (an ``atexit`` hook
    closes forgotten ones with a 5 s timeout).
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.topic = settings.topics.raw
        self._spool_dir = Path(settings.spool_dir)
        self._spool_after = settings.spool_after_ms / 1000.0
        # events older than spool_max_age_s are kept in <spool>/rejected/, not sent
        self._too_old = rejected_sink(settings, self.topic)
        self._lock = threading.Lock()
        self._queue: deque[Item] = deque()
        self._wake = threading.Event()
        self._sleeping = False
        self._stop = threading.Event()
        self._closed = False
        self._producer: Producer | None = None
        self._thread: threading.Thread | None = None
        # Owned by the background thread from here on.
        self._direct = True
        # events produced directly that the client still holds after spooling started
        self._held = False
        self._spool_requested = False
        self._purged: list[tuple[bytes, bytes]] = []
        self._carry: list[tuple[bytes, bytes]] = []
        self._writer = SpoolWriter(self._spool_dir, self.topic)
        self._shadow = Shadow(self._spool_dir, self.topic)
        self._backlog: deque[SpoolSegment] = deque()
        self._offsets: dict[Path, int] = {}
        self._own_paths: set[Path] = set()
        self._busy_since: float | None = None
        self._last_progress = 0.0
        self._seen_delivered = 0
        self._next_drain = 0.0
        self._probe: _Probe | None = None
        self._answered = False
        self._published = 0
        self._handled = 0
        self._hold = Backpressure()
        self._produced = 0
        self._errored = 0
        self._spooled = 0
        self._drained = 0
        self._drained_own = 0
        self._lost = 0
        self._report: CloseReport | None = None
        self._close_timeout = 10.0
        self._close_by = math.inf
        _LIVE.add(self)

    # -- agent threads ----------------------------------------------------------------------
    def publish(self, key: bytes, value: bytes) -> None:
        """Queue one encoded event for Kafka (or the spool); never waits on the network."""
        self._enqueue(key, _same, (value,))

    def _enqueue(self, key: bytes, encode: Callable[..., bytes], args: tuple[Any, ...]) -> None:
        """Queue an event whose bytes ``encode(*args)`` makes on the background thread."""
        with self._lock:
            if self._closed:
                raise TraceVaultError(
                    "this Publisher is closed; create a new one (one per process) before "
                    "recording more runs"
                )
            if self._thread is None:
                self._start_locked()
            self._published = n = self._published + 1
            self._queue.append((key, encode, args))
        # Events not yet taken (queued, or in a spool chunk not yet fsync'd). The common case
        # ends here: the thread had taken every event before this one.
        backlog = n - self._hold.taken
        if backlog > 1 and (backlog <= CHECK_EACH or not n % CHECK_EVERY):
            self._hold.hold(n, backlog, self._wake, self._thread)

    def _start_locked(self) -> None:
        conf = producer_config(
            self.settings, on_delivery=self._on_delivery, error_cb=self._on_error
        )
        try:
            self._producer = Producer(conf)
        except KafkaException as exc:
            raise ConfigError(f"the Kafka producer refused its settings: {exc}") from exc
        self._thread = threading.Thread(
            target=self._run, name=f"tracevault-publisher-{self.topic}", daemon=True
        )
        self._hold.fresh(time.monotonic())  # nothing was published before
        self._thread.start()

    # -- librdkafka callbacks (served by poll on the background thread) ---------------------
    def _on_delivery(self, err: KafkaError | None, msg: Any) -> None:
        if err is None:  # only failures are reported (delivery.report.only.error)
            return
        self._errored += 1
        if err.code() not in _PURGED:
            # Not a purge of ours: Kafka refused it. Keep it (spool) and stop sending directly.
            logger.warning("delivery to %s failed (%s); spooling", self.topic, err.str())
            self._spool_requested = True
        self._purged.append((msg.key(), msg.value()))

    def _on_error(self, err: KafkaError) -> None:
        if err.code() in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN):
            logger.info("Kafka client error: %s", err.str())
        else:
            logger.warning("Kafka client error: %s", err.str())
        if err.fatal():
            self._spool_requested = True
        elif err.code() == KafkaError._ALL_BROKERS_DOWN and self._direct:
            # Nothing can be acknowledged now: spool at once rather than after
            # spool_after_ms, so what the agent records is on disk within the bound.
            self._spool_requested = True
            self._answered = False

    # -- background thread ------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._adopt_orphans()
            while True:
                stopping = self._stop.is_set()
                if self._spool_requested or self._stalled():
                    self._enter_spool()
                if self._direct:
                    self._pump_direct()
                    self._shadow_tick()
                else:
                    self._spool_tick()
                if stopping and not self._queue:
                    break
                if not self._queue:
                    self._nap(0.005 if self._direct else _SPOOL_NAP_S)
        except Exception:  # pragma: no cover - a bug here must not vanish silently
            logger.exception("tracevault publisher thread failed; undelivered events are spooled")
        finally:
            self._shutdown()

    def _nap(self, timeout: float) -> None:
        self._sleeping = True
        if not self._queue and not self._stop.is_set():
            self._wake.wait(timeout)
        self._sleeping = False
        self._wake.clear()
        producer = self._producer
        assert producer is not None
        producer.poll(0)

    def _encode(self, item: Item) -> bytes | None:
        _key, encode, args = item
        try:
            return encode(*args)
        except Exception:
            # Inputs were validated in the agent; this is a bug, but must not stop the thread.
            self._lost += 1
            logger.exception("could not encode an event for %s; it is lost", self.topic)
            return None

    def _pump_direct(self) -> None:
        producer = self._producer
        assert producer is not None
        queue, produce, topic = self._queue, producer.produce, self.topic
        remember = self._shadow.recent.append
        hold, mark, upto = self._hold, time.monotonic(), self._published
        n = 0
        while queue and self._direct and not self._spool_requested:
            item = queue.popleft()
            value = self._encode(item)
            self._handled += 1
            if value is None:
                continue
            try:
                produce(topic, value, item[0])
            except (BufferError, KafkaException):
                # librdkafka's queue is full (Kafka slow or away) or the client failed: keep
                # this event for the spool, after whatever the purge returns.
                self._carry.append((item[0], value))
                self._spool_requested = True
                hold.took(self._handled - 1)  # this one is taken once the spool has it
                return
            self._produced += 1
            remember((item[0], value))
            n += 1
            if n % _POLL_EVERY == 0:
                producer.poll(0)
                if self._handled >= upto:
                    hold.fresh(mark)
                    mark, upto = time.monotonic(), self._published
                hold.took(self._handled)
                if self._stalled():
                    break
        # librdkafka holds them now; the shadow and the spool keep the bound from here
        if self._handled >= upto:
            hold.fresh(mark)
        hold.took(self._handled)

    def _stalled(self) -> bool:
        producer = self._producer
        assert producer is not None
        if not self._direct:
            return False
        if len(producer) == 0:
            self._busy_since = None
            return False
        now = time.monotonic()
        if self._busy_since is None:
            self._busy_since = now
        delivered = self._delivered()
        if delivered != self._seen_delivered:
            self._seen_delivered = delivered
            self._last_progress = now
        return now - max(self._busy_since, self._last_progress) > self._spool_after

    def _shadow_tick(self) -> None:
        """Copy unacknowledged events to disk once Kafka is quiet (``_shadow.py``)."""
        producer = self._producer
        assert producer is not None
        busy = self._busy_since
        idle = 0.0 if busy is None else time.monotonic() - max(busy, self._last_progress)
        self._shadow.tick(self._produced, len(producer), idle)

    def _delivered(self) -> int:
        """Direct events Kafka acknowledged (the client holds only those while it holds any:
        the spool is drained after them)."""
        producer = self._producer
        inside = len(producer) if producer is not None and (self._direct or self._held) else 0
        return max(0, self._produced - self._errored - inside)

    def _closing_late(self) -> bool:
        """Whether close's deadline has passed: a drain waiting for acknowledgements gives up."""
        return time.monotonic() >= self._close_by  # infinite until closing

    def _shutdown(self) -> None:
        producer = self._producer
        assert producer is not None
        if self._close_by == math.inf:  # the thread failed: no close() set the deadline
            self._close_by = time.monotonic() + self._close_timeout
        deadline = self._close_by
        if self._direct and not self._spool_requested:
            self._pump_direct()
            while len(producer) > 0 and time.monotonic() < deadline and not self._stalled():
                producer.poll(0.01)
                self._shadow_tick()
            self._shadow_tick()
        if not self._direct or self._spool_requested or len(producer) > 0 or self._queue:
            self._enter_spool()
            self._pump_to_spool()
        while not self._held_done() and time.monotonic() < deadline:
            producer.poll(0.01)
        while self._backlog and not self._held and time.monotonic() < deadline:
            if not self._broker_answers(wait=True):
                break
            if not self._drain_once(self._closing_late):
                break
            self._answered = True
        self._pump_to_spool()
        self._spool_held()
        self._spool_purged()
        files = tuple(str(s.path) for s in self._backlog)
        if self._shadow.path is not None:  # events not acknowledged before spooling started
            files = (str(self._shadow.path), *files)
        self._writer.close()
        self._shadow.close()
        self._too_old.writer.close()
        for seg in self._backlog:
            seg.unlock()
        self._report = CloseReport(
            delivered=self._delivered(),
            drained=self._drained,
            spooled=self._spooled,
            undelivered=max(0, self._spooled - self._drained_own),
            lost=self._lost,
            spool_files=files,
        )
        if files:
            logger.warning(
                "%s events were not delivered and wait in %s; they are sent by the next "
                "Publisher using this spool directory or by `tracevault spool drain`",
                self._report.undelivered,
                ", ".join(files),
            )

    # -- owners -----------------------------------------------------------------------------
    def stats(self) -> PublisherStats:
        producer = self._producer
        return PublisherStats(
            published=self._published,
            delivered=self._delivered(),
            spooled=self._spooled,
            drained=self._drained,
            queued=len(self._queue),
            in_flight=0 if producer is None else len(producer),
            spooling=not self._direct,
            lost=self._lost,
            held=self._hold.waits,
            held_s=self._hold.seconds,
        )

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until every event published so far is acknowledged by Kafka; False on timeout.

        While Kafka is away this waits for the spool to drain, so use a timeout.
        """
        deadline = time.monotonic() + timeout
        while True:
            producer = self._producer
            if producer is None or (
                self._handled == self._published
                and self._direct
                and not self._spool_requested
                and len(producer) == 0
                and not self._backlog
            ):
                return True
            if time.monotonic() >= deadline or self._stop.is_set():
                return False
            self._stop.wait(0.01)

    def close(self, timeout: float = 10.0) -> CloseReport:
        """Deliver what can be delivered within ``timeout``, spool the rest, and stop.

        Safe to call more than once; later calls return the first report.
        """
        with self._lock:
            already = self._closed
            self._closed = True
            thread = self._thread
        if not already:
            self._close_timeout = timeout
            self._close_by = time.monotonic() + timeout
            self._stop.set()
            self._wake.set()
        if thread is not None:
            thread.join()
        if self._report is None:
            self._report = CloseReport(self._delivered(), self._drained, 0, 0, 0, ())
        _LIVE.discard(self)
        return self._report

    def __enter__(self) -> Publisher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
