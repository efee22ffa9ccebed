"""The CLI's tables at 80 columns, through the real CLI in a child process (COLUMNS=80).

A newcomer in a default terminal must see every payload, run id and file name whole; rich's
default is to squeeze every column until each holds a few letters. Each test renders real
data (the golden runs recorded by the real Recorder and Sequencer, archived by the archiver's
writer; a real spool; the real broker) and reads the text a user would read.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from io import BytesIO
from pathlib import Path

import fastavro
import pytest
from rich.cells import cell_len

from tests.conftest import unique_name
from tests.replayer.archiving import write_signed_run
from tests.services.archiver.sealed_factory import sealed_run
from tracevault.archive import open_store
from tracevault.config import Settings
from tracevault.kafka import ensure_topics
from tracevault.producer._spool import SpoolWriter
from tracevault.replayer import StepSummary
from tracevault.schemas import SealedEvent, decode_event

ROOT = Path(__file__).parents[1]
GOLDEN = ROOT / "tests" / "replayer" / "golden"
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _micros(value: object) -> object:
    if not isinstance(value, datetime):
        return value
    d = value - EPOCH
    return (d.days * 86_400 + d.seconds) * 1_000_000 + d.microseconds


def golden_sealed(name: str) -> list[SealedEvent]:
    """A golden run's records as sealed (fastavro hands timestamps back as datetimes)."""
    rows = fastavro.reader(BytesIO((GOLDEN / f"{name}.avro").read_bytes()))
    return [
        SealedEvent.from_avro({k: _micros(v) for k, v in r.items()})  # type: ignore[union-attr]
        for r in rows
    ]


def cli(*args: str, columns: int = 80) -> tuple[int, str]:
    """``python -m tracevault ARGS`` with a COLUMNS-wide terminal; stdout as the user sees it."""
    env = {**os.environ, "COLUMNS": str(columns), "PYTHONPATH": str(ROOT)}
    env.pop("LINES", None)
    proc = subprocess.run(
        [sys.executable, "-m", "tracevault", *args],
        check=False, capture_output=True, text=True, env=env, cwd=ROOT, timeout=120,
    )  # fmt: skip
    return proc.returncode, proc.stdout


def assert_fits(out: str, columns: int = 80) -> None:
    wide = [line for line in out.splitlines() if cell_len(line) > columns]
    assert not wide, f"{len(wide)} lines wider than {columns}:\n" + "\n".join(wide)


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"file://{tmp_path_factory.mktemp('narrow') / 'archive'}"
    store = open_store(url, Settings())
    for name in ("research", "tool_error_handled"):
        write_signed_run(store, golden_sealed(name))
    return url


def _steps(name: str) -> list[StepSummary]:
    return [StepSummary.of(decode_event(s.raw)) for s in golden_sealed(name)]


def test_show_at_80_columns_shows_every_payload(archive: str) -> None:
    # a hand-written archive of pinned runs recorded without an agent key: no topic proves it
    # current, and provenance is waived, both knowingly
    code, out = cli("replay", "--archive-url", archive, "show", "golden-research",
                    "--offline", "--no-agent-check")  # fmt: skip
    assert code == 0, out
    assert_fits(out)
    for s in _steps("research"):
        # The start of each payload is on one line, where a reader looks for it.
        assert s.request[:20] in out, (s.seq, s.request)
        assert s.response[:20] in out, (s.seq, s.response)
    assert 'search({"q":"boiling point altitude 2000 m"})' in out
    assert "gpt-4o-2024-08-06" in out and "EXTERNAL_STATE" in out


def test_show_on_a_wide_terminal_gives_each_field_a_column(archive: str) -> None:
    code, out = cli("replay", "--archive-url", archive, "show", "golden-research",
                    "--offline", "--no-agent-check", columns=160)  # fmt: skip
    assert code == 0, out
    assert_fits(out, 160)
    header = next(line for line in out.splitlines() if "request" in line)
    assert all(h in header for h in ("seq", "kind", "time (UTC)", "model", "response"))
    assert 'search({"q":"boiling point altitude 2000 m"})' in out


def test_diff_at_80_columns_shows_both_sides_readable(archive: str) -> None:
    # the golden runs' bytes are pinned, recorded without an agent key: provenance waived
    code, out = cli("replay", "--archive-url", archive, "diff", "golden-research",
                    "golden-tool_error_handled", "--no-agent-check", "--offline")  # fmt: skip
    assert code == 1, out
    assert_fits(out)
    assert "10 differences" in out and "A golden-research" in out
    assert '{"name":"sampling"}' in out and "°C" in out and '"fallback after' in out


