"""The tamper corpus, from the archive: verify names the right seq and object every time.

Each test archives an honest run (segments of 4: seqs 0-3, 4-7, 8-10), damages the stored
bytes the way an attacker or a failing disk would, and runs the real loader and verifier.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.replayer.archiving import write_run
from tests.replayer.both_ways import verify_both_ways
from tests.replayer.conftest import recorded
from tests.replayer.recording import seal
from tracevault.archive import open_store
from tracevault.archive._filestore import FileStore
from tracevault.archive.layout import final_key, receipt_key, segment_key
from tracevault.config import Settings
from tracevault.errors import ChainError
from tracevault.replayer import load_run

RUN = "run-a"


@pytest.fixture
def archived(tmp_path: Path, sealed):
    root = tmp_path / "archive"
    store = open_store(f"file://{root}")
    keys = write_run(store, sealed, per_segment=4)
    settings = Settings(archive_url=f"file://{root}")
    return settings, root / "objects", keys


def _path(objects: Path, key: str) -> Path:
    p = FileStore(objects.parent).path_of(key)  # runs share shard directories
    p.chmod(0o644)
    return p


def _verify(settings: Settings):
    return verify_both_ways(load_run(settings, RUN, source="archive"))


def _failure(settings: Settings) -> ChainError:
    with pytest.raises(ChainError) as info:
        _verify(settings)
    return info.value


def test_an_honest_archive_verifies(archived) -> None:
    settings, _, keys = archived
    report = _verify(settings)
    assert report.finished and report.count == 11 and not report.warnings
    assert [c.split()[0] for c in report.checks] == [
        "A1",
        "1",
        "2",
        "3",
        "4",
        "5",
        "6",
        "A2",
        "A3",
        "I",
    ]
    assert len(keys) == 3


def test_one_flipped_byte_in_an_event(archived, sealed) -> None:
    # segments are deflate-compressed, so rewrite the segment with one byte of seq 5 flipped
    settings, objects, _ = archived
    import dataclasses

    from tracevault.archive import encode_segment, sealed_body
    from tracevault.schemas import encode_sealed

    raw = bytearray(sealed[5].raw)
    raw[20] ^= 0x40
    chunk = [*sealed[4:5], dataclasses.replace(sealed[5], raw=bytes(raw)), *sealed[6:8]]
    data = encode_segment(RUN, 4, [sealed_body(encode_sealed(s)) for s in chunk])
    _path(objects, segment_key(RUN, 4, 7)).write_bytes(data)
    err = _failure(settings)
    assert err.seq == 5 and err.obj == segment_key(RUN, 4, 7)
    assert "check 4 hash" in str(err)


def test_one_flipped_byte_in_the_compressed_file(archived) -> None:
    settings, objects, _ = archived
    p = _path(objects, segment_key(RUN, 8, 10))
    data = bytearray(p.read_bytes())
    data[-30] ^= 0x01
    p.write_bytes(bytes(data))
    err = _failure(settings)
    # raw deflate has no checksum: the flip either breaks the block or changes an event
    assert err.obj == segment_key(RUN, 8, 10) and err.seq is not None and 8 <= err.seq <= 10


def test_a_deleted_event(archived, sealed) -> None:
    settings, objects, _ = archived
    from tracevault.archive import encode_segment, sealed_body
    from tracevault.schemas import encode_sealed

    chunk = [sealed[4], sealed[6], sealed[7]]
    data = encode_segment(RUN, 4, [sealed_body(encode_sealed(s)) for s in chunk])
    _path(objects, segment_key(RUN, 4, 7)).write_bytes(data)
    err = _failure(settings)
    assert err.obj == segment_key(RUN, 4, 7) and err.seq == 7  # holds 3, its name says 4..7


def test_two_swapped_events(archived, sealed) -> None:
    settings, objects, _ = archived
    from tracevault.archive import encode_segment, sealed_body
    from tracevault.schemas import encode_sealed

    chunk = [sealed[4], sealed[6], sealed[5], sealed[7]]
    data = encode_segment(RUN, 4, [sealed_body(encode_sealed(s)) for s in chunk])
    _path(objects, segment_key(RUN, 4, 7)).write_bytes(data)
    err = _failure(settings)
    assert err.seq == 5 and err.obj == segment_key(RUN, 4, 7) and "check 2 seq" in str(err)


def test_an_event_moved_in_from_another_run(archived, sealed) -> None:
    settings, objects, _ = archived
    from tracevault.archive import encode_segment, sealed_body
    from tracevault.schemas import encode_sealed

    other = seal(recorded("run-b"))
    chunk = [sealed[4], other[5], sealed[6], sealed[7]]
    data = encode_segment(RUN, 4, [sealed_body(encode_sealed(s)) for s in chunk])
    _path(objects, segment_key(RUN, 4, 7)).write_bytes(data)
    err = _failure(settings)
    assert err.seq == 5 and err.obj == segment_key(RUN, 4, 7) and "run-b" in str(err)


def test_a_truncated_segment(archived) -> None:
    settings, objects, _ = archived
    p = _path(objects, segment_key(RUN, 4, 7))
    p.write_bytes(p.read_bytes()[:-40])
    err = _failure(settings)
    assert err.obj == segment_key(RUN, 4, 7) and err.seq == 4
    assert "truncated" in str(err)


def test_a_deleted_segment(archived) -> None:
    settings, objects, _ = archived
    os.remove(_path(objects, segment_key(RUN, 4, 7)))
    err = _failure(settings)
    assert err.obj == segment_key(RUN, 4, 7) and err.seq == 4
    assert "deleted" in str(err)


def test_a_deleted_last_segment_is_named_by_the_final_receipt(archived) -> None:
    settings, objects, _ = archived
    os.remove(_path(objects, segment_key(RUN, 8, 10)))
    err = _failure(settings)
    # raw deflate has no checksum: the flip either breaks the block or changes an event
    assert err.obj == segment_key(RUN, 8, 10) and err.seq is not None and 8 <= err.seq <= 10


@pytest.mark.parametrize(
    ("field", "value"),
    [("count", 3), ("last_hash", "00" * 32), ("sha256", "ab" * 32)],
)
def test_an_edited_receipt(archived, field, value) -> None:
    settings, objects, _ = archived
    key = receipt_key(RUN, 4, 7)
    p = _path(objects, key)
    receipt = json.loads(p.read_bytes())
    receipt[field] = value
    p.write_bytes(json.dumps(receipt).encode())
    err = _failure(settings)
    assert err.seq == 4
    # a receipt that disagrees with a verified chain is the bad object; a changed hash cannot
    # be told apart from changed segment bytes, so that one names the segment (and the receipt)
    assert err.obj == (segment_key(RUN, 4, 7) if field == "sha256" else key)
    assert key in str(err)


def test_an_edited_final_receipt(archived) -> None:
    settings, objects, _ = archived
    p = _path(objects, final_key(RUN))
    fr = json.loads(p.read_bytes())
    fr["count"] = 10
    p.write_bytes(json.dumps(fr).encode())
    err = _failure(settings)
    assert err.obj == final_key(RUN) and "count" in str(err)


def test_a_deleted_final_receipt_of_a_finished_run(archived) -> None:
    # The last event is RUN_FINISHED: the archiver wrote the final receipt right after the
    # last segment's receipt, so its absence is a deletion, never "the archiver is behind".
    settings, objects, _ = archived
    os.remove(_path(objects, final_key(RUN)))
    err = _failure(settings)
    assert err.obj == final_key(RUN) and err.seq == 10
    assert "A3 final receipt" in str(err) and "RUN_FINISHED" in str(err)


def test_an_unfinished_archived_run_verifies_as_unfinished(tmp_path: Path, sealed) -> None:
    store = open_store(f"file://{tmp_path / 'a'}")
    write_run(store, sealed[:8], per_segment=4)
    report = _verify(Settings(archive_url=f"file://{tmp_path / 'a'}"))
    assert not report.finished and report.status == "chain only, unfinished"


def test_a_receipt_that_is_not_json_any_more(archived) -> None:
    settings, objects, _ = archived
    key = receipt_key(RUN, 8, 10)
    _path(objects, key).write_bytes(b"{ this was a receipt")
    err = _failure(settings)
    assert err.obj == key and err.seq == 8 and "unreadable" in str(err)
