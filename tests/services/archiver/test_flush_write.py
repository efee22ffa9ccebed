"""FlushJob.write to a store without ``put_many`` (as S3 is): every object, then the
checkpoint last, in one task per writer thread.

A task per object cost a queue hand-off, a thread wake-up and a future each (GIL round trips
the archiver's main thread pays for too); a flush has hundreds of small objects.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tracevault.archive._filestore import FileStore
from tracevault.errors import ArchiveError
from tracevault.services.archiver._logwriter import FlushJob

UNTIL = datetime(2031, 1, 1, tzinfo=UTC)


class _CountingPool(ThreadPoolExecutor):
    def __init__(self, workers: int) -> None:
        super().__init__(workers)
        self.tasks = 0

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        self.tasks += 1
        return super().submit(fn, *args, **kwargs)


class _Recording(FileStore):
    """A file store that puts one object at a time, as S3 does (no ``put_many``)."""

    put_many = None  # type: ignore[assignment]

    def __init__(self, root: Path, fail: str | None = None) -> None:
        super().__init__(root)
        self.order: list[str] = []
        self.fail = fail

    def put(self, key: str, data: bytes, *, retain_until: datetime) -> None:
        if key == self.fail:
            raise ArchiveError(f"object {key}: the disk is full")
        super().put(key, data, retain_until=retain_until)
        self.order.append(key)


def _job(store: FileStore, n: int) -> FlushJob:
    puts = [(f"log/p/0/tile/entries/{i:03d}", b"%d" % i) for i in range(n)]
    return FlushJob(store, puts, ("log/p/0/checkpoint/1", b"note"), UNTIL, n, n, 0)


@pytest.mark.parametrize("objects", [1, 3, 8, 170])
def test_a_flush_writes_every_object_in_one_task_per_thread_then_its_checkpoint(
    tmp_path: Path, objects: int
) -> None:
    store = _Recording(tmp_path)
    with _CountingPool(8) as pool:
        assert _job(store, objects).write(pool) == objects + 1
        assert pool.tasks == min(8, objects)
    assert sorted(store.order[:-1]) == [k for k, _ in _job(store, objects).puts]
    assert store.order[-1] == "log/p/0/checkpoint/1"
    assert [store.get(k) for k, _ in _job(store, objects).puts] == [
        b"%d" % i for i in range(objects)
    ]
    assert store.head("log/p/0/checkpoint/1").retain_until == UNTIL


def test_a_failed_put_fails_the_flush_before_its_checkpoint(tmp_path: Path) -> None:
    store = _Recording(tmp_path, fail="log/p/0/tile/entries/017")
    with _CountingPool(8) as pool, pytest.raises(ArchiveError, match="entries/017: the disk"):
        _job(store, 40).write(pool)
    assert "log/p/0/checkpoint/1" not in store.order
    assert store.list("log/p/0/checkpoint/") == []


class _SlowFirst(_Recording):
    """The first object's put waits until every other object is written: a thread that met
    a slow fsync."""

    def __init__(self, root: Path, others: int) -> None:
        super().__init__(root)
        self.others = others
        self.rest_done = threading.Event()

    def put(self, key: str, data: bytes, *, retain_until: datetime) -> None:
        if key.endswith("/000"):
            assert self.rest_done.wait(10), "the other threads did not take the rest"
        super().put(key, data, retain_until=retain_until)
        if len(self.order) == self.others:
            self.rest_done.set()


def test_a_slow_put_does_not_hold_up_the_objects_behind_it(tmp_path: Path) -> None:
    # with a fixed share per thread, the objects after 000 in its share would wait for it
    store = _SlowFirst(tmp_path, others=39)
    with _CountingPool(4) as pool:
        assert _job(store, 40).write(pool) == 41
    assert store.order[-2:] == ["log/p/0/tile/entries/000", "log/p/0/checkpoint/1"]
