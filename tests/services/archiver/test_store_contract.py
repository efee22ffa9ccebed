"""One contract, every backend: the ``store`` fixture runs each test on file:// and s3://."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from tracevault.archive import ObjectStore
from tracevault.errors import ArchiveError, ConfigError, NotFoundError, RetentionError


def test_put_then_get_returns_the_same_bytes(future: datetime, store: ObjectStore) -> None:
    store.put("runs/r1/a.bin", b"\x00hello\xff", retain_until=future)
    assert store.get("runs/r1/a.bin") == b"\x00hello\xff"


def test_same_bytes_again_is_a_no_op_and_keeps_the_lock(
    future: datetime, store: ObjectStore
) -> None:
    store.put("k/x", b"one", retain_until=future)
    before = store.head("k/x")
    store.put("k/x", b"one", retain_until=future + timedelta(days=9))
    assert store.head("k/x") == before
    assert store.get("k/x") == b"one"


def test_different_bytes_under_an_existing_key_are_refused(
    future: datetime, store: ObjectStore
) -> None:
    store.put("k/x", b"one", retain_until=future)
    with pytest.raises(
        ArchiveError, match=r"object k/x already exists in .* with different content"
    ):
        store.put("k/x", b"two", retain_until=future)
    assert store.get("k/x") == b"one"


def test_get_and_head_of_a_missing_key_name_it(store: ObjectStore) -> None:
    with pytest.raises(NotFoundError, match="runs/nope/seg"):
        store.get("runs/nope/seg")
    with pytest.raises(NotFoundError, match="runs/nope/seg"):
        store.head("runs/nope/seg")


def test_list_is_sorted_by_key_and_filtered_by_prefix(future: datetime, store: ObjectStore) -> None:
    for key in ["runs/b/2", "runs/a/1", "runs/ab/1", "index/days/2026-01-01/a", "runs/b/10"]:
        store.put(key, key.encode(), retain_until=future)
    assert [i.key for i in store.list("runs/")] == [
        "runs/a/1",
        "runs/ab/1",
        "runs/b/10",
        "runs/b/2",
    ]
    assert [i.key for i in store.list("runs/a/")] == ["runs/a/1"]
    assert [i.key for i in store.list("runs/a")] == ["runs/a/1", "runs/ab/1"]
    assert [(i.key, i.size) for i in store.list("index/")] == [("index/days/2026-01-01/a", 23)]
    assert store.list("nothing/") == []


def test_head_reports_size_lock_mode_and_retain_until(future: datetime, store: ObjectStore) -> None:
    store.put("k/x", b"12345", retain_until=future)
    info = store.head("k/x")
    assert info.size == 5
    assert info.lock_mode == "COMPLIANCE"
    assert info.retain_until is not None
    assert abs(info.retain_until - future) < timedelta(seconds=1)
    assert info.legal_hold is False


def test_delete_before_retain_until_is_refused(future: datetime, store: ObjectStore) -> None:
    store.put("k/x", b"keep", retain_until=future)
    with pytest.raises(RetentionError, match="k/x is retained until"):
        store.delete("k/x")
    assert store.get("k/x") == b"keep"


def _server_refuses(store: ObjectStore, key: str, now: datetime) -> bool:
    """Delete ``key`` with our clock at ``now``; True when the store's own clock refused.

    Our side judges expiry by the injected clock (that is what is under test). On S3 the
    server judges by its own clock, and no clock of ours shortens a COMPLIANCE lock: real S3
    and MinIO refuse a retain-until in the past, so tests never write one.
    """
    if not store.url.startswith("s3://"):
        store.delete(key, now=now)
        return False
    with pytest.raises(RetentionError, match="still in force by the store's clock"):
        store.delete(key, now=now)
    return True


def test_expiry_is_judged_by_the_injected_clock_and_the_store_has_the_last_word(
    future: datetime,
    store: ObjectStore,
) -> None:
    store.put("k/x", b"old", retain_until=future)
    with pytest.raises(RetentionError, match="retained until"):
        store.delete("k/x", now=future - timedelta(days=1))
    if _server_refuses(store, "k/x", future + timedelta(days=1)):
        assert store.get("k/x") == b"old"
        return
    with pytest.raises(NotFoundError):
        store.get("k/x")
    assert store.list("k/") == []


def test_legal_hold_blocks_delete_even_after_expiry(future: datetime, store: ObjectStore) -> None:
    store.put("k/x", b"held", retain_until=future)
    store.set_legal_hold("k/x", True)
    assert store.head("k/x").legal_hold is True
    with pytest.raises(RetentionError, match="legal hold"):
        store.delete("k/x", now=future + timedelta(days=400))
    store.set_legal_hold("k/x", False)
    assert store.head("k/x").legal_hold is False
    if not _server_refuses(store, "k/x", future + timedelta(days=400)):
        assert store.list("k/") == []


def test_history_lists_each_object_once_as_its_readable_original(
    future: datetime, store: ObjectStore
) -> None:
    store.put("k/a", b"one", retain_until=future)
    store.put("k/b", b"two", retain_until=future)
    store.put("other", b"x", retain_until=future)
    history = store.history("k/")
    assert [(v.key, v.delete_marker, v.size) for v in history] == [
        ("k/a", False, 3),
        ("k/b", False, 3),
    ]
    assert [store.get(v.key, version_id=v.version_id) for v in history] == [b"one", b"two"]
    assert store.history("none/") == []


def test_versions_are_of_exactly_one_key_and_history_can_start_after_a_key(
    future: datetime,
    store: ObjectStore,
) -> None:
    # a full tile's key is the prefix of its partial tiles' keys: versions() must not mix them
    for key in ("t/000", "t/000.p/5", "t/000.p/50", "t/001"):
        store.put(key, key.encode(), retain_until=future)
    (v,) = store.versions("t/000.p/5")
    assert (v.key, v.delete_marker, v.size) == ("t/000.p/5", False, len("t/000.p/5"))
    assert store.get(v.key, version_id=v.version_id) == b"t/000.p/5"
    assert [v.key for v in store.versions("t/000")] == ["t/000"]
    assert store.versions("t/002") == []
    assert [v.key for v in store.history("t/", start_after="t/000.p/5")] == [
        "t/000.p/50",
        "t/001",
    ]


def test_legal_hold_on_a_missing_object_is_not_found(store: ObjectStore) -> None:
    with pytest.raises(NotFoundError, match="k/none"):
        store.set_legal_hold("k/none", True)


@pytest.mark.parametrize("key", ["", "/abs", "a//b", "a/../b", "a/./b", "a b", "a/"])
def test_unsafe_keys_are_refused(future: datetime, store: ObjectStore, key: str) -> None:
    with pytest.raises(ConfigError, match="object key"):
        store.put(key, b"x", retain_until=future)
