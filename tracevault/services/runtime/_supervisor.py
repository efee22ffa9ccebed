"""The supervisor of a service's Kafka sessions, and its offset commits (docs/liveness.md).

:class:`Sessions` runs one Kafka session after another until stop, with backoff, and gives
up (exit 3) after too many sessions that broke while the broker answered;
:class:`OffsetCommits` commits offsets under a deadline and defers a transient failure (a
coordinator loading or moving after a broker restart) with backoff. Its own module: the one
session loop the sequencer, the archiver and the witness share, on top of the call deadlines
(``_calls``), the broker watch (``_watch``) and the health it reports to (``_health``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from tracevault.errors import ServiceUnavailableError
from tracevault.services.runtime._calls import BlockingCalls, CallDeadline, Stopping, _done
from tracevault.services.runtime._health import Health
from tracevault.services.runtime._watch import Broken, KafkaWatch, Restart

__all__ = [
    "LagReader",
    "OffsetCommits",
    "Sessions",
    "backoff",
    "consumer_lag",
]

log = logging.getLogger(__name__)

T = TypeVar("T")


def backoff(attempt: int, *, base: float = 0.5, cap: float = 10.0) -> float:
    """Seconds to wait before retry ``attempt`` (0-based): doubling, capped."""
    return float(min(cap, base * (2 ** min(attempt, 16))))


class Sessions:
    """The supervisor of a service's Kafka sessions: one after another until stop.

    A session ends with :class:`Restart` (or a missed deadline); the next starts after a
    backoff: every 2 s at most while the broker is away, longer once sessions *broke*
    (:class:`Broken`) while it answered. More than ``give_up_after`` broken sessions in a row,
    with no progress in between, raise :class:`ServiceUnavailableError` (exit 3) for the
    process supervisor. An outage never counts, however long.
    """

    def __init__(self, name: str, stop: threading.Event, health: Health, give_up_after: int = 8):
        self.name = name
        self._stop = stop
        self.health = health
        self._give_up = give_up_after
        self.failures = 0
        self.attempts = 0
        self.progress = False  # progress in the current session

    def progressed(self) -> None:
        """A commit went through: the session works (counts reset at its end)."""
        self.progress = True

    def ended(self, exc: BaseException, *, broken: bool) -> float:
        """Account for a session ended by ``exc``: seconds to wait before the next one."""
        if self.progress:
            self.failures = self.attempts = 0
        self.progress = False
        self.attempts += 1
        if broken:
            self.failures += 1
        if self.failures > self._give_up:
            raise ServiceUnavailableError(
                f"{self.name} could not resume after {self.failures} attempts while the broker "
                f"answered (last: {exc}); exiting for the supervisor to restart it"
            ) from exc
        # an outage: try again every 2 s at most; something broken: back off more
        wait = backoff(self.attempts, base=0.25, cap=10.0 if self.failures else 2.0)
        log.warning(
            "%s: Kafka session ended (%s); starting a new one in %.1fs", self.name, exc, wait
        )
        self.health.state = "restarting"
        self.health.restarts += 1
        return wait

    def run(
        self,
        start: Callable[[], T],
        session: Callable[[T], None],
        close: Callable[[T], None],
        on_restart: Callable[[], None] = _done,
    ) -> None:
        """``session(start())`` until it returns or stop is asked; ``close`` after each, and
        ``on_restart`` (forget what the ended session read) before a new one."""
        while not self._stop.is_set():
            clients = start()
            self.progress = False
            try:
                session(clients)
                return
            except Stopping as exc:
                log.warning("%s stopped during a Kafka call (%s)", self.name, exc)
                return
            except (Restart, CallDeadline) as exc:
                wait = self.ended(exc, broken=isinstance(exc, Broken))
                on_restart()
            finally:
                close(clients)
            if self._stop.wait(wait):
                return


def consumer_lag(consumer: Consumer, assigned: bool) -> int | None:
    """Records not yet consumed over the assignment, or None when unknown (one-off: a
    :class:`LagReader` kept by the session remembers committed offsets between calls)."""
    return LagReader().total(consumer, assigned)


class LagReader:
    """Records not yet consumed, per partition of a consumer's assignment.

    ``position`` is unknown (negative) for a partition the consumer fetched nothing new from
    since it started: the committed offset it resumes from is the truth then, not offset 0
    (which made a fresh service report the whole topic as lag while ``doctor`` said caught
    up). That offset costs a broker round trip (under a deadline), so it is remembered for
    ``refresh_s``: it cannot move while this consumer, which owns the partition, consumes
    nothing from it. Watermarks are the cached ones of the last fetch (no round trip); a
    partition with none yet, or whose committed offset could not be read, is left out:
    unknown, not zero.
    """

    def __init__(self, *, refresh_s: float = 30.0, timeout_s: float = 2.0) -> None:
        self.refresh_s = refresh_s
        self.timeout_s = timeout_s
        self._committed: dict[tuple[str, int], tuple[float, int]] = {}

    def partitions(self, consumer: Consumer) -> dict[int, int]:
        """Lag per assigned partition whose lag is known. Raises what ``position`` raises."""
        positions = consumer.position(consumer.assignment())
        self._read_committed(consumer, [tp for tp in positions if tp.offset < 0])
        lag: dict[int, int] = {}
        for tp in positions:
            lo, hi = consumer.get_watermark_offsets(tp, cached=True)
            if hi < 0:
                continue  # nothing fetched yet: unknown, not zero
            pos = tp.offset
            if pos < 0:
                known = self._committed.get((tp.topic, tp.partition))
                if known is None:
                    continue
                # no committed offset: the consumer starts at the earliest record
                pos = known[1] if known[1] >= 0 else max(lo, 0)
            lag[tp.partition] = max(0, hi - pos)
        return lag

    def total(self, consumer: Consumer, assigned: bool) -> int | None:
        """The sum over the assignment, or None when unknown. No partitions is 0 (nothing to
        do) only when the group ``assigned`` them (an empty assignment): a consumer still
        waiting to join a stuck group is not keeping up."""
        assignment = consumer.assignment()
        lag = self.partitions(consumer)
        if lag or (not assignment and assigned):
            return sum(lag.values())
        return None

    def _read_committed(self, consumer: Consumer, unknown: list[TopicPartition]) -> None:
        now = time.monotonic()
        stale = [
            TopicPartition(tp.topic, tp.partition)
            for tp in unknown
            if now - self._committed.get((tp.topic, tp.partition), (-1e18, 0))[0] > self.refresh_s
        ]
        if not stale:
            return
        try:
            for tp in consumer.committed(stale, timeout=self.timeout_s):
                if tp.error is None:
                    self._committed[(tp.topic, tp.partition)] = (now, tp.offset)
        except KafkaException as exc:
            log.debug("committed offsets not read for the lag: %s", exc)


class OffsetCommits:
    """Synchronous offset commits under a deadline, at most every ``every_s``.

    A transient failure (a coordinator loading or moving after a broker restart, a
    rebalance, ``UNKNOWN_MEMBER_ID``) defers the commit: the caller sends the same absolute
    offsets again after 0.2 s, 0.4 s, ... up to 5 s. A fencing or fatal error goes to
    :func:`raise_for`; a missed deadline, or a consumer left without a member id, ends the
    session (:class:`Restart`).
    """

    def __init__(
        self,
        name: str,
        calls: BlockingCalls,
        watch: KafkaWatch,
        on_error: Callable[[KafkaError], None],
        *,
        deadline_s: float = 15.0,
        every_s: float = 0.5,
    ) -> None:
        self._name = name
        self._calls = calls
        self._watch = watch
        self._on_error = on_error
        self._deadline = deadline_s
        self._every = every_s
        self.failures = 0
        self.retry_at = 0.0

    def commit(self, consumer: Consumer, offsets: list[TopicPartition], *, final: bool) -> bool:
        """Whether ``offsets`` were committed now (False: not due yet, or deferred)."""
        now = time.monotonic()
        if not final and now < self.retry_at:
            return False
        if not consumer.memberid():
            # The group session was lost in a broker outage longer than the session timeout
            # (a static member then comes back fenced, and commits were seen to hang).
            self._watch.trouble()
            raise Restart("the consumer lost its group session during a broker outage")
        try:
            self._calls.call(
                "offset commit",
                lambda: consumer.commit(offsets=offsets, asynchronous=False),
                self._deadline,
            )
        except CallDeadline as exc:
            self._watch.trouble()
            raise Restart(str(exc)) from exc
        except KafkaException as exc:
            kerr = exc.args[0]
            self._on_error(kerr)  # raises for a fencing or a fatal error
            self.failures += 1
            wait = backoff(self.failures - 1, base=0.2, cap=5.0)
            self.retry_at = now + wait
            log.warning(
                "%s: offset commit deferred %.1fs (attempt %d): %s",
                self._name,
                wait,
                self.failures,
                kerr.str(),
            )
            return False
        self.failures = 0
        self.retry_at = now + self._every
        self._watch.progressed()
        return True
