"""The real pipeline for the replayer's tests: Recorder -> raw -> Sequencer -> sealed (-> archive).

Used by ``test_pipeline.py`` and by ``make_golden.py`` (which records the golden runs kept
under ``tests/replayer/golden/``).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal

from click.testing import CliRunner

from tests.conftest import unique_name
from tests.replayer import agents
from tracevault.cli import tracevault
from tracevault.config import Settings
from tracevault.heads import heads_partition_count, locate_run, read_state
from tracevault.kafka import ensure_topics
from tracevault.producer import Publisher, Recorder
from tracevault.replayer import LoadedRun, load_run
from tracevault.services.sequencer import Sequencer


def fresh_settings(bootstrap: str, base: Path, stem: str, *, partitions: int = 1) -> Settings:
    """Settings of a pipeline of its own: unique topics (created) and an archive under ``base``."""
    settings = Settings(
        bootstrap_servers=bootstrap,
        topic_prefix=unique_name(stem),
        partitions=partitions,
        archive_url=f"file://{base / 'archive'}",
        spool_dir=str(base / "spool"),
    )
    ensure_topics(settings)
    return settings


def record_live(
    settings: Settings,
    agent: Callable[..., Any],
    agent_input: Any,
    run_id: str,
    *,
    model: Callable[..., Any] = agents.fake_model,
    tools: dict[str, Any] | None = None,
    **recorder: Any,
) -> Any:
    """Run ``agent`` under the real Recorder, publishing to ``<prefix>.raw``; returns its output.

    An agent that raises is recorded (ERROR, RUN_FINISHED) and its exception returned.
    ``recorder``: more Recorder arguments (``subject=``, ``tenant=``).
    """
    publisher = Publisher(settings)
    try:
        rec = Recorder(
            publisher=publisher,
            agent_id="replayer-golden",
            agent_version="1.0.0",
            model=model,
            tools=agents.TOOLS if tools is None else tools,
            run_id=run_id,
            **recorder,
        )
        try:
            if inspect.iscoroutinefunction(agent):
                return asyncio.run(rec.arun(agent, agent_input))
            return rec.run(agent, agent_input)
        except Exception as exc:
            return exc
    finally:
        assert publisher.flush(30), "the publisher could not deliver to Kafka"
        publisher.close()


@contextlib.contextmanager
def sequencer_running(settings: Settings) -> Iterator[Sequencer]:
    """The real Sequencer in a thread; stopped and joined on exit."""
    seq = Sequencer(settings, instance_id="replayer-tests")
    errors: list[BaseException] = []

    def target() -> None:
        try:
            seq.run()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=target, name="sequencer", daemon=True)
    thread.start()
    try:
        yield seq
    finally:
        seq.stop()
        thread.join(60)
        assert not thread.is_alive(), "sequencer did not stop within 60s"
        assert not errors, errors


def wait_sealed(settings: Settings, run_id: str, *, timeout: float = 60.0) -> None:
    """Wait (deadline-bounded) until the sequencer has committed the run's RUN_FINISHED."""
    deadline = time.monotonic() + timeout
    tick = threading.Event()
    while True:
        loc = locate_run(settings, run_id)
        if loc is not None and loc.finished:
            return
        assert time.monotonic() < deadline, f"run {run_id} was not sealed within {timeout}s"
        tick.wait(0.2)


def wait_all_sealed(settings: Settings, run_ids: Iterable[str], *, timeout: float = 60.0) -> None:
    """Wait (deadline-bounded) until the sequencer has committed every run's RUN_FINISHED.

    One read of every heads partition per poll, for all the runs at once: ``wait_sealed``
    per run reads its heads partition from the start once per run, which for a fleet of
    fixtures' runs took most of their setup."""
    want = set(run_ids)
    deadline = time.monotonic() + timeout
    tick = threading.Event()
    parts = range(heads_partition_count(settings))
    while True:
        state = read_state(settings, parts)
        done = {r for r, h in state.heads.items() if h.finished and h.first_offset >= 0}
        for _part, chunk in state.finished.values():
            done |= {
                r
                for r in want - done
                if (h := chunk.head(r)) is not None and h.finished and h.first_offset >= 0
            }
        left = want - done
        if not left:
            return
        assert time.monotonic() < deadline, (
            f"{len(left)} runs were not sealed within {timeout}s, e.g. {sorted(left)[:3]}"
        )
        tick.wait(0.2)


def load_all(
    settings: Settings, run_ids: Iterable[str], source: Literal["topic", "archive"]
) -> dict[str, LoadedRun]:
    """``load_run`` of every run, a few at a time: each read mostly waits on the broker or
    the store, and fixtures load tens of runs."""
    ids = list(run_ids)
    with ThreadPoolExecutor(4) as pool:
        loaded = pool.map(lambda r: load_run(settings, r, source=source), ids)
        return dict(zip(ids, loaded, strict=True))


def replay_cli(settings: Settings, *args: str, width: int = 80) -> Any:
    """``tracevault replay ARGS`` in-process, pointed at ``settings``'s pipeline."""
    env = {
        "TRACEVAULT_BOOTSTRAP_SERVERS": settings.bootstrap_servers,
        "TRACEVAULT_TOPIC_PREFIX": settings.topic_prefix,
        "TRACEVAULT_ARCHIVE_URL": settings.archive_url,
        "TRACEVAULT_SPOOL_DIR": settings.spool_dir,
    }
    return CliRunner().invoke(tracevault, ["replay", *args], env=env, terminal_width=width)
