"""SIGTERM and SIGINT stop a service within a bound in every state (docs/liveness.md).

Python's handlers run only between bytecodes of the main thread, and a main thread blocked in
a C call (librdkafka) never gets there: the wakeup fd is written at once, and a thread of
ours reads it and does all the work. The Python-level handler does nothing: run in the main
thread, ``stop()`` could deadlock on a lock the interrupted code holds (``Event.set`` takes the
non-reentrant lock an ``Event.wait`` in the main thread may hold), and the hard exit would
never be armed. Its own module: process-wide signal state, apart from any Kafka client.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["stop_on_signals"]

log = logging.getLogger(__name__)


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
        timer.start()  # armed before stop(): a stop() that blocks is still bounded
        log.info("%s: signal %s: stopping (at most %.0fs)", name, signum, hard_limit_s)
        stop()

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
        """Installed so the default action does not kill; the watch thread acts."""

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    old_fd = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    threading.Thread(target=watch, args=(writer,), name=f"{name}-signals", daemon=True).start()

    def undo() -> None:
        signal.set_wakeup_fd(old_fd)
        for sig, h in previous.items():
            signal.signal(sig, h)
        writer.close()

    return undo
