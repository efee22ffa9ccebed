"""The README's blocks run as written, in order, in one folder, as a newcomer runs them.

A newcomer opens a fresh clone, runs the opening block (``bash dev/demo --keep-broker``, then
activates ``.venv``) and goes on down the page in one shell: every later block sees the files
the earlier ones left and the variables they exported. This test does the same in one temp
folder holding a copy of the checkout's sources (``pyproject.toml``, ``README.md``,
``tracevault/``, without built files) and its ``dev/``, and no ``.venv``: ``dev/demo`` makes
the venv there as it does on a fresh machine (tracevault alone, no extra), and the only other
packages are the ones the README's own install line adds. No ``tracevault`` is on PATH and none
of the test session's ``TRACEVAULT_*`` variables is set: only the broker's address and a topic
prefix of its own, so the shared broker's other topics are not touched (the demo uses a broker
that answers and starts none).

The pages run in this order, in the same shell: README.md; then ``bash dev/demo`` again, which
must pass in the folder the README leaves; then docs/replay.md, docs/integrations.md and
docs/operations.md (operations last: its "Keys and witnesses" makes a new log key). Each bash
block runs under ``set -euo pipefail`` and must stop every background job it starts (the test
fails a block that leaves one running, then stops it); what it exported is handed to the next
block. A block the test cannot run says why in an HTML comment ``<!-- not-run: reason -->``
right above its fence.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from tests.conftest import unique_name
from tracevault.config import TopicNames

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
# The pages a newcomer follows, in order, in one shell (the module docstring says why).
PAGES = (
    "README.md",
    "docs/replay.md",
    "docs/integrations.md",
    "docs/index.md",
    "docs/operations.md",
)
_FENCE = re.compile(
    r"(?:^<!-- not-run: (?P<why>[^\n]*?) -->\n)?^```(?P<lang>\w+)\n(?P<body>.*?)^```",
    flags=re.MULTILINE | re.DOTALL,
)


@dataclass(frozen=True)
class Block:
    page: str
    index: int
    lang: str
    body: str
    not_run: str | None
    heading: str


def _blocks(page: str) -> list[Block]:
    text = (ROOT / page).read_text()
    out = []
    for i, m in enumerate(_FENCE.finditer(text)):
        headings = re.findall(r"^#+ (.+)$", text[: m.start()], flags=re.MULTILINE)
        heading = headings[-1] if headings else ""
        out.append(Block(page, i, m["lang"], m["body"], m["why"], heading))
    return out


BLOCKS = _blocks("README.md")
# After the README, the demo again in the folder it left (issue 33: following the README used
# to break the next demo), then the docs pages the README links.
DEMO_AGAIN = Block("dev/demo", 0, "bash", "bash dev/demo\n", None, "the demo, again")
ALL = [*BLOCKS, DEMO_AGAIN, *(b for page in PAGES[1:] for b in _blocks(page))]
RUNNABLE = [b for b in ALL if b.lang in ("bash", "python") and b.not_run is None]


def test_blocks_are_bash_python_or_say_why_they_do_not_run() -> None:
    # sql: queries for other engines (docs/index.md), shown, never run here
    assert {b.lang for b in ALL} <= {"bash", "python", "text", "sql"}, "unknown block language"
    for b in ALL:
        assert b.not_run is None or b.not_run.strip(), f"{b.page} {b.index}: not-run, no reason"
    # The illustrative blocks stay few: the pages are a path to run, not a gallery.
    assert sum(b.not_run is not None for b in ALL) <= 2
    assert sum(b.lang == "text" for b in BLOCKS) <= 1  # the README's PyPI install lines
    assert sum(b.lang == "python" for b in RUNNABLE) >= 6
    assert sum(b.lang == "bash" for b in RUNNABLE) >= 14


def test_every_page_with_blocks_is_run() -> None:
    """A page of docs/ with a runnable block is one this test follows: moving a block out of
    the README must not leave it untested."""
    with_blocks = {
        str(p.relative_to(ROOT))
        for p in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]
        if any(b.lang in ("bash", "python") for b in _blocks(str(p.relative_to(ROOT))))
    }
    assert with_blocks <= set(PAGES), sorted(with_blocks - set(PAGES))


def test_the_readme_install_line_covers_every_extra_the_pages_use() -> None:
    """The newcomer's venv has tracevault alone plus what the README's install block adds; a
    block that imports an extra's package (or runs its command) needs that extra there."""
    install = next(b.body for b in BLOCKS if b.lang == "bash" and "pip install" in b.body)
    extras = set(re.findall(r"\.\[([\w,]+)\]", install)[0].split(","))
    tops = {"openai": "openai", "anthropic": "anthropic", "langchain_core": "langgraph"}
    tops |= {"langgraph": "langgraph", "langchain_openai": "langgraph", "agents": "agents"}
    tops |= {"mcp": "mcp", "dask": "dask", "distributed": "dask"}
    needed = {"otel"} if any("--otel" in b.body for b in RUNNABLE) else set()
    for b in RUNNABLE:
        imported = re.findall(r"^\s*(?:from|import) (\w+)", b.body, flags=re.MULTILINE)
        commands = re.findall(r"(?:^|[|;&(]\s*)(\w+) ", b.body, flags=re.MULTILINE)
        needed |= {tops[m] for m in [*imported, *commands] if m in tops}
    if "all" in extras:  # what `all` names, read from pyproject.toml
        pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
        (line,) = pyproject["project"]["optional-dependencies"]["all"]
        extras |= set(line.split("[", 1)[1].rstrip("]").split(","))
    assert {"openai", "langgraph", "agents", "mcp", "otel", "dask"} <= needed  # the scan works
    assert needed <= extras, needed - extras


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
    failed: str | None = None


