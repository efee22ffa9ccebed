"""Rolling a ``file://`` archive's partition log back, as a hostile storage admin would.

The real pipeline seals and archives four runs in two archiver passes (Recorder, Sequencer,
``tracevault archiver --until-idle`` on the shared broker), while a real witness (``Witness``
following the sealed topic, its own key and store) cosigns both sizes. The attacker then
deletes, consistently, everything the second pass wrote: the newer checkpoint objects, every
tile, entry bundle and data bundle past the older size, the run indexes and day batches of
the second pass. What is left is a smaller log whose every run verifies on its own; only the
witness's store and the sealed topic still show the larger size (docs/log.md, "Freshness").
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.kafka_harness import free_port
from tests.replayer import agents
from tests.replayer.pipeline import fresh_settings, record_live, sequencer_running, wait_sealed
from tracevault.archive import open_store
from tracevault.archive._filestore import FileStore
from tracevault.archive.layout import run_prefix
from tracevault.archive.tlog import checkpoint_prefix, log_prefix, parse_run_index_key
from tracevault.cli import tracevault as main
from tracevault.config import Settings
from tracevault.heads import locate_run
from tracevault.kafka import sealed_generation
from tracevault.producer import Publisher, Recorder
from tracevault.services.witness import WitnessFollower
from tracevault.transparency import (
    CosignatureSigner,
    Ed25519Signer,
    load_witness_verifiers,
    log_origin,
    tile_width,
)
from tracevault.witness import cosigned_sizes
from tracevault.witness._core import Witness

FIRST = ("rb-a", "rb-b")  # archived by the first pass: they survive the rollback
SECOND = ("rb-c", "rb-d")  # archived by the second pass: the attacker removes them
SPANNING = "rb-e"  # begun before the first pass, finished before the second: its tail goes


@dataclass
class Sealed:
    settings: Settings
    origin: str
    small: int  # the archive's size after the first pass (what the attacker rolls back to)
    large: int  # after the second
    witness_url: str
    witness_vkey: str
    base: Path


def _cli(settings: Settings, *args: str, bootstrap: str | None = None) -> Any:
    env = {
        "TRACEVAULT_BOOTSTRAP_SERVERS": bootstrap or settings.bootstrap_servers,
        "TRACEVAULT_TOPIC_PREFIX": settings.topic_prefix,
        "TRACEVAULT_PARTITIONS": str(settings.partitions),
        "TRACEVAULT_ARCHIVE_URL": settings.archive_url,
    }
    return CliRunner().invoke(main, list(args), env=env)


def _archive_pass(settings: Settings, vkey: str) -> int:
    res = _cli(settings, "--bootstrap-servers", settings.bootstrap_servers, "--prefix",
               settings.topic_prefix, "archiver", "--archive", settings.archive_url,
               "--until-idle", "2", "--trusted-key", vkey)  # fmt: skip
    assert res.exit_code == 0, res.output
    store = open_store(settings.archive_url, settings)
    gen = sealed_generation(settings)
    cps = store.list(checkpoint_prefix(log_prefix(settings.topic_prefix, 0, gen)))
    return int(cps[-1].key.rsplit("/", 1)[1])


def _record_spanning(settings: Settings, gate: threading.Event) -> None:
    """A run that records a tool call, delivers it, waits for ``gate``, then does the whole
    research run: it spans the two archiver passes."""
    publisher = Publisher(settings)

    def agent(agent_input: Any, edges: Any) -> Any:
        edges.tool("search", {"q": "first"})
        assert publisher.flush(30), "the publisher could not deliver to Kafka"
        assert gate.wait(120), "the gate was never opened"
        return agents.research_agent(agent_input, edges)

    try:
        rec = Recorder(publisher=publisher, agent_id="rollback", agent_version="1",
                       model=agents.fake_model, tools=agents.TOOLS, run_id=SPANNING)  # fmt: skip
        rec.run(agent, agents.INPUT)
    finally:
        assert publisher.flush(30)
        publisher.close()


def _wait(cond: Any, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    tick = threading.Event()
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        tick.wait(0.2)


@pytest.fixture(scope="module")
def sealed(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory, log_signer: Ed25519Signer
) -> Iterator[Sealed]:
    base = tmp_path_factory.mktemp("rollback")
    settings = fresh_settings(kafka_bootstrap, base, "rollb", partitions=1)
    origin = log_origin(settings.log_origin, settings.topic_prefix, 0, sealed_generation(settings))
    vkey = log_signer.verifier.vkey
    signer = CosignatureSigner.generate("w1.test")
    url = f"file://{base / 'witness'}"
    wstore = open_store(url, settings)
    witness = Witness(wstore, signer, [log_signer.verifier], retention=timedelta(days=1))
    follower = WitnessFollower(settings, witness, group_id=f"wit-{settings.topic_prefix}")
    thread = threading.Thread(target=follower.run, daemon=True)
    thread.start()

    def cosigned(size: int) -> bool:
        assert thread.is_alive(), "the witness stopped"
        return size in cosigned_sizes(wstore, origin)

    try:
        with sequencer_running(settings):
            gate = threading.Event()
            spanning = threading.Thread(target=_record_spanning, args=(settings, gate), daemon=True)
            spanning.start()
            try:
                _wait(lambda: (loc := locate_run(settings, SPANNING)) is not None
                      and loc.last_seq >= 1, f"{SPANNING}'s first events sealed")  # fmt: skip
                for run_id in FIRST:
                    record_live(settings, agents.research_agent, agents.INPUT, run_id)
                    wait_sealed(settings, run_id)
                small = _archive_pass(settings, vkey)
                _wait(lambda: cosigned(small), f"the witness to cosign {origin}@{small}")
            finally:
                gate.set()
                spanning.join(60)
            wait_sealed(settings, SPANNING)
            for run_id in SECOND:
                record_live(settings, agents.research_agent, agents.INPUT, run_id)
                wait_sealed(settings, run_id)
            large = _archive_pass(settings, vkey)
            _wait(lambda: cosigned(large), f"the witness to cosign {origin}@{large}")
    finally:
        follower.stop()
        thread.join(30)
    assert not thread.is_alive(), "the witness did not stop"
    assert small < large
    yield Sealed(settings, origin, small, large, url, signer.verifier.vkey, base)


def _tile_coords(rest: str) -> tuple[int, int, int] | None:
    """(level, index, width) of ``tile/<L>/<N>[.p/<W>]``, ``tile/entries/..`` or ``data/..``."""
    parts = rest.split("/")
    if parts[0] == "tile" and parts[1] == "entries":
        level, path = 0, parts[2:]
    elif parts[0] == "tile":
        level, path = int(parts[1]), parts[2:]
    elif parts[0] == "data":
        level, path = 0, parts[1:]
    else:
        return None
    width = 256
    if len(path) >= 2 and path[-2].endswith(".p"):
        width = int(path[-1])
        path = [*path[:-2], path[-2][: -len(".p")]]
    return level, int("".join(p.removeprefix("x") for p in path)), width


def _delete(store: FileStore, key: str) -> None:
    path = store.path_of(key)
    os.chmod(path, 0o600)  # the owner of the files can: retention is this class's rule
    path.unlink()


def _roll_back(s: Sealed, name: str) -> Settings:
    """A copy of the archive rolled back to ``s.small``: every object the second pass added
    deleted, consistently (the attacker leaves a log that verifies by itself)."""
    src = Path(s.settings.archive_url.removeprefix("file://"))
    dst = s.base / name
    shutil.copytree(src, dst)
    store = FileStore(dst)
    log = log_prefix(s.settings.topic_prefix, 0, sealed_generation(s.settings))
    gone = 0
    for info in store.list(log):
        rest = info.key[len(log) :]
        if rest.startswith("checkpoint/"):
            drop = int(rest.rsplit("/", 1)[1]) > s.small
        else:
            coords = _tile_coords(rest)
            assert coords is not None, info.key
            level, index, width = coords
            drop = width > tile_width(level, index, s.small)
        if drop:
            _delete(store, info.key)
            gone += 1
    for run_id in (*FIRST, *SECOND, SPANNING):
        for info in store.list(run_prefix(run_id)):
            idx = parse_run_index_key(info.key)
            if idx is not None and idx[1] > s.small:
                _delete(store, info.key)
                gone += 1
    for info in store.list("index/"):
        if info.key.endswith(".parquet"):  # the investigator's index: derived, never trusted
            continue
        parts = info.key.rsplit("/", 1)[-1].split("-")  # <prefix>-<p>-<size>[-<generation>]
        size = int(parts[-2] if parts[-1].startswith("g") else parts[-1])
        if size > s.small:
            _delete(store, info.key)
            gone += 1
    assert gone > 3
    for run_id in SECOND:
        assert not store.list(run_prefix(run_id)), f"{run_id} was not removed"
    return s.settings.model_copy(update={"archive_url": f"file://{dst}"})


def _verify(settings: Settings, vkey: str, run_id: str, *extra: str, **kw: Any) -> Any:
    return _cli(settings, "replay", "verify", run_id, "--json", "--trusted-key", vkey,
                *extra, **kw)  # fmt: skip


def _dead() -> str:
    return f"127.0.0.1:{free_port()}"


def _text(res: Any) -> str:
    return " ".join(res.output.split())


def test_the_intact_archive_verifies_with_the_topic_and_the_witness(sealed, log_vkey) -> None:
    s = sealed
    assert {s.small, s.large} <= set(
        cosigned_sizes(open_store(s.witness_url, s.settings), s.origin)
    )
    for run_id in (*FIRST, *SECOND, SPANNING):
        res = _verify(s.settings, log_vkey, run_id, "--require-finished", "--witness-key",
                      s.witness_vkey, "--witness-store", s.witness_url)  # fmt: skip
        assert res.exit_code == 0, res.output
        out = json.loads(res.output)
        assert any(c.startswith("L5 fresh") for c in out["checks"])
    # Kafka down: verify does not hang, and says the topic was not compared; nothing then
    # proves the archive current (the witness store shows a floor), so it is not a pass
    # unless --offline accepts that knowingly
    t0 = time.monotonic()
    res = _verify(s.settings, log_vkey, FIRST[0], "--witness-key", s.witness_vkey,
                  "--witness-store", s.witness_url, bootstrap=_dead())  # fmt: skip
    assert time.monotonic() - t0 < 30, "verify waited too long on the unreachable broker"
    assert res.exit_code == 1, res.output
    out = json.loads(res.output)
    assert out["status"] == "unverified freshness" and out["error"].startswith(
        "unverified freshness"
    ), out
    assert "the sealed topic was not compared" in " ".join(out["warnings"])
    res = _verify(s.settings, log_vkey, FIRST[0], "--witness-key", s.witness_vkey,
                  "--witness-store", s.witness_url, "--offline", bootstrap=_dead())  # fmt: skip
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["status"] == "verified, freshness not checked (offline)"
    res = _cli(s.settings, "archive", "retention-report", "--trusted-key", log_vkey,
               "--witness-key", s.witness_vkey, "--witness-store", s.witness_url)  # fmt: skip
    assert res.exit_code == 0, res.output


@pytest.fixture(scope="module")
def rolled(sealed: Sealed) -> Settings:
    return _roll_back(sealed, "rolled-back")


def test_rollback_without_a_witness_is_caught_by_the_topic(sealed, rolled, log_vkey) -> None:
    res = _verify(rolled, log_vkey, FIRST[0])
    assert res.exit_code == 1, res.output
    text = _text(res)
    assert "L5 fresh" in text and "rolled back" in text
    assert f"holds size {sealed.small}" in text and f"size {sealed.large} signed" in text
    assert "the topic's checkpoint record" in text and sealed.origin in text


def test_rollback_with_the_witness_is_caught_by_its_cosigned_size(sealed, rolled, log_vkey) -> None:
    # Kafka down: the witness's store alone shows the larger size. The witness also holds
    # the older size, which covers the surviving run: verify must not re-anchor to it.
    t0 = time.monotonic()
    res = _verify(rolled, log_vkey, FIRST[0], "--witness-key", sealed.witness_vkey,
                  "--witness-store", sealed.witness_url, "--min-witnesses", "1",
                  bootstrap=_dead())  # fmt: skip
    assert time.monotonic() - t0 < 30, "verify waited too long on the unreachable broker"
    assert res.exit_code == 1, res.output
    text = _text(res)
    assert f"holds size {sealed.small}" in text and f"size {sealed.large} signed" in text
    assert "witness w1.test" in text and sealed.witness_url in text


def test_a_removed_run_is_reported_removed_not_not_found(sealed, rolled, log_vkey) -> None:
    # the topic's head proves the run was sealed below what the archiver committed
    res = _verify(rolled, log_vkey, SECOND[0])
    assert res.exit_code == 1, res.output
    text = _text(res)
    assert f"run '{SECOND[0]}' was removed from the archive" in text
    assert "head" in text and "partition 0" in text
    assert f"holds size {sealed.small}" in text and f"size {sealed.large} signed" in text
    assert "check the run id" not in text
    # no topic: nothing lists the run any more, but the log it would be in was rolled back
    res = _verify(rolled, log_vkey, SECOND[1], "--witness-key", sealed.witness_vkey,
                  "--witness-store", sealed.witness_url, bootstrap=_dead())  # fmt: skip
    assert res.exit_code == 1, res.output
    text = _text(res)
    assert f"rolled back from {sealed.large} to {sealed.small}" in text
    assert f"run '{SECOND[1]}' may have been in the removed part" in text
    # a run id nothing knows, in an archive nobody rolled back: still "not found" (exit 3)
    res = _verify(sealed.settings, log_vkey, "rb-never", "--witness-key", sealed.witness_vkey,
                  "--witness-store", sealed.witness_url)  # fmt: skip
    assert res.exit_code == 3, res.output
    assert "check the run id" in _text(res)


def test_a_cut_off_tail_fails_though_an_older_cosigned_size_covers_what_is_left(
    sealed, rolled, log_vkey
) -> None:
    # the spanning run lost its tail and everything after it; what is left is an unfinished
    # run proven against a size the witness did cosign, but the witness holds a larger one
    res = _verify(rolled, log_vkey, SPANNING, "--witness-key", sealed.witness_vkey,
                  "--witness-store", sealed.witness_url, bootstrap=_dead())  # fmt: skip
    assert res.exit_code == 1, res.output
    text = _text(res)
    assert f"holds size {sealed.small}" in text and f"size {sealed.large} signed" in text
    assert f"run '{SPANNING}' is proven against a rolled-back log" in text


def test_retention_report_exits_1_on_the_rollback(sealed, rolled, log_vkey) -> None:
    res = _cli(rolled, "archive", "retention-report")  # the topic, from the settings
    assert res.exit_code == 1, res.output
    assert f"holds size {sealed.small}" in _text(res)
    res = _cli(rolled, "archive", "retention-report", "--json", "--witness-key",
               sealed.witness_vkey, "--witness-store", sealed.witness_url,
               bootstrap=_dead())  # fmt: skip
    assert res.exit_code == 1, res.output
    assert "witness w1.test" in _text(res)


@dataclass(frozen=True)
class _Tail:
    """What ``tracevault.kafka.archived_tails`` reports of a partition (a plain record)."""

    partition: int
    origin: str
    size: int
    note: str
    where: str
    committed: int = 0


def test_a_witness_ahead_of_what_the_archiver_committed_is_lag_not_rollback(
    sealed, rolled, log_signer
) -> None:
    # the same smaller archive, but the topic says the archiver committed only through it:
    # the witness is ahead of the archiver (it follows the topic), which is not a rollback
    from tracevault.archive import check_freshness

    s = sealed
    archive = open_store(rolled.archive_url, rolled)
    witness = open_store(s.witness_url, s.settings)
    log = log_prefix(s.settings.topic_prefix, 0, sealed_generation(s.settings))
    note = archive.get(f"{checkpoint_prefix(log)}{s.small:020d}").decode()
    keys, wkeys = [log_signer.verifier], load_witness_verifiers([s.witness_vkey])
    lag = {0: _Tail(0, s.origin, s.small, note, "sealed[0]@1")}
    got = check_freshness(archive, s.settings.topic_prefix, [s.origin], keys=keys,
                          witness_stores=[witness], witnesses=wkeys, tails=lag)  # fmt: skip
    assert got.ok, got
    assert any("not archived yet" in n and f"size {s.large}" in n for n in got.notes), got
    # no topic: the witness alone decides, and the archive is behind it
    got = check_freshness(archive, s.settings.topic_prefix, [s.origin], keys=keys,
                          witness_stores=[witness], witnesses=wkeys, tails=None)  # fmt: skip
    assert [(r.archived, r.proof.size) for r in got.rollbacks] == [(s.small, s.large)]
    assert "the sealed topic was not compared" in got.notes[0]
    # a checkpoint note nobody trusted signed proves nothing: the witness is not counted
    other = [Ed25519Signer.generate(log_signer.name).verifier]
    got = check_freshness(archive, s.settings.topic_prefix, [s.origin], keys=other,
                          witness_stores=[witness], tails=None)  # fmt: skip
    assert got.ok and not got.compared, got


def _roll_back_witness(s: Sealed, name: str) -> str:
    """A copy of the witness's store rolled back with the archive: every cosigned checkpoint
    past ``s.small`` deleted (whoever holds both stores leaves a matching pair)."""
    src = Path(s.witness_url.removeprefix("file://"))
    dst = s.base / name
    shutil.copytree(src, dst)
    store = FileStore(dst)
    gone = 0
    for info in store.list("witness/"):
        tail = info.key.rsplit("/", 1)[-1]
        if "/checkpoint/" in info.key and tail.isdigit() and int(tail) > s.small:
            _delete(store, info.key)
            gone += 1
    url = f"file://{dst}"
    assert gone and max(cosigned_sizes(FileStore(dst), s.origin)) == s.small
    return url


def test_archive_and_witness_store_rolled_back_with_kafka_down_is_unverified(
    sealed, rolled, log_vkey
) -> None:
    """Both stores rolled back to the same size and Kafka unreachable: nothing left proves the
    archive current, so verify must not say "verified" (it said so, exit 0, before)."""
    witness = _roll_back_witness(sealed, "witness-rolled-back")
    flags = ("--witness-key", sealed.witness_vkey, "--witness-store", witness)
    res = _verify(rolled, log_vkey, FIRST[0], *flags, bootstrap=_dead())
    assert res.exit_code == 1, res.output
    out = json.loads(res.stdout)
    assert (out["ok"], out["status"], out["freshness"]) == (
        False,
        "unverified freshness",
        "unverified",
    ), out
    text = _text(res)
    assert "L5 fresh unverified" in text and "the sealed topic was not compared" in text
    assert "--offline" in text
    # --offline accepts it knowingly, and the status says what was not checked
    res = _verify(rolled, log_vkey, FIRST[0], *flags, "--offline", bootstrap=_dead())
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["status"].endswith("freshness not checked (offline)"), out
    assert out["status"] != "verified"
    # the library's verify is the same verify: no topic, no pass
    from tracevault.errors import LogError
    from tracevault.replayer import LogPolicy, Trust, load_run, verify, verify_run

    dead = rolled.model_copy(update={"bootstrap_servers": _dead()})
    trust = Trust.of(dead, trusted_keys=[log_vkey], witness_stores=[witness])
    _, report = verify_run(dead, FIRST[0], trust)
    assert not report.ok and report.freshness == "unverified", report
    policy = LogPolicy.of(rolled, [log_vkey])
    run = load_run(rolled, FIRST[0])
    agents = trust.agents
    report = verify(run, log=policy, agents=agents)  # no settings: nothing to compare with
    assert (report.ok, report.status) == (False, "unverified freshness"), report
    with pytest.raises(LogError, match="L5 fresh: the archive of partition 0"):
        verify(run, log=policy, agents=agents, settings=rolled)  # the topic shows more
    intact = load_run(sealed.settings, FIRST[0])
    report = verify(intact, log=policy, agents=agents, settings=sealed.settings)
    assert report.ok and report.freshness == "fresh", report
    # and the commands that take the run as the record refuse it
    res = _cli(rolled, "replay", "show", FIRST[0], "--json", "--trusted-key", log_vkey,
               *flags, bootstrap=_dead())  # fmt: skip
    assert res.exit_code == 1 and json.loads(res.stdout)["status"] == "unverified freshness"
    # where Kafka answers the topic shows the rollback, whatever the witness store says
    res = _verify(rolled, log_vkey, FIRST[0], *flags)
    assert res.exit_code == 1 and f"size {sealed.large} signed" in _text(res), res.output


def _batch(settings: Settings, vkey: str, *extra: str, bootstrap: str | None = None) -> Any:
    today = datetime.now(UTC).date().isoformat()
    return _cli(settings, "replay", "batch", "--agent", "tests.replayer.agents:research_agent",
                "--since", today, "--json", "--trusted-key", vkey, *extra,
                bootstrap=bootstrap)  # fmt: skip


def test_batch_reads_witness_stores_and_catches_a_rolled_back_archive(
    sealed, rolled, log_vkey
) -> None:
    """``replay batch`` never read witness stores: a rolled-back archive reported its runs
    ``ok``, and ``--min-witnesses 1`` failed every run of an intact one."""
    flags = ("--witness-key", sealed.witness_vkey, "--witness-store", sealed.witness_url,
             "--min-witnesses", "1")  # fmt: skip
    res = _batch(sealed.settings, log_vkey, *flags)
    items = {i["run_id"]: i for i in json.loads(res.stdout)["runs"]}
    for run_id in (*FIRST, *SECOND):  # cosigned, fresh, and re-run as recorded
        assert items[run_id]["status"] == "ok", items[run_id]
    assert items[SPANNING]["status"] == "diverged", items[SPANNING]  # another agent's run
    # the rolled-back archive, Kafka down: the witness store shows the larger size
    res = _batch(rolled, log_vkey, *flags, bootstrap=_dead())
    assert res.exit_code == 1, res.output
    items = {i["run_id"]: i for i in json.loads(res.stdout)["runs"]}
    assert set(FIRST) <= set(items) and not set(SECOND) & set(items)
    for run_id in FIRST:
        item = items[run_id]
        assert item["status"] == "verify_failed", item
        assert "L5 fresh" in item["detail"] and f"size {sealed.large} signed" in item["detail"]
    # the topic alone catches it too, as verify does
    res = _batch(rolled, log_vkey)
    items = {i["run_id"]: i for i in json.loads(res.stdout)["runs"]}
    assert all(items[r]["status"] == "verify_failed" for r in FIRST), items
    # both stores rolled back, Kafka down: unverified freshness, never ok
    witness = _roll_back_witness(sealed, "witness-rolled-back-batch")
    res = _batch(rolled, log_vkey, "--witness-key", sealed.witness_vkey, "--witness-store",
                 witness, bootstrap=_dead())  # fmt: skip
    assert res.exit_code == 1, res.output
    items = {i["run_id"]: i for i in json.loads(res.stdout)["runs"]}
    for run_id in FIRST:
        assert items[run_id]["status"] == "verify_failed", items[run_id]
        assert items[run_id]["detail"].startswith("unverified freshness"), items[run_id]
