"""A small demo run once per module, shared by the stack tests that inspect its result."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import unique_name


@dataclass(frozen=True)
class DemoRun:
    cwd: Path
    prefix: str
    archive: str
    bootstrap: str
    summary: dict[str, Any]


@pytest.fixture(scope="module", autouse=True)
def _as_a_user() -> Iterator[None]:
    """A user who ran the demo trusts the demo's log key, not the test session's: the
    session's TRACEVAULT_LOG_VKEYS (tests/conftest.py) is not in this module's environment."""
    saved = os.environ.pop("TRACEVAULT_LOG_VKEYS", None)
    yield
    if saved is not None:
        os.environ["TRACEVAULT_LOG_VKEYS"] = saved


@pytest.fixture(scope="module")
def demo_run(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    """One small demo, run as a user runs it (a subprocess of the real CLI)."""
    cwd = tmp_path_factory.mktemp("demo")
    prefix = unique_name("demo")
    archive = f"file://{cwd / 'archive'}"
    env = {**os.environ, "TRACEVAULT_BOOTSTRAP_SERVERS": kafka_bootstrap}
    proc = subprocess.run(
        [sys.executable, "-m", "tracevault", "--prefix", prefix, "demo",
         "--agents", "3", "--runs", "4", "--sample", "3", "--archive", archive, "--json"],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    return DemoRun(cwd, prefix, archive, kafka_bootstrap, summary)
