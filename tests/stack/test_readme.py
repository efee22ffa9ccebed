"""The README's blocks run as written, in order, in one folder, as a newcomer runs them.

A newcomer opens a fresh clone, runs the opening block (``bash dev/demo --keep-broker``, then
activates ``.venv``) and goes on down the page in one shell: every later block sees the files
the earlier ones left and the variables they exported. This test does the same in one temp
folder that holds the checkout's ``dev/`` and ``.venv`` (the ones CI just built), with no
``tracevault`` on PATH and none of the test session's ``TRACEVAULT_*`` variables: only the
broker's address and a topic prefix of its own, so the shared broker's other topics are not
touched (the demo uses a broker that answers and starts none). Each bash block runs under
``set -euo pipefail``; its background jobs (``&``) are stopped when it ends, and what it
exported is handed to the next block. A block the test cannot run says why in an HTML comment
``<!-- not-run: reason -->`` right above its fence.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from tests.conftest import unique_name
from tracevault.config import TopicNames

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
_FENCE = re.compile(
    r"(?:^<!-- not-run: (?P<why>[^\n]*?) -->\n)?^```(?P<lang>\w+)\n(?P<body>.*?)^```",
    flags=re.MULTILINE | re.DOTALL,
)


@dataclass(frozen=True)
class Block:
    index: int
    lang: str
    body: str
    not_run: str | None
    heading: str


def _blocks() -> list[Block]:
    out = []
    for i, m in enumerate(_FENCE.finditer(README)):
        headings = re.findall(r"^#+ (.+)$", README[: m.start()], flags=re.MULTILINE)
        out.append(Block(i, m["lang"], m["body"], m["why"], headings[-1] if headings else ""))
    return out


BLOCKS = _blocks()
RUNNABLE = [b for b in BLOCKS if b.lang in ("bash", "python") and b.not_run is None]


def test_blocks_are_bash_python_or_say_why_they_do_not_run() -> None:
    assert {b.lang for b in BLOCKS} <= {"bash", "python", "text"}, "unknown block language"
    for b in BLOCKS:
        assert b.not_run is None or b.not_run.strip(), f"block {b.index}: not-run with no reason"
    # The illustrative blocks stay few: the README is a path to run, not a gallery.
    assert sum(b.not_run is not None for b in BLOCKS) <= 2
    assert sum(b.lang == "python" for b in RUNNABLE) >= 3
    assert sum(b.lang == "bash" for b in RUNNABLE) >= 6


def test_the_opening_block_runs_the_demo_and_puts_tracevault_on_path() -> None:
    first = BLOCKS[0]
    assert first.lang == "bash" and first.not_run is None
    lines = [ln.split("#", 1)[0].strip() for ln in first.body.splitlines()]
    assert lines[0].startswith("bash dev/demo"), lines
    assert ". .venv/bin/activate" in lines


def test_ci_run_is_the_script_that_runs_this_suite() -> None:
    assert "`bash .ci/run`" in README
    ci = (ROOT / ".ci" / "run").read_text()
    assert "python -m pytest" in ci and "dev/kafka start" in ci


def _without_tracevault(path: str) -> str:
    """PATH without any folder that holds a ``tracevault`` (the test's own venv): the README
    must put it there itself."""
    keep = [d for d in path.split(os.pathsep) if d and not (Path(d) / "tracevault").exists()]
    return os.pathsep.join(keep)


@dataclass
class Session:
    """One newcomer's shell: a folder, the environment so far, and whether a block failed."""

    cwd: Path
    env: dict[str, str] = field(repr=False)  # the machine's environment: not for CI's log
    failed: int | None = None


@pytest.fixture(scope="module")
def session(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    cwd = tmp_path_factory.mktemp("readme")
    (cwd / "dev").symlink_to(ROOT / "dev")
    (cwd / ".venv").symlink_to(ROOT / ".venv")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("TRACEVAULT_") and k not in ("VIRTUAL_ENV", "PYTHONPATH")
    }
    env["PATH"] = _without_tracevault(env["PATH"])
    env["TRACEVAULT_BOOTSTRAP_SERVERS"] = kafka_bootstrap
    prefix = env["TRACEVAULT_TOPIC_PREFIX"] = unique_name("readme")
    yield Session(cwd, env)
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for fut in admin.delete_topics(list(TopicNames(prefix).all())).values():
        fut.result(timeout=30)


def _run_bash(s: Session, body: str) -> subprocess.CompletedProcess[str]:
    dump = s.cwd / ".readme-env"
    script = (
        "set -euo pipefail\n"
        "trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true' EXIT\n"
        f"{body}\n"
        f"env -0 > {dump}\n"
    )
    proc = subprocess.run(
        ["bash", "-c", script], cwd=s.cwd, env=s.env, capture_output=True, text=True,
        timeout=420, check=False,
    )  # fmt: skip
    if proc.returncode == 0:
        pairs = (item.split("=", 1) for item in dump.read_text().split("\0") if "=" in item)
        s.env = {k: v for k, v in pairs if k not in ("_", "SHLVL", "OLDPWD", "PWD")}
    return proc


def _run_python(s: Session, body: str) -> subprocess.CompletedProcess[str]:
    python = shutil.which("python", path=s.env["PATH"])
    assert python, "no python on the README's PATH"
    return subprocess.run(
        [python, "-c", body], cwd=s.cwd, env=s.env, capture_output=True, text=True,
        timeout=420, check=False,
    )  # fmt: skip


# What a block must not do here: CI's own script (it would run inside itself) and dev/kafka's
# start/stop, which would act on the broker other tests share.
_NOT_HERE = re.compile(r"\.ci/run|dev/kafka\s+(start|stop)")


@pytest.mark.parametrize("block", RUNNABLE, ids=[f"block{b.index}-{b.lang}" for b in RUNNABLE])
def test_readme_block_runs_after_the_ones_before(session: Session, block: Block) -> None:
    assert not _NOT_HERE.search(block.body), f"block {block.index} cannot run in a test"
    assert session.failed is None, f"block {session.failed} failed before this one"
    session.failed = block.index
    proc = (_run_bash if block.lang == "bash" else _run_python)(session, block.body)
    assert proc.returncode == 0, (
        f"README block {block.index} ({block.heading!r}) exited {proc.returncode}:\n"
        f"{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    )
    if block is BLOCKS[0]:
        assert "`. .venv/bin/activate`" in proc.stdout, "the demo must say how to get on PATH"
    session.failed = None
