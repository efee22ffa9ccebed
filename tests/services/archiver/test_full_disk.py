"""A full ``file://`` disk: the archiver exits 4 naming the object, and resumes once there is
space again. It used to end with a traceback (``OSError: [Errno 28]``, exit 1) on every start.

The disk is really full: the archive lives on a small tmpfs mounted for the test (the suite
runs as root, as CI does) and a filler file takes its last byte. The archiver is the real
command in its own process, against the real broker.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.services.archiver.helpers import SealedLog
from tests.services.archiver.sealed_factory import sealed_values
from tracevault.archive import open_store
from tracevault.config import Settings
from tracevault.replayer.load.archive import load_from_archive
from tracevault.replayer.load.verify import verify


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 256 KiB tmpfs: a real file system that really fills up."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=True)


def _fill(disk: Path) -> Path:
    """Take every free byte of ``disk`` with one file; return it."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        with contextlib.suppress(OSError):
            while True:
                os.write(fd, b"\0" * 4096)
        with pytest.raises(OSError) as info:  # the disk is full now
            os.write(fd, b"\0")
        assert info.value.errno == errno.ENOSPC
    finally:
        os.close(fd)
    return filler


def _archiver(settings: Settings, url: str, vkey: Path) -> subprocess.CompletedProcess[str]:
    args = f"archiver --archive {url} --until-idle 2 --trusted-key @{vkey}".split()
    kafka = ["--bootstrap-servers", settings.bootstrap_servers, "--prefix", settings.topic_prefix]
    return subprocess.run(
        [sys.executable, "-m", "tracevault", *kafka, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_full_disk_exits_4_naming_the_object_then_resumes(
    settings_factory: Callable[..., Settings], small_disk: Path, tmp_path: Path
) -> None:
    sl = SealedLog(settings_factory(partitions=1))
    sl.produce({"full-disk": sealed_values("full-disk", 30)})
    url = f"file://{small_disk / 'archive'}"
    open_store(url, Settings()).close()  # the store exists; then the disk fills
    vkey = tmp_path / "log.vkey"
    vkey.write_text(sl.vkey + "\n")
    filler = _fill(small_disk)

    full = _archiver(sl.settings, url, vkey)
    assert full.returncode == 4, full.stderr
    assert "Traceback" not in full.stderr
    assert "error: object " in full.stderr and "the file system is full" in full.stderr

    filler.unlink()  # space again: the same command resumes from the archive
    again = _archiver(sl.settings, url, vkey)
    assert again.returncode == 0, again.stderr
    run = load_from_archive(open_store(url, Settings()), "full-disk")
    assert verify(run, keys=[sl.signer.verifier]).count == 30
