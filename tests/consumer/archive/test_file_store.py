"""file:// specifics: read-only files, locks written before objects, crash leftovers ignored."""

from __future__ import annotations

import json
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tracevault.config import Settings
from tracevault.consumer.archive import open_store
from tracevault.errors import ConfigError

FUTURE = datetime.now(UTC) + timedelta(days=183)


def test_objects_and_their_locks_are_read_only_files(tmp_path: Path) -> None:
    store = open_store(f"file://{tmp_path}", Settings())
    store.put("runs/r/seg", b"data", retain_until=FUTURE)
    obj = tmp_path / "objects" / "runs" / "r" / "seg"
    lock = tmp_path / "locks" / "runs" / "r" / "seg.json"
    assert obj.read_bytes() == b"data"
    assert stat.S_IMODE(obj.stat().st_mode) == 0o444
    assert stat.S_IMODE(lock.stat().st_mode) == 0o444
    assert json.loads(lock.read_bytes())["lock_mode"] == "COMPLIANCE"


def test_leftovers_of_a_crashed_put_are_invisible_and_harmless(tmp_path: Path) -> None:
    store = open_store(f"file://{tmp_path}", Settings())
    # What a SIGKILL mid-put can leave: a temp file and a lock whose object never appeared.
    (tmp_path / "tmp" / "deadbeef").write_bytes(b"half an obj")
    orphan = tmp_path / "locks" / "runs" / "r" / "seg.json"
    orphan.parent.mkdir(parents=True)
    orphan.write_text('{"lock_mode": "COMPLIANCE", "retain_until": "2000-01-01T00:00:00+00:00"}')
    assert store.list("") == []
    store.put("runs/r/seg", b"whole", retain_until=FUTURE)
    assert store.head("runs/r/seg").retain_until == FUTURE


@pytest.mark.parametrize("url", ["ftp://x/y", "file://", "s3:///nobucket"])
def test_unusable_urls_are_refused(url: str) -> None:
    with pytest.raises(ConfigError, match="archive URL"):
        open_store(url, Settings())
