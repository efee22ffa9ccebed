"""Fixtures of the replayer tests: a recorded run, sealed, and archive stores."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.replayer import agents
from tests.replayer.recording import record, seal
from tracevault.consumer.archive import ObjectStore, open_store
from tracevault.schemas import SealedEvent, TraceEvent


def recorded(run_id: str = "run-a") -> list[TraceEvent]:
    return record(agents.research_agent, agents.INPUT, run_id=run_id, model_fn=agents.fake_model,
                  tools=agents.TOOLS, states=agents.STATES)  # fmt: skip


@pytest.fixture
def events() -> list[TraceEvent]:
    return recorded()


@pytest.fixture
def sealed(events: list[TraceEvent]) -> list[SealedEvent]:
    return seal(events)


@pytest.fixture
def file_store(tmp_path: Path) -> ObjectStore:
    return open_store(f"file://{tmp_path / 'archive'}")


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """A real S3 endpoint over HTTP (moto's server mode) on a free loopback port."""
    from moto.server import ThreadedMotoServer

    for k, v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                 "AWS_DEFAULT_REGION": "us-east-1"}.items():  # fmt: skip
        os.environ.setdefault(k, v)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()
