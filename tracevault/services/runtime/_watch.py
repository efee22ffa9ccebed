"""Whether the brokers are there: librdkafka's error and stats callbacks, and what a Kafka
error means for the session (docs/liveness.md).

:class:`KafkaWatch` follows the clients' ``error_cb`` and ``stats_cb``: whether a broker is
up, and when the clients last lost the brokers. A fencing error right after an outage is
librdkafka's static member outliving its session, not another process with our id
(:func:`raise_for`). Its own module: it classifies, the supervisor (``_supervisor``) acts.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from confluent_kafka import KafkaError

from tracevault.errors import FencedError

__all__ = [
    "Broken",
    "KafkaWatch",
    "Restart",
    "is_fenced",
    "is_outage",
    "raise_for",
]

log = logging.getLogger(__name__)

_FENCED_CODES = {
    KafkaError._FENCED,
    KafkaError.PRODUCER_FENCED,
    KafkaError.FENCED_INSTANCE_ID,
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
}
# error_cb codes that mean the client lost its brokers (or could not reach one in time).
_TROUBLE_CODES = {
    KafkaError._TRANSPORT,
    KafkaError._ALL_BROKERS_DOWN,
    KafkaError._RESOLVE,
    KafkaError._TIMED_OUT,
    KafkaError._MSG_TIMED_OUT,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.NOT_COORDINATOR,
}


def is_outage(err: KafkaError) -> bool:
    """An error that says the broker is away or slow, not that something is broken."""
    return err.code() in _TROUBLE_CODES or bool(err.retriable())


def is_fenced(err: KafkaError) -> bool:
    """A fencing error: another member took our transactional id or group.instance.id, or
    librdkafka believes so. librdkafka reports a fenced static member as a generic _FATAL
    error whose text names the cause."""
    return err.code() in _FENCED_CODES or (
        err.code() == KafkaError._FATAL and "fenced" in err.str().lower()
    )


class Restart(Exception):
    """This Kafka session cannot go on: drop its clients and start a new session."""


class Broken(Restart):
    """A restart for a client that broke while the broker answered: counted towards giving up."""


class KafkaWatch:
    """Connection state of a service's clients, from librdkafka's error and stats callbacks.

    Pass :meth:`client_config` into each client's configuration. ``error_cb`` and ``stats_cb``
    are served by the consumer's ``consume`` (and the producer's ``flush``) in the main thread.
    """

    def __init__(self, name: str, *, stats_interval_ms: int = 1000) -> None:
        self._name = name
        self._stats_ms = stats_interval_ms
        self.last_trouble: float | None = None  # monotonic time of the last lost connection
        self.down_since: float | None = None  # no broker up since then (None: connected)
        self.recovered_at: float | None = None  # when a broker was up again after that
        self._ever_up = False  # before the first connection, "no broker up" is no outage
        self._last_outage: tuple[float, float] | None = None  # (start, end) of the last one
        self._excused = 0  # fencings taken for an outage's since the last progress

    def client_config(self) -> dict[str, Any]:
        """Callbacks, and a reconnect backoff capped at 1 s (librdkafka's 10 s default kept a
        client away up to 10 s after the broker was back)."""
        return {
            "error_cb": self._on_error,
            "stats_cb": self._on_stats,
            "statistics.interval.ms": self._stats_ms,
            "reconnect.backoff.max.ms": 1000,
        }

    def trouble(self) -> None:
        """Note a lost connection or a stuck call (also called for deadlines)."""
        now = time.monotonic()
        self.last_trouble = now
        if self.down_since is None:
            self.down_since = now

    def answered(self) -> None:
        """A broker answered a request (with an error of its own, such as
        ``CONCURRENT_TRANSACTIONS``): it is reachable, whatever the statistics last said.
        A call that blocks the main thread also blocks the callbacks that would say so, and
        ``/healthz`` then blamed the brokers for a wait that was the coordinator's."""
        if self.down_since is not None:
            now = time.monotonic()
            self.recovered_at = now
            self._last_outage = (self.down_since, now)
            self.down_since = None
        self._ever_up = True

    def _on_error(self, err: KafkaError) -> None:
        if err.code() in _TROUBLE_CODES:
            self.trouble()
            log.info("%s: Kafka: %s", self._name, err.str())
        else:
            log.warning("%s: Kafka: %s", self._name, err.str())

    def _on_stats(self, doc: str) -> None:
        try:
            brokers = json.loads(doc).get("brokers", {})
        except ValueError:
            return
        up = any(b.get("nodeid", -1) >= 0 and b.get("state") == "UP" for b in brokers.values())
        now = time.monotonic()
        if up:
            if self.down_since is not None:
                self.recovered_at = now
                self._last_outage = (self.down_since, now)
            self.down_since = None
            self._ever_up = True
        elif self.down_since is None and self._ever_up:
            self.down_since = now

    def outage_within(self, seconds: float) -> bool:
        """Whether the brokers are unreachable now, or were (or a call missed its deadline)
        within the last ``seconds``."""
        now = time.monotonic()
        return (
            self.down_since is not None
            or (self.last_trouble is not None and now - self.last_trouble <= seconds)
            or (self.recovered_at is not None and now - self.recovered_at <= seconds)
        )

    def outage_since(self, t0: float) -> float:
        """Seconds of the longest outage (ongoing, or the last one) that began after ``t0``:
        one longer than the session timeout means the session begun at ``t0`` is dead."""
        longest = 0.0
        if self.down_since is not None and self.down_since >= t0:
            longest = time.monotonic() - self.down_since
        if self._last_outage is not None and self._last_outage[0] >= t0:
            longest = max(longest, self._last_outage[1] - self._last_outage[0])
        return longest

    def excuse_fencing(self, window_s: float, *, limit: int = 3) -> bool:
        """Whether a fencing error is taken for librdkafka's own after an outage (start a new
        session) rather than another process with our id (stop). At most ``limit`` times
        until the next progress: our own abandoned clients may fence a new session once or
        twice, a live rival would fence it again and again."""
        if self._excused >= limit or not self.outage_within(window_s):
            return False
        self._excused += 1
        return True

    def progressed(self) -> None:
        self._excused = 0

    def check_session(self, started: float, session_timeout_ms: int) -> None:
        """Raise :class:`Restart` when the brokers were away longer than the session timeout
        since ``started``: the group session is dead, a static member would come back fenced,
        and calls with its metadata were seen to block."""
        away = self.outage_since(started)
        if away * 1000 > session_timeout_ms:
            raise Restart(f"the brokers were away {away:.0f}s, past the session timeout")


def raise_for(err: KafkaError, watch: KafkaWatch, window_s: float, rival: str) -> None:
    """A fencing or fatal client error ends the session; anything else returns.

    A fencing within ``window_s`` of an outage is librdkafka's own static member (a new
    session, :class:`Restart`); otherwise another live process has our id: ``rival`` says
    which, :class:`FencedError` (exit 5). A fatal error is :class:`Broken`."""
    if is_fenced(err):
        if watch.excuse_fencing(window_s):
            raise Restart(f"fenced after a broker outage ({err.str()})")
        raise FencedError(f"{rival} ({err.str()})")
    if err.fatal():
        raise Broken(f"Kafka client failed: {err.str()}")
