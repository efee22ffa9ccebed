"""The desk's app served by a real uvicorn on a free loopback port, in a thread of the test."""

from __future__ import annotations

import dataclasses
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn

from tracevault.config import Settings
from tracevault.desk.access import AccessLog
from tracevault.desk.app import DeskConfig, make_app
from tracevault.replayer import EndRule, Trust

__all__ = ["desk_conf", "serving"]


def desk_conf(
    archive: str,
    vkey: str | None,
    token: str | None = None,
    *,
    access: AccessLog | None = None,
) -> DeskConfig:
    """The desk over a hand-written archive: no sealed topic proves it current, so its
    freshness is accepted knowingly (``offline``), as ``tracevault ui --offline`` does;
    runs still in progress are shown (``EndRule()``). ``vkey`` None: no trusted log key."""
    settings = Settings(archive_url=archive)
    trust = Trust.of(settings, trusted_keys=[] if vkey is None else [vkey], offline=True)
    if vkey is None:
        trust = dataclasses.replace(trust, policy=None)
    return DeskConfig(settings, dataclasses.replace(trust, end=EndRule()), token, access=access)


@contextmanager
def serving(conf: DeskConfig) -> Iterator[str]:
    """Serve ``make_app(conf)`` on 127.0.0.1:<free port>; yields the base URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(make_app(conf), log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise AssertionError("uvicorn did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()