def _copy_checkout(cwd: Path) -> None:
    """What a fresh clone holds for ``dev/demo`` to install: the sources, no built files."""
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, cwd / name)
    built = shutil.ignore_patterns("__pycache__", "*.so", "*.o", "build", "*.egg-info")
    shutil.copytree(ROOT / "tracevault", cwd / "tracevault", ignore=built)
    (cwd / "dev").symlink_to(ROOT / "dev")


@pytest.fixture(scope="module")
def session(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    cwd = tmp_path_factory.mktemp("readme")
    _copy_checkout(cwd)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TRACEVAULT_", "PIP_")) and k not in ("VIRTUAL_ENV", "PYTHONPATH")
    }
    env["PATH"] = _without_tracevault(env["PATH"])
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env["TRACEVAULT_BOOTSTRAP_SERVERS"] = kafka_bootstrap
    prefix = env["TRACEVAULT_TOPIC_PREFIX"] = unique_name("readme")
    yield Session(cwd, env)
    shutil.rmtree(cwd / ".venv", ignore_errors=True)  # ~0.5 GB with every extra
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for fut in admin.delete_topics(list(TopicNames(prefix).all())).values():
        fut.result(timeout=30)


def _run_bash(s: Session, body: str) -> subprocess.CompletedProcess[str]:
    dump, left = s.cwd / ".readme-env", s.cwd / ".readme-left"
    left.unlink(missing_ok=True)
    script = (
        "set -euo pipefail\n"
        f"trap 'jobs -pr > {left}; kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true'"
        " EXIT\n"
        f"{body}\n"
        f"env -0 > {dump}\n"
    )
    proc = subprocess.run(
        ["bash", "-c", script], cwd=s.cwd, env=s.env, capture_output=True, text=True,
        timeout=420, check=False,
    )  # fmt: skip
    running = left.read_text().split() if left.exists() else []
    if proc.returncode == 0 and running:  # the page must stop what it started
        return subprocess.CompletedProcess(proc.args, 99, proc.stdout, f"left running: {running}")
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


def _id(b: Block) -> str:
    return f"{Path(b.page).stem}-block{b.index}-{b.lang}"


@pytest.mark.parametrize("block", RUNNABLE, ids=[_id(b) for b in RUNNABLE])
def test_readme_block_runs_after_the_ones_before(session: Session, block: Block) -> None:
    assert not _NOT_HERE.search(block.body), f"{_id(block)} cannot run in a test"
    assert session.failed is None, f"{session.failed} failed before this one"
    session.failed = _id(block)
    proc = (_run_bash if block.lang == "bash" else _run_python)(session, block.body)
    assert proc.returncode == 0, (
        f"{block.page} block {block.index} ({block.heading!r}) exited {proc.returncode}:\n"
        f"{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    )
    if block is BLOCKS[0]:
        assert "`. .venv/bin/activate`" in proc.stdout, "the demo must say how to get on PATH"
        _the_demo_venv_has_no_extra_and_says_which_to_install(session)
    session.failed = None


def _the_demo_venv_has_no_extra_and_says_which_to_install(s: Session) -> None:
    """Before the README's install line the venv is what ``dev/demo`` made: an export that
    needs the ``otel`` extra names it in one line, exit 2 (it was a 40-line traceback)."""
    tracevault = s.cwd / ".venv" / "bin" / "tracevault"
    assert not list((s.cwd / ".venv").glob("lib/python*/site-packages/opentelemetry"))
    proc = subprocess.run(
        [tracevault, "replay", "export", "run-1", "--otel", "-o", "otel.json"], cwd=s.cwd,
        env=s.env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "pip install 'tracevault[otel]'" in proc.stderr and "Traceback" not in proc.stderr
