"""A witness that joins late, and one that finds records gone, against the real broker.

Both follow a real sealed topic into a real file store, with their own consumer group: the
first as ``WitnessFollower.run`` in a thread, the second, after its first size, as the service
(``tracevault witness run --archive URL``) in its own process. The first learned the log's
newest checkpoint by a push before it read the topic from the beginning: the old genuine
checkpoints it then reads are old (409 over HTTP), not a rollback, while the log presenting
an old one as its newest head still is. The second was down while records it needed were
deleted from the topic (as retention does): it refuses once, keeps following, and cosigns
again once the archive's tiles prove the gap.
"""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import threading
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.kafka_harness import free_port
from tests.services.sequencer.support import wait_until
from tests.witness.topiclog import RUN, Partition, chain, post_add_checkpoint, witness_process
from tracevault.archive import ObjectStore, open_store
from tracevault.config import Settings
from tracevault.services.archiver._logwriter import LeafRecord, PartitionLog
from tracevault.services.witness import WitnessFollower
from tracevault.transparency import CosignatureSigner, Ed25519Signer, leaf_data, write_private_key
from tracevault.witness import cosigned_sizes
from tracevault.witness._core import Witness, checkpoint_key, origin_prefix
from tracevault.witness._http import serve_add_checkpoint


def _refused(w: Witness, origin: str, kind: str) -> float:
    got = w.metrics.registry.get_sample_value(
        "tracevault_witness_refused_total", {"origin": origin, "kind": kind}
    )
    return got or 0.0


def _refusals(store: ObjectStore, origin: str) -> list[dict[str, object]]:
    return [json.loads(store.get(o.key)) for o in store.list(f"{origin_prefix(origin)}refusal/")]


@contextmanager
def _following(follower: WitnessFollower) -> Iterator[None]:
    t = threading.Thread(target=follower.run, daemon=True)
    t.start()
    try:
        yield
    finally:
        follower.stop()
        t.join(30)
        assert not t.is_alive(), "the follower did not stop"


def _witness(tmp_path: Path, settings: Settings, key: Ed25519Signer) -> Witness:
    store = open_store(f"file://{tmp_path / 'witness'}", settings)
    signer = CosignatureSigner.generate("w1.test")
    return Witness(store, signer, [key.verifier], retention=timedelta(days=1))


