"""Fixtures of the desk's tests: a signed archive of real recorded runs, one Chromium a module."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.desk.browser import Chromium, artefacts_dir
from tests.replayer.conftest import write_three_runs


@pytest.fixture(scope="module")
def signed_archive(tmp_path_factory: pytest.TempPathFactory) -> str:
    """run-a, run-b (the research agent) and run-c (its prompt changed), archived as the
    archiver does now: a static log whose checkpoints the session's log key signs."""
    return write_three_runs(f"file://{tmp_path_factory.mktemp('desk') / 'archive'}")


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
