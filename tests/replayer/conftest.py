"""Fixtures of the replayer tests: a recorded run, sealed, and archive stores."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.replayer import agents
from tests.replayer.dask_cluster import LocalDaskCluster
from tests.replayer.recording import record, seal
from tracevault.archive import ObjectStore, open_store
from tracevault.schemas import SealedEvent, TraceEvent


def recorded(run_id: str = "run-a") -> list[TraceEvent]:
    return record(agents.research_agent, agents.INPUT, run_id=run_id, model_fn=agents.fake_model,
                  tools=agents.TOOLS, states=agents.STATES)  # fmt: skip


def write_three_runs(
    url: str,
    same: tuple[str, ...] = ("run-a", "run-b"),
    write: Callable[[ObjectStore, list[SealedEvent]], object] | None = None,
) -> str:
    """``same`` (run-a, run-b: the research agent) and run-c (its prompt changed) archived at
    ``url``, by default as the archiver does now (``write_signed_run``: a static log whose
    checkpoints the session's log key signs); returns ``url``."""
    from tests.replayer.archiving import write_signed_run

    store = open_store(url)
    put = write or write_signed_run
    for run_id in same:
        put(store, seal(recorded(run_id)))
    other = record(
        agents.changed_prompt_agent, agents.INPUT, run_id="run-c",
        model_fn=agents.fake_model, tools=agents.TOOLS, states=agents.STATES,
    )  # fmt: skip
    put(store, seal(other))
    return url


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
def dask_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalDaskCluster]:
    """A real local Dask cluster (scheduler + 2 worker processes); fails loudly if it cannot
    start, never skips."""
    cluster = LocalDaskCluster(workers=2, log_dir=tmp_path_factory.mktemp("dask"))
    try:
        cluster.start()
    except Exception as exc:
        cluster.stop()
        pytest.fail(f"the local Dask cluster did not start: {exc}\n{cluster.logs()}", pytrace=False)
    yield cluster
    cluster.stop()
