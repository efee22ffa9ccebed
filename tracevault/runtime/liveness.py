"""What keeps the sequencer, the archiver and the witness alive across broker outages
(docs/liveness.md).

Shared by all three services:

- :class:`BlockingCalls` runs librdkafka's blocking calls in a daemon worker thread and waits
  at most a deadline. librdkafka does not always honour its own timeout (after a broker outage
  ``send_offsets_to_transaction`` blocked for minutes), and a main thread blocked in C never
  runs Python's signal handlers, so SIGTERM went unanswered. A call past its deadline raises
  :class:`CallDeadline`; the caller abandons that client (the worker keeps its only reference
  and drops it whenever the call returns) and builds a new one.
- :class:`KafkaWatch` follows the clients' ``error_cb`` and ``stats_cb``: whether a broker is
  up, and when the clients last lost the brokers. A fencing error right after an outage is
  librdkafka's static member outliving its session, not another process with our id.
- :func:`stop_on_signals` makes SIGTERM/SIGINT stop the service within a bound in every
  state, even while the main thread is blocked in C (Python handlers run only between
  bytecodes of the main thread; the wakeup fd is written at once, and a thread reads it).
- :class:`Sessions` is the supervisor: it runs one Kafka session after another until stop,
  with backoff, and gives up (exit 3) after too many sessions that broke while the broker
  answered; :class:`OffsetCommits` commits offsets under a deadline and defers a transient
  failure (a coordinator loading or moving after a broker restart) with backoff;
  :func:`raise_for` turns a fencing or fatal client error into a new session or a stop.
- :class:`Health` and :func:`serve` answer ``/healthz`` beside ``/metrics``: 200 while the
  service makes progress or has nothing to do, 503 with a JSON reason when it is stuck.

The sequencer, the archiver and the witness all run under these (docs/liveness.md).
"""

from __future__ import annotations

import json
import logging
import os
import queue
import signal
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from socketserver import ThreadingMixIn
from typing import Any, TypeVar
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from prometheus_client import CollectorRegistry, make_wsgi_app

from tracevault.errors import FencedError, ServiceUnavailableError

