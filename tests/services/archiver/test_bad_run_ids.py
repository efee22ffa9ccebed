"""Run ids outside the grammar stop nothing: not a partition's archive, not the archiver.

Against the real broker, the real sequencer and archiver, on ``file://`` and on S3 (moto
over HTTP) (docs/design.md, "Run ids"):

- written to ``raw`` by a plain producer, ``.``, ``..``, 85 CJK characters and a 255-byte
  ASCII id go to the DLQ as ``invalid`` naming the rule, every record of them (the C path
  never seals one), and every run after them on that partition seals and archives. They
  used to be sealed, then quarantined by the archiver, which then refused every later
  checkpoint of the partition; the 255-byte id killed the archiver on ``file://`` (Errno 36);
- sealed before the grammar (old data), the same ids stop nothing either: their records are
  quarantined as ``invalid`` naming the rule, and the archiver goes on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.services.archiver.helpers import SealedLog, finished_runs, running, wait_for
from tests.services.archiver.sealed_factory import sealed_values
from tests.services.sequencer import support
from tracevault.archive import ObjectStore, list_runs, open_store
from tracevault.archive._retention import retention_report
from tracevault.archive.layout import run_prefix
from tracevault.config import Settings
from tracevault.replayer.load.archive import load_from_archive
from tracevault.replayer.load.verify import verify
from tracevault.runid import RUN_ID_RULE
from tracevault.services.archiver import Archiver, ArchiverStats
from tracevault.services.archiver._quarantine import Quarantined
from tracevault.services.sequencer import _step
from tracevault.transparency import NoteVerifier, parse_vkey

BAD = [".", "..", "中" * 85, "x" * 255]
GOOD = ["before", "after-0", "after-1", "after-2"]


@pytest.fixture(params=["file", "s3"])
def make_settings(
    request: pytest.FixtureRequest,
    settings_factory: Callable[..., Settings],
    s3_bucket_factory: Callable[..., str],
    s3_endpoint: str,
) -> Callable[..., Settings]:
    def make(**kw: object) -> Settings:
        if request.param == "s3":
            kw.update(archive_url=f"s3://{s3_bucket_factory()}/a", s3_endpoint_url=s3_endpoint)
        return settings_factory(partitions=1, archive_segment_max_age_s=0.2, **kw)

    return make


@pytest.fixture
def store_of() -> Iterator[Callable[[Settings], ObjectStore]]:
    opened: list[ObjectStore] = []

    def open_(settings: Settings) -> ObjectStore:
        opened.append(open_store(settings.archive_url, settings))
        return opened[-1]

    yield open_
    for s in opened:
        s.close()


def _verified(store: ObjectStore, run_id: str, key: NoteVerifier, n: int) -> None:
    report = verify(load_from_archive(store, run_id), keys=[key])
    assert report.count == n and report.finished, run_id


def test_bad_ids_from_a_plain_producer_go_to_the_dlq_and_every_later_run_archives(
    make_settings: Callable[..., Settings],
    store_of: Callable[[Settings], ObjectStore],
    log_vkey: str,
) -> None:
    assert _step._cseal is not None, "the C path is built: this test is about it too"
    settings = make_settings(
        sequencer_batch_wait_ms=20, sequencer_gap_timeout_s=30.0, log_vkeys=log_vkey
    )
    items: list[tuple[str | bytes | None, bytes | None]] = []
    items += [("before", support.raw_event("before", s, last=2)) for s in range(3)]
    for bad in BAD:  # a whole run each: seq 1 and 2 would take the C path if it were open
        items += [(bad, support.raw_event(bad, s, last=2)) for s in range(3)]
    for good in GOOD[1:]:
        items += [(good, support.raw_event(good, s, last=2)) for s in range(3)]
    support.produce_raw(settings, items)
    archiver = Archiver(settings)
    store = store_of(settings)
    with support.running(settings, "runid") as (_, errors), running(archiver) as out:
        wait_for(lambda: finished_runs(store, GOOD) == len(GOOD), 90, "the good runs archived")
        assert not errors
    stats = out[0]
    assert isinstance(stats, ArchiverStats), stats
    assert stats.quarantined == {}, "nothing sealed needed quarantine"
    dlq = support.read_all(settings, settings.topics.dlq)
    assert sorted(r.key or b"" for r in dlq) == sorted(b.encode() for b in BAD for _ in range(3))
    for rec in dlq:
        assert rec.headers["tracevault.reason"] == b"invalid"
        assert RUN_ID_RULE in rec.headers["tracevault.detail"].decode()
    sealed = support.sealed_by_run(settings)
    assert set(sealed) == set(GOOD), "no bad id was sealed"
    for good in GOOD:
        _verified(store, good, parse_vkey(log_vkey), 3)


def test_bad_ids_sealed_before_the_grammar_are_quarantined_naming_the_rule(
    make_settings: Callable[..., Settings],
    store_of: Callable[[Settings], ObjectStore],
) -> None:
    # Old data: these were sealed before the sequencer checked run ids. The archiver keeps
    # going (the 255-byte id used to kill it on file://: Errno 36) and keeps their bytes in
    # quarantine, named by the rule; that their leaves still enter the archived tree, so that
    # later runs archive, is the archiver's checkpoint admission (not tested here).
    sl = SealedLog(make_settings())
    sl.produce({"before": sealed_values("before", 3)}, batch=3)
    sl.produce({r: sealed_values(r, 3) for r in BAD}, batch=3)
    settings = sl.settings_trusting()
    archiver = Archiver(settings)
    store = store_of(settings)
    with running(archiver) as out:
        wait_for(
            lambda: (
                archiver.stats.quarantined.get("invalid", 0) == 3 * len(BAD)
                and finished_runs(store, ["before"]) == 1
            ),
            90,
            "the bad ids quarantined",
        )
    stats = out[0]
    assert isinstance(stats, ArchiverStats), stats  # it stopped when asked, not on an error
    records = [Quarantined.from_json(store.get(i.key)) for i in store.list("quarantine/")]
    invalid = [q for q in records if q.reason == "invalid"]
    assert sorted((q.run_id or "", q.seq or 0) for q in invalid) == sorted(
        (r, s) for r in BAD for s in range(3)
    )
    assert all(RUN_ID_RULE in q.detail for q in invalid)
    _verified(store, "before", sl.signer.verifier, 3)
    for bad in BAD:
        assert not store.list(run_prefix(bad)), "nothing of it is archived as run history"


def test_ids_of_the_grammar_with_mapped_names_archive_and_are_listed_by_id(
    make_settings: Callable[..., Settings],
    store_of: Callable[[Settings], ObjectStore],
) -> None:
    # 128 ":" encode to 384 bytes: the archive names them "%3A…%~<hash>", and finds them by id
    runs = {r: sealed_values(r, 3) for r in [":" * 128, "a:" * 64, "plain"]}
    sl = SealedLog(make_settings())
    sl.produce(runs, batch=3)
    settings = sl.settings_trusting()
    archiver = Archiver(settings)
    store = store_of(settings)
    with running(archiver):
        wait_for(lambda: finished_runs(store, list(runs)) == len(runs), 90, "every run archived")
    assert "%~" in run_prefix(":" * 128) and "%~" in run_prefix("a:" * 64)
    for run_id in runs:
        _verified(store, run_id, sl.signer.verifier, 3)
    assert {s.run_id for s in list_runs(store)} == set(runs), "archive ls names each by its id"
    assert {r.run_id for r in retention_report(store)} == set(runs), "so does the report"
