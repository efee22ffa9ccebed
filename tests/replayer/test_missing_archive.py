"""Read commands never create an archive: a mistyped URL is "not found" (exit 3) naming the URL
and the nearest existing directory (file://) or the bucket (s3://), leaves nothing behind,
and is never read as an empty archive that was rolled back (docs/design.md, "Archive")."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from pathlib import Path

import boto3
import pytest
from click.testing import CliRunner, Result

from tests.replayer.archiving import write_signed_run
from tests.replayer.conftest import recorded
from tests.replayer.recording import seal
from tracevault.archive import open_store
from tracevault.cli import tracevault

pytestmark = pytest.mark.usefixtures("only_keys_given_here")


def _invoke(args: Sequence[str]) -> Result:
    return CliRunner().invoke(tracevault, list(args))


def _everything_under(root: Path) -> set[Path]:
    return set(root.rglob("*"))


@pytest.fixture
def real(tmp_path: Path, log_vkey: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A real archive (one signed run) beside which the tests mistype the path, trusted by
    the session's log key so that freshness (L5) runs."""
    root = tmp_path / ".tracevault" / "archive"
    store = open_store(f"file://{root}")
    write_signed_run(store, seal(recorded("run-a")))
    store.close()
    monkeypatch.setenv("TRACEVAULT_LOG_VKEYS", log_vkey)
    return root


@pytest.mark.parametrize(
    "command",
    [
        ["verify", "run-a", "--from", "archive"],
        ["show", "run-a", "--from", "archive"],
        ["export", "run-a", "-o", "OUT"],
        ["diff", "run-a", "run-a"],
        ["batch", "--agent", "tests.replayer.agents:research_agent", "--since", "2026-01-01"],
    ],
    ids=lambda c: c[0],
)
def test_a_replay_read_of_a_mistyped_file_archive_is_not_found_and_creates_nothing(
    real: Path, command: list[str]
) -> None:
    typo = real.parent / "archvie"
    url = f"file://{typo}"
    before = _everything_under(real.parent.parent)
    command = [str(real.parent.parent / "out") if c == "OUT" else c for c in command]
    res = _invoke(["replay", "--archive-url", url, *command])
    assert res.exit_code == 3, res.output
    assert url in res.output and f"nearest existing directory is {real.parent}" in res.output
    assert "rolled back" not in res.output and "rollback" not in res.output
    assert not typo.exists()
    assert _everything_under(real.parent.parent) == before


def test_a_mistyped_relative_url_names_the_absolute_path(
    real: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the issue's own typo: file://./.tracevault/archvie, from the folder holding .tracevault
    monkeypatch.chdir(real.parent.parent)
    url = "file://./.tracevault/archvie"
    res = _invoke(["replay", "--archive-url", url, "verify", "run-a", "--from", "archive"])
    assert res.exit_code == 3, res.output
    assert url in res.output and str(real.parent) in " ".join(res.output.split())
    assert not (real.parent / "archvie").exists()
    # and the archive that exists still verifies: the read path opens real stores
    ok = _invoke(["replay", "--archive-url", f"file://{real}", "verify", "run-a", "--offline"])
    assert ok.exit_code == 0, ok.output


@pytest.mark.parametrize("command", [["ls"], ["retention-report"]])
def test_archive_reads_of_a_missing_archive_are_not_found_and_create_nothing(
    tmp_path: Path, command: list[str]
) -> None:
    root = tmp_path / "nonexistent" / "archive"
    url = f"file://{root}"
    res = _invoke(["archive", *command, "--archive", url])
    assert res.exit_code == 3, res.output
    flat = " ".join(res.output.split())
    assert url in flat and f"nearest existing directory is {tmp_path}" in flat
    assert not (tmp_path / "nonexistent").exists()


def test_an_existing_directory_that_is_no_archive_is_not_found(tmp_path: Path) -> None:
    res = _invoke(["archive", "ls", "--archive", f"file://{tmp_path}", "--json"])
    assert res.exit_code == 3, res.output
    assert "is not an archive" in res.output
    assert list(tmp_path.iterdir()) == []


def test_a_missing_bucket_is_not_found_naming_it_and_is_not_created(s3_endpoint: str) -> None:
    bucket = f"tv-missing-{uuid.uuid4().hex[:12]}"
    res = _invoke(
        ["archive", "ls", "--archive", f"s3://{bucket}/a", "--s3-endpoint-url", s3_endpoint]
    )
    assert res.exit_code == 3, res.output
    assert f"bucket {bucket}" in " ".join(res.output.split())
    client = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1")
    assert bucket not in {b["Name"] for b in client.list_buckets()["Buckets"]}


def test_writers_still_make_the_store(tmp_path: Path) -> None:
    # a hold writes: it may make the store it holds in (the archiver does too)
    root = tmp_path / "new"
    res = _invoke(["archive", "hold", "run-x", "--archive", f"file://{root}", "--json"])
    assert (root / "store.json").is_file(), res.output
    listed = _invoke(["archive", "ls", "--archive", f"file://{root}", "--json"])
    assert listed.exit_code == 0, listed.output
    assert json.loads(listed.output) == []