__all__ = [
    "BlockingCalls",
    "Broken",
    "CallDeadline",
    "Health",
    "KafkaWatch",
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

log = logging.getLogger(__name__)

T = TypeVar("T")

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


class CallDeadline(Exception):
    """A client call did not return within its deadline; its client must be abandoned."""


class Stopping(Exception):
    """``stop()`` was asked while a client call was still running past the stop grace."""


class Restart(Exception):
    """This Kafka session cannot go on: drop its clients and start a new session."""


class Broken(Restart):
    """A restart for a client that broke while the broker answered: counted towards giving up."""


def backoff(attempt: int, *, base: float = 0.5, cap: float = 10.0) -> float:
    """Seconds to wait before retry ``attempt`` (0-based): doubling, capped."""
    return float(min(cap, base * (2 ** min(attempt, 16))))


@dataclass(slots=True)
class _Job:
    fn: Callable[[], Any]
    done: threading.Event = field(default_factory=threading.Event)
    result: Any = None
    error: BaseException | None = None


class _Worker:
    """One daemon thread running jobs in order; abandoned (never joined) once a job is stuck."""

    def __init__(self, name: str) -> None:
        self.jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while True:
            job = self.jobs.get()
            if job is None:
                return
            try:
                job.result = job.fn()
            except BaseException as exc:
                job.error = exc
            finally:
                job.fn = _done  # drop the client reference held by the closure
                job.done.set()


def _done() -> None:
    return None


class BlockingCalls:
    """Blocking client calls with a deadline the caller enforces, and prompt ``stop()``.

    ``stop`` is the service's stop event: once set, a running call gets ``stop_grace_s`` more
    seconds (the current transaction may still commit), then :class:`Stopping` is raised.
    """

    def __init__(self, name: str, stop: threading.Event, *, stop_grace_s: float = 4.0) -> None:
        self._name = name
        self._stop = stop
        self._grace = stop_grace_s
        self._worker: _Worker | None = None
        self._abandoned = 0

    def call(self, what: str, fn: Callable[[], T], deadline_s: float) -> T:
        worker = self._worker
        if worker is None:
            worker = self._worker = _Worker(f"{self._name}-calls-{self._abandoned}")
        job = _Job(fn)
        worker.jobs.put(job)
        limit = time.monotonic() + deadline_s
        stop_limit: float | None = None
        while not job.done.wait(0.1):
            now = time.monotonic()
            if self._stop.is_set():
                stop_limit = stop_limit or now + self._grace
                if now >= stop_limit:
                    self._abandon()
                    raise Stopping(f"{what} still running after stop was asked")
            if now >= limit:
                self._abandon()
                raise CallDeadline(f"{what} did not return within {deadline_s:.0f}s")
        if job.error is not None:
            raise job.error
        result: T = job.result
        return result

    def _abandon(self) -> None:
        """Leave the stuck worker to finish (or not) on its own; the next call gets a new one."""
        if self._worker is not None:
            self._worker.jobs.put(None)  # it exits after the stuck call, if that ever returns
        self._worker = None
        self._abandoned += 1

    def close(self) -> None:
        if self._worker is not None:
            self._worker.jobs.put(None)
            self._worker = None


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


class Health:
    """Progress of one service, for ``/healthz``: stuck means 503 with the reason.

    Healthy: the last progress (a commit, or consumption with nothing left to do) is at most
    ``stall_s`` old, and no broker has been unreachable for longer than that.
    """

    def __init__(self, service: str, stall_s: float) -> None:
        self.service = service
        self.stall_s = stall_s
        self.state = "starting"
        self.lag: int | None = None
        self.last_progress = time.monotonic()
        self.watch: KafkaWatch | None = None
        self.restarts = 0

    def progressed(self) -> None:
        self.last_progress = time.monotonic()

    def set_lag(self, lag: int | None) -> None:
        self.lag = lag
        if lag == 0:
            self.progressed()  # nothing to do counts as keeping up

    def check(self) -> tuple[bool, dict[str, Any]]:
        now = time.monotonic()
        since = now - self.last_progress
        doc: dict[str, Any] = {
            "service": self.service,
            "state": self.state,
            "lag": self.lag,
            "seconds_since_progress": round(since, 1),
            "session_restarts": self.restarts,
        }
        down = self.watch.down_since if self.watch is not None else None
        if down is not None and now - down > self.stall_s:
            doc["reason"] = f"no Kafka broker reachable for {now - down:.0f}s"
        elif since > self.stall_s:
            lag = "unknown" if self.lag is None else str(self.lag)
            doc["reason"] = f"no progress for {since:.0f}s ({self.state}; last lag seen: {lag})"
        elif self.state == "stopping":
            doc["reason"] = "stopping"
        ok = "reason" not in doc
        doc["status"] = "ok" if ok else "stuck"
        return ok, doc


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
    """Records not yet consumed over the assignment (cached watermarks: no round trip), or
    None when unknown. No partitions is 0 (nothing to do) only when the group ``assigned``
    them (an empty assignment): a consumer still waiting to join a stuck group is not
    keeping up. Raises what ``position`` raises (KafkaException)."""
    assignment = consumer.assignment()
    lag = 0
    known = not assignment and assigned
    for tp in consumer.position(assignment):
        _, hi = consumer.get_watermark_offsets(tp, cached=True)
        if hi >= 0:
            known = True
            lag += max(0, hi - max(tp.offset, 0))
    return lag if known else None


def close_quietly(
    calls: BlockingCalls, what: str, close: Callable[[], None], limit_s: float
) -> None:
    """``close()`` within ``limit_s`` or abandoned; a failure is only logged (the client is
    dropped either way)."""
    try:
        calls.call(what, close, limit_s)
    except (KafkaException, RuntimeError, CallDeadline, Stopping) as exc:
        log.info("%s: %s", what, exc)


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


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        return None


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


def serve(port: int, registry: CollectorRegistry, health: Health) -> int:
    """Serve ``/metrics`` (Prometheus) and ``/healthz`` (or ``/health``) on ``port`` in a daemon
    thread; returns the bound port (``0`` picks a free one)."""
    metrics = make_wsgi_app(registry)

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        if environ.get("PATH_INFO") in ("/healthz", "/health"):
            ok, doc = health.check()
            body = json.dumps(doc, sort_keys=True).encode()
            start_response(
                "200 OK" if ok else "503 Service Unavailable",
                [("Content-Type", "application/json"), ("Content-Length", str(len(body)))],
            )
            return [body]
        return metrics(environ, start_response)

    # every interface, as prometheus_client's start_http_server: a container's service port
    host = "0.0.0.0"  # noqa: S104
    server = make_server(host, port, app, _ThreadingServer, handler_class=_QuietHandler)
    threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True).start()
    return int(server.server_port)


def stop_on_signals(
    stop: Callable[[], None], name: str, *, hard_limit_s: float = 9.0, exit_code: int = 3
) -> Callable[[], None]:
    """SIGTERM and SIGINT call ``stop``; if the process is still alive ``hard_limit_s`` later,
    it logs why and exits with ``exit_code``. Call from the main thread; returns the undo."""
    reader, writer = socket.socketpair()
    writer.setblocking(False)
    fired = threading.Event()

    def on_signal(signum: int) -> None:
        if fired.is_set():
            return
        fired.set()
        log.info("%s: signal %s: stopping (at most %.0fs)", name, signum, hard_limit_s)
        stop()

        def hard_exit() -> None:
            log.error(
                "%s did not stop within %.0fs of the signal (a Kafka or store call did not "
                "return); exiting with %d",
                name,
                hard_limit_s,
                exit_code,
            )
            logging.shutdown()
            os._exit(exit_code)

        timer = threading.Timer(hard_limit_s, hard_exit)
        timer.daemon = True
        timer.start()

    def watch(keep: socket.socket) -> None:
        # ``keep``: the write end stays open as long as this thread runs, even when the caller
        # drops ``undo`` (a garbage-collected socket would leave the wakeup fd dangling).
        with reader:
            while True:
                try:
                    data = reader.recv(16)
                except OSError:
                    return
                if not data:
                    return  # undo() closed the writer
                for signum in data:
                    if signum in (signal.SIGTERM, signal.SIGINT):
                        on_signal(signum)

    def handler(signum: int, frame: Any) -> None:
        on_signal(signum)  # the main thread got control back first: no need to wait

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    old_fd = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    threading.Thread(target=watch, args=(writer,), name=f"{name}-signals", daemon=True).start()

    def undo() -> None:
        signal.set_wakeup_fd(old_fd)
        for sig, h in previous.items():
            signal.signal(sig, h)
        writer.close()

    return undo
