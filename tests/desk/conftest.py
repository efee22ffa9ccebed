"""Fixtures of the desk's tests: a signed archive of real recorded runs, one Chromium a module."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.desk.browser import Chromium, artefacts_dir
from tests.replayer import agents
from tests.replayer.archiving import write_signed_run
from tests.replayer.conftest import recorded
from tests.replayer.recording import record, seal
from tracevault.archive import open_store


@pytest.fixture(scope="module")
def signed_archive(tmp_path_factory: pytest.TempPathFactory) -> str:
    """run-a, run-b (the research agent) and run-c (its prompt changed), archived as the
    archiver does now: a static log whose checkpoints the session's log key signs."""
    url = f"file://{tmp_path_factory.mktemp('desk') / 'archive'}"
    store = open_store(url)
    for run_id in ("run-a", "run-b"):
        write_signed_run(store, seal(recorded(run_id)))
    other = record(
        agents.changed_prompt_agent,
        agents.INPUT,
        run_id="run-c",
        model_fn=agents.fake_model,
        tools=agents.TOOLS,
        states=agents.STATES,
    )
    write_signed_run(store, seal(other))
    return url


def _chromium(*, offline: bool) -> Iterator[Chromium]:
    print(f"screenshots in {artefacts_dir()}")
    b = Chromium(offline=offline)
    yield b
    b.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Chromium]:
    """One headless Chromium for the module, network off; screenshots in ``artefacts_dir``."""
    yield from _chromium(offline=True)


@pytest.fixture(scope="module")
def web() -> Iterator[Chromium]:
    """One Chromium for the module for the UI: names resolve nowhere, loopback is reachable."""
    yield from _chromium(offline=False)


@pytest.fixture
def out(tmp_path: Path) -> Path:
    return tmp_path / "report.html"
