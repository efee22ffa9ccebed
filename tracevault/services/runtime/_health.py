"""``/healthz`` beside ``/metrics``: 200 while the service makes progress or has nothing to
do, 503 with a JSON reason when it is stuck (docs/liveness.md).

Its own module: what an orchestrator's probe reads, apart from how the sessions run.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tracevault.services.runtime._watch import KafkaWatch

__all__ = [
    "Health",
    "serve",
]


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
        # what the service is waiting on now, when a broker answers but not as needed
        # (``init_transactions: CONCURRENT_TRANSACTIONS ...``); named in the stuck reason
        self.waiting_on: str | None = None

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
            if self.waiting_on:
                doc["reason"] += f"; waiting on {self.waiting_on}"
        elif self.state == "stopping":
            doc["reason"] = "stopping"
        ok = "reason" not in doc
        doc["status"] = "ok" if ok else "stuck"
        return ok, doc


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        return None


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Healthy(Collector):
    """``tracevault_<service>_healthy``: 1 when ``/healthz`` would answer 200, else 0, so an
    alert rule can watch health without a blackbox prober (deploy/prometheus/alerts.yml)."""

    def __init__(self, health: Health) -> None:
        self._health = health

    def collect(self) -> Iterator[Metric]:
        ok, _doc = self._health.check()
        yield GaugeMetricFamily(
            f"tracevault_{self._health.service}_healthy",
            "1 while /healthz answers 200 (progress, or nothing to do), 0 when stuck",
            value=int(ok),
        )


def serve(port: int, registry: CollectorRegistry, health: Health) -> int:
    """Serve ``/metrics`` (Prometheus) and ``/healthz`` (or ``/health``) on ``port`` in a daemon
    thread; returns the bound port (``0`` picks a free one). ``/metrics`` also says whether
    the service is healthy (``tracevault_<service>_healthy``)."""
    registry.register(_Healthy(health))
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