def test_a_late_joiner_reading_old_checkpoints_is_not_a_rollback(
    settings_factory: Callable[..., Settings], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = settings_factory(partitions=1)
    key = Ed25519Signer.generate("tv.test/log")
    log = Partition(settings, key, Producer(settings.kafka_config()), "genuine")
    a = log.append(3)
    b = log.append(2)
    c = log.build(4)  # the log's newest, size 9: pushed to the witness before the topic has it
    w = _witness(tmp_path, settings, key)
    server = serve_add_checkpoint(w, 0, host="127.0.0.1")
    url = f"http://127.0.0.1:{server.server_port}/add-checkpoint"
    origin = log.origin
    try:
        assert post_add_checkpoint(url, 0, [], c.note)[0] == 200
        follower = WitnessFollower(settings, w, group_id=f"late-{settings.topic_prefix}")
        with caplog.at_level(logging.INFO, logger="tracevault.witness"), _following(follower):
            # it reads 0..3 and 3..5 from the beginning: sizes it never cosigned, below 9
            wait_until(
                lambda: _refused(w, origin, "old") + _refused(w, origin, "rollback") > 0,
                timeout=60,
                what="the witness to read the old checkpoints",
            )
            log.produce(c)
            log.append(3)
            wait_until(
                lambda: bool(w.store.list(checkpoint_key(origin, 12))),
                timeout=60,
                what="the witness to cosign 12",
            )
            # C2SP tlog-witness: an older checkpoint gets 409 with the witness's size
            assert post_add_checkpoint(url, 5, [], b.note)[::2] == (409, "12\n")
            assert _refused(w, origin, "rollback") == 0
            assert not any("ALERT" in r.getMessage() for r in caplog.records)
            assert _refusals(w.store, origin) == []  # an old checkpoint is no evidence

            # the log presents its old 0..3 as its newest head after 12: that is a rollback
            log.produce(a)
            wait_until(
                lambda: _refused(w, origin, "rollback") == 1,
                timeout=60,
                what="the rollback refused",
            )
        [kept] = _refusals(w.store, origin)
        assert kept["kind"] == "rollback" and kept["witness_size"] == 12
        assert f"newest checkpoint after {origin}@12" in str(kept["message"])
        assert [r for r in caplog.records if "ALERT" in r.getMessage()]
        assert w.latest(origin) == (12, log.tree.root())
    finally:
        server.shutdown()
        server.server_close()


def _high(settings: Settings) -> int:
    c = Consumer({"bootstrap.servers": settings.bootstrap_servers, "group.id": "watermarks"})
    try:
        return int(c.get_watermark_offsets(TopicPartition(settings.topics.sealed, 0), 10)[1])
    finally:
        c.close()


def _committed(settings: Settings, group: str) -> int:
    c = Consumer({"bootstrap.servers": settings.bootstrap_servers, "group.id": group})
    try:
        [tp] = c.committed([TopicPartition(settings.topics.sealed, 0)], timeout=10)
        return int(tp.offset)
    finally:
        c.close()


def _archive(settings: Settings, log: Partition, size: int, note: str) -> None:
    """The archiver's own writer puts the log's first ``size`` leaves into the archive."""
    store = open_store(settings.archive_url, settings)
    plog = PartitionLog.open(store, settings.topic_prefix, log.origin, 0, [log.signer.verifier])
    now = int(datetime.now(UTC).timestamp() * 1_000_000)
    for i, h in enumerate(log.leaves[:size]):
        ch = chain(i, log.tag)
        plog.append(LeafRecord(RUN, i, ch, False, now, leaf_data(RUN, i, ch), h, b"v"))
    plog.note, plog.note_size = note, size
    with ThreadPoolExecutor(2) as pool:
        plog.flush(datetime.now(UTC) + timedelta(days=1), pool)


def _alive(proc: subprocess.Popen[str]) -> bool:
    if proc.poll() is not None:  # died: fail now, with what it said
        raise AssertionError(f"the witness exited with {proc.returncode}: {proc.communicate()[1]}")
    return True


def _metric(url: str, origin: str, kind: str) -> float:
    body = urllib.request.urlopen(url + "/metrics", timeout=5).read().decode()
    want = f'tracevault_witness_refused_total{{kind="{kind}",origin="{origin}"}}'
    return next((float(x.rsplit(" ", 1)[1]) for x in body.splitlines() if x.startswith(want)), 0)


def test_a_gap_is_refused_once_and_proved_across_from_the_archive(
    settings_factory: Callable[..., Settings], tmp_path: Path
) -> None:
    """The second half runs the service itself: ``tracevault witness run --archive URL``."""
    settings = settings_factory(partitions=1)
    key = Ed25519Signer.generate("tv.test/log")
    log = Partition(settings, key, Producer(settings.kafka_config()), "genuine")
    origin = log.origin
    group = f"gap-{settings.topic_prefix}"
    w = _witness(tmp_path, settings, key)
    log.append(3)
    with _following(WitnessFollower(settings, w, group_id=group)):
        wait_until(lambda: w.latest(origin) is not None, timeout=60, what="the witness at 3")
    # while the witness is down the log goes on, and the records are deleted (retention)
    log.append(2)
    log.append(3)
    admin = AdminClient({"bootstrap.servers": settings.bootstrap_servers})
    gone = TopicPartition(settings.topics.sealed, 0, _high(settings))
    for f in admin.delete_records([gone]).values():
        f.result(30)

    write_private_key(tmp_path / "w.key", w.signer)
    port = free_port()
    env = {
        "TRACEVAULT_LOG_VKEYS": key.verifier.vkey,
        "TRACEVAULT_BOOTSTRAP_SERVERS": settings.bootstrap_servers,
        "TRACEVAULT_TOPIC_PREFIX": settings.topic_prefix,
    }
    args = ["witness", "run", "--key-file", str(tmp_path / "w.key"), "--group-id", group]
    args += ["--store", w.store.url, "--archive", settings.archive_url]
    metrics = f"http://127.0.0.1:{port}"
    with witness_process([*args, "--metrics-port", str(port)], **env) as proc:
        log.append(1)  # 8..9: 3 is not a subtree of 8, nothing archived: unprovable
        wait_until(
            lambda: _alive(proc) and bool(_refusals(w.store, origin)),
            timeout=60,
            what="a gap refusal",
        )
        e = log.append(2)  # 9..11: the same gap, read in a later poll
        wait_until(
            lambda: _committed(settings, group) >= _high(settings),
            timeout=60,
            what="the witness to read past 9..11",
        )
        [gap] = _refusals(w.store, origin)
        assert (gap["kind"], gap["witness_size"], gap["start"], gap["checkpoint_size"]) == (
            "gap",
            3,
            8,
            9,
        )
        assert "leaves 3..7" in str(gap["message"])
        assert _metric(metrics, origin, "gap") == 1  # once, though two records hit it
        assert cosigned_sizes(w.store, origin) == [3]  # nothing cosigned across the gap

        _archive(settings, log, 11, e.note)  # the archiver caught up to 11
        log.append(1)  # 11..12: the tiles give what 3 -> 12 needs left of 11
        wait_until(
            lambda: bool(w.store.list(checkpoint_key(origin, 12))),
            timeout=60,
            what="the witness to cosign across the gap",
        )
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=15)
        assert proc.returncode == 0, err
    assert cosigned_sizes(w.store, origin) == [3, 12]
    assert len(_refusals(w.store, origin)) == 1
    assert "ALERT" not in err
