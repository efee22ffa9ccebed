"""One exit code per error class (docs/design.md, "Service boundaries and errors").

The table below is the contract: a new error class fails this file until someone decides its
code, and the tree in ``tracevault/errors.py``, ``tracevault --help`` and docs/design.md must
say the same. The CLI tests trigger real failures end to end (real broker, real archive).
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from click.testing import CliRunner

import tracevault.errors as errors_module
from tests.conftest import unique_name
from tests.services.archiver.helpers import SealedLog
from tests.services.archiver.sealed_factory import sealed_values
from tracevault.archive import open_store
from tracevault.cli import tracevault
from tracevault.config import Settings
from tracevault.errors import (
    ArchiveError,
    BadMagicError,
    ChainError,
    ConfigError,
    ContentKeyError,
    FencedError,
    ForkRefusalError,
    LogError,
    NonCanonicalJSONError,
    NotFoundError,
    PayloadError,
    ReplayDivergence,
    RetentionError,
    SchemaError,
    ServiceUnavailableError,
    TopicMismatchError,
    TraceVaultError,
    TruncatedError,
    UnknownFingerprintError,
)
from tracevault.replayer import RecordedError

EXPECTED: dict[type[TraceVaultError], int] = {
    TraceVaultError: 2,  # raised as such only for misuse of the API
    ConfigError: 2,
    ForkRefusalError: 2,
    PayloadError: 2,
    SchemaError: 1,
    BadMagicError: 1,
    UnknownFingerprintError: 1,
    TruncatedError: 1,
    NonCanonicalJSONError: 1,
    TopicMismatchError: 1,
    ChainError: 1,
    LogError: 1,
    ReplayDivergence: 1,
    ServiceUnavailableError: 3,
    NotFoundError: 3,
    ArchiveError: 4,
    FencedError: 5,
    RetentionError: 6,
    ContentKeyError: 7,
}
USAGE = {TraceVaultError, ConfigError, ForkRefusalError, PayloadError}


def _all_classes() -> set[type[TraceVaultError]]:
    seen: set[type[TraceVaultError]] = set()
    todo = [TraceVaultError]
    while todo:
        cls = todo.pop()
        # Replay's stand-ins for recorded errors (RecordedError subclasses made on the fly when
        # a test replays a recorded tracevault error) are not classes of the hierarchy.
        if cls.__module__.startswith("tracevault") and cls not in seen:
            if issubclass(cls, RecordedError):
                continue
            seen.add(cls)
            todo.extend(cls.__subclasses__())
    return seen


def _import_every_module() -> None:
    """Every module of the package, so an error class defined outside errors.py is found
    whichever tests ran before (it was, only in a full run, after the module that held it)."""
    import tracevault

    for info in pkgutil.walk_packages(tracevault.__path__, "tracevault."):
        if not info.name.rpartition(".")[2].startswith("__"):
            importlib.import_module(info.name)


def test_every_error_class_has_its_code() -> None:
    _import_every_module()
    for name in errors_module.__all__:
        assert getattr(errors_module, name) in EXPECTED, f"{name} has no decided exit code"
    assert _all_classes() == set(EXPECTED), "an error class outside the table"
    assert {cls: cls.exit_code for cls in EXPECTED} == EXPECTED


def test_only_usage_errors_exit_2() -> None:
    assert {cls for cls, code in EXPECTED.items() if code == 2} == USAGE


def test_the_docstring_tree_states_the_same_codes() -> None:
    doc = errors_module.__doc__ or ""
    stated = {
        m.group(1): int(m.group(2))
        for m in re.finditer(r"^\s*(?:[│├└─ ]+)?(\w+Error|\w+Divergence)\s+(\d)\s", doc, re.M)
    }
    assert stated == {cls.__name__: code for cls, code in EXPECTED.items()}


def test_top_level_help_lists_every_exit_code() -> None:
    out = CliRunner().invoke(tracevault, ["--help"], terminal_width=100).output
    block = out[out.index("Exit codes") :]
    for code in sorted(set(EXPECTED.values()) | {0}):
        assert re.search(rf"^\s+{code}\s+\S", block, re.M), f"exit {code} missing:\n{block}"


def test_readme_lists_every_code() -> None:
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    line = readme[readme.index("Exit codes of every command") :][:400]
    for code in sorted(set(EXPECTED.values()) | {0}):
        assert re.search(rf"\b{code} [a-z]", line), code


def test_design_doc_lists_the_same_codes() -> None:
    design = (Path(__file__).parents[1] / "docs" / "design.md").read_text()
    section = design[design.index("## Service boundaries and errors") :]
    for cls, code in EXPECTED.items():
        assert re.search(rf"\|\s*{code}\s*\|[^\n]*`{cls.__name__}`", section), cls.__name__


# -- end to end: real failures, real exit codes ---------------------------------------------


def _cli(*args: str, env: dict[str, str | None] | None = None) -> tuple[int, str]:
    res = CliRunner().invoke(tracevault, list(args), env=env)
    return res.exit_code, res.output


def test_describe_with_a_missing_topic_exits_3(kafka_bootstrap: str) -> None:
    code, out = _cli(
        "--bootstrap-servers", kafka_bootstrap, "--prefix", unique_name("none"),
        "topics", "describe",
    )  # fmt: skip
    assert code == NotFoundError.exit_code == 3, out
    assert "missing" in out


def test_an_archive_whose_log_cannot_be_resumed_stops_the_archiver_with_4(
    settings_factory: Callable[..., Settings], tmp_path: Path
) -> None:
    # A tile under the archive's newest checkpoint is gone: the archiver must stop for an
    # operator, and a supervisor must see that it is not a crash (3) or fencing.
    settings = settings_factory(partitions=1)
    sl = SealedLog(settings)
    sl.produce({"holed": sealed_values("holed", 12)})
    url = f"file://{tmp_path / 'archive'}"
    args = (
        "--bootstrap-servers", settings.bootstrap_servers, "--prefix", settings.topic_prefix,
        "archiver", "--archive", url, "--until-idle", "3", "--trusted-key", sl.vkey,
    )  # fmt: skip
    code, out = _cli(*args)
    assert code == 0, out
    objects = (tmp_path / "archive" / "objects" / "log").rglob("*")
    tile = next(p for p in objects if p.is_file() and "/tile/0/" in str(p))
    tile.chmod(0o600)
    tile.unlink()
    code, out = _cli(*args[:-2], "--trusted-key", sl.vkey, "--group-id", "another")
    assert code == ArchiveError.exit_code == 4, out
    assert "cannot be resumed" in out and "tile/0/" in out


def test_a_retention_under_the_minimum_is_a_usage_error(tmp_path: Path) -> None:
    code, out = _cli("archive", "purge", "--archive", f"file://{tmp_path}", "--dry-run",
                     env={"TRACEVAULT_RETENTION_DAYS": "30"})  # fmt: skip
    assert code == 2 and "183" in out


def test_an_unknown_run_exits_3(tmp_path: Path) -> None:
    url = f"file://{tmp_path / 'archive'}"
    open_store(url, Settings())
    code, out = _cli("archive", "ls", "nope", "--archive", url)
    assert code == 3 and "nope" in out
    code, out = _cli("replay", "--archive-url", url, "show", "nope")
    assert code == 3 and "nope" in out


def test_python_dash_m_exits_with_the_code_too(kafka_bootstrap: str, tmp_path: Path) -> None:
    # The demo and the benchmarks start services as `python -m tracevault`; a supervisor of
    # those reads this code. Both an error (3) and an explicit ctx.exit (3) must reach it.
    def run(*args: str) -> int:
        proc = subprocess.run(
            [sys.executable, "-m", "tracevault", *args],
            check=False, capture_output=True, timeout=120, cwd=Path(__file__).parents[1],
        )  # fmt: skip
        return proc.returncode

    url = f"file://{tmp_path / 'archive'}"
    open_store(url, Settings())
    assert run("replay", "--archive-url", url, "verify", "nope") == 3
    assert run("--bootstrap-servers", kafka_bootstrap, "--prefix", unique_name("none"),
               "topics", "describe") == 3  # fmt: skip
    assert run("replay", "verify") == 2
    assert run("--help") == 0


def test_a_sequencer_fenced_by_a_second_with_its_id_exits_5(
    settings_factory: Callable[..., Settings], tmp_path: Path
) -> None:
    # Two deployments running the same --instance-id: the older process is fenced and must
    # exit with 5, so its supervisor can tell a takeover from a crash (3) or a typo (2).
    settings = settings_factory(partitions=1)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEVAULT_")}
    env["TRACEVAULT_LOG_KEY"] = os.environ["TRACEVAULT_LOG_KEY"]  # the session's log key

    def start(name: str) -> tuple[subprocess.Popen[bytes], Path]:
        log = tmp_path / f"{name}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "tracevault", "--bootstrap-servers",
                 settings.bootstrap_servers, "--prefix", settings.topic_prefix, "-v",
                 "sequencer", "--instance-id", "twin"],
                stdout=out, stderr=out, env=env, cwd=Path(__file__).parents[1],
            )  # fmt: skip
        return proc, log

    first, first_log = start("first")
    second = None
    try:
        deadline = time.monotonic() + 60
        while "restored" not in first_log.read_text():
            assert first.poll() is None, first_log.read_text()
            assert time.monotonic() < deadline, "the first sequencer never took its partition"
            threading.Event().wait(0.1)
        second, _ = start("second")
        code = first.wait(timeout=90)
        assert code == FencedError.exit_code == 5, first_log.read_text()
        assert "was fenced" in first_log.read_text()
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=60)