def test_batch_at_80_columns_keeps_run_ids_whole(archive: str) -> None:
    day = golden_sealed("research")[0]
    since = datetime.fromtimestamp(day.sealed_at / 1e6, UTC).date().isoformat()
    code, out = cli("replay", "--archive-url", archive, "batch", "--agent",
                    "tests.replayer.agents:research_agent", "--since", since,
                    "--no-agent-check", "--offline")  # fmt: skip
    assert code == 1, out  # the other golden run is not this agent's: it diverges
    assert_fits(out)
    assert "golden-tool_error_handled" in out and "golden-research" in out
    assert "the agent made a CLOCK call where the" in out


def test_archive_tables_at_80_columns(archive: str) -> None:
    code, out = cli("archive", "retention-report", "--archive", archive)
    assert code == 0, out
    assert_fits(out)
    assert "golden-tool_error_handled" in out and "COMPLIANCE" in out
    code, out = cli("archive", "ls", "--archive", archive)
    assert code == 0, out
    assert_fits(out)
    assert "golden-tool_error_handled" in out


def test_spool_status_at_80_columns_keeps_file_names_whole(tmp_path: Path) -> None:
    writer = SpoolWriter(tmp_path, "agent-traces-production-eu-west.raw")
    writer.append([(b"run", b"v" * 50) for _ in range(3)])
    writer.close()
    (name,) = [p.name for p in tmp_path.iterdir() if p.suffix == ".tvspool"]
    code, out = cli("spool", "status", "--spool-dir", str(tmp_path))
    assert code == 0, out
    assert_fits(out)
    assert name in out and "agent-traces-production-eu-west.raw" in out


def test_topics_at_80_columns_keep_names_and_configs_whole(kafka_bootstrap: str) -> None:
    settings = Settings(bootstrap_servers=kafka_bootstrap, topic_prefix=unique_name("narrow"),
                        partitions=1)  # fmt: skip
    ensure_topics(settings)
    code, out = cli("--bootstrap-servers", kafka_bootstrap, "--prefix", settings.topic_prefix,
                    "topics", "describe")  # fmt: skip
    assert code == 0, out
    assert_fits(out)
    for topic in settings.topics.all():
        assert topic in out
    assert "cleanup.policy=compact" in out
    code, out = cli("--bootstrap-servers", kafka_bootstrap, "--prefix", settings.topic_prefix,
                    "topics", "describe", "--json")  # fmt: skip
    assert {t["topic"] for t in json.loads(out)} == set(settings.topics.all())


#: Run ids as the Recorder makes them (UUIDs) and as deployments name them: the ids a
#: reader copies from a table into the next command, so never split across lines.
LONG_IDS = ("0b9d6f4e-2f63-4c1e-9a57-3c1f0e8d2a41", "tenant-eu-west:nightly-report-2026-12-01")


@pytest.fixture(scope="module")
def long_ids(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"file://{tmp_path_factory.mktemp('narrow-ids') / 'archive'}"
    store = open_store(url, Settings())
    for run_id in LONG_IDS:
        write_signed_run(store, sealed_run(run_id, 4))
    return url


def _whole(out: str, *tokens: str) -> None:
    for token in tokens:
        assert token in out, f"{token!r} is split or missing:\n{out}"


def test_diff_retention_report_and_ls_keep_long_run_ids_whole(long_ids: str) -> None:
    # hand-made unsigned runs: the layout is under test here, not provenance (waived knowingly)
    code, out = cli("replay", "--archive-url", long_ids, "diff", *LONG_IDS, "--no-agent-check",
                    "--offline")  # fmt: skip
    assert code in (0, 1), out
    assert_fits(out)
    _whole(out, *LONG_IDS)
    code, out = cli("archive", "retention-report", "--archive", long_ids)
    assert code == 0, out
    assert_fits(out)
    _whole(out, *LONG_IDS)
    code, out = cli("archive", "ls", "--archive", long_ids)
    assert code == 0, out
    assert_fits(out)
    _whole(out, *LONG_IDS)


def test_doctor_at_80_columns_keeps_names_whole(kafka_bootstrap: str, long_ids: str) -> None:
    settings = Settings(bootstrap_servers=kafka_bootstrap, topic_prefix=unique_name("narrow"),
                        partitions=1)  # fmt: skip
    ensure_topics(settings)
    code, out = cli("--bootstrap-servers", kafka_bootstrap, "--prefix", settings.topic_prefix,
                    "doctor", "--archive", long_ids)  # fmt: skip
    assert code == 0, out
    assert_fits(out)
    _whole(out, f"{settings.topic_prefix}.sequencer", f"{settings.topic_prefix}.raw",
           f"{settings.topic_prefix}.sealed", settings.archiver_group_id)  # fmt: skip
