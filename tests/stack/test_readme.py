"""Every code block in the README runs, so the README cannot rot.

The opening block holds the two commands a new user types: ``bash dev/demo`` runs here for
real; ``bash .ci/run`` is the command CI itself runs (this test runs inside it), so it is
checked to be the script that runs this suite. Every other bash and python block runs against
a real broker and the archive of a small demo, with ``$RUN_ID`` one of its runs.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import unique_name
from tests.stack.conftest import DemoRun

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
BLOCKS = [
    (m.group(1), m.group(2))
    for m in re.finditer(r"^```(\w+)\n(.*?)^```", README, flags=re.MULTILINE | re.DOTALL)
]


def _commands(block: str) -> list[str]:
    return [
        line.split("#", 1)[0].strip()
        for line in block.splitlines()
        if line.split("#", 1)[0].strip()
    ]


def _env(demo: DemoRun) -> dict[str, str]:
    return {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "TRACEVAULT_BOOTSTRAP_SERVERS": demo.bootstrap,
        "TRACEVAULT_TOPIC_PREFIX": demo.prefix,
        "TRACEVAULT_ARCHIVE_URL": demo.archive,
        "RUN_ID": demo.summary["run_ids"][0],
    }


def test_readme_opens_with_the_two_commands() -> None:
    lang, first = BLOCKS[0]
    assert lang == "bash"
    assert _commands(first) == ["bash dev/demo", "bash .ci/run"]
    ci = (ROOT / ".ci" / "run").read_text()
    assert "python -m pytest" in ci and "dev/kafka start" in ci


def test_first_command_runs_the_demo(demo_run: DemoRun, tmp_path: Path) -> None:
    env = _env(demo_run)
    env["TRACEVAULT_ARCHIVE_URL"] = f"file://{tmp_path / 'archive'}"
    env["TRACEVAULT_TOPIC_PREFIX"] = unique_name("readme")
    proc = subprocess.run(
        ["bash", str(ROOT / "dev" / "demo"), "--json"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert '"replayed": {"archive": 4, "topic": 4}' in proc.stdout


RUNNABLE = [(i, lang, body) for i, (lang, body) in enumerate(BLOCKS) if i > 0]


def test_every_block_is_bash_python_or_a_picture() -> None:
    assert {lang for _, lang, _ in RUNNABLE} <= {"bash", "python", "text"}, "unknown block language"
    assert sum(lang == "python" for _, lang, _ in RUNNABLE) >= 2
    assert sum(lang == "bash" for _, lang, _ in RUNNABLE) >= 3


@pytest.mark.parametrize(
    ("index", "lang", "body"),
    [b for b in RUNNABLE if b[1] in ("bash", "python")],
    ids=[f"block{i}-{lang}" for i, lang, _ in RUNNABLE if lang in ("bash", "python")],
)
def test_readme_block_runs(
    demo_run: DemoRun, tmp_path: Path, index: int, lang: str, body: str
) -> None:
    # A user runs the README where they ran the demo: its state dir (the log key) is there.
    state = tmp_path / ".tracevault"
    state.mkdir()
    shutil.copy2(demo_run.cwd / ".tracevault" / "log.key", state / "log.key")
    if lang == "python":
        argv = [sys.executable, "-c", body]
    else:
        # Background services (`&`) are stopped when the block ends, as a shell user would.
        script = "set -euo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n" + body
        argv = ["bash", "-c", script]
    proc = subprocess.run(
        argv, cwd=tmp_path, env=_env(demo_run), capture_output=True, text=True, timeout=300,
        check=False,
    )  # fmt: skip
    assert proc.returncode == 0, (
        f"README block {index} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    )
