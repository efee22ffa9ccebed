"""Attacks on the sequencer's state, against a real broker (issue 21, "Done means").

The attacker is a plain producer with write access to ``<prefix>.heads`` (a deployment that
did not apply `tracevault topics acls`); it does not hold the log key. It writes one forged
record while the sequencer is down, then the sequencer is restarted normally and the genuine
agents go on. Whatever was forged, no genuine event may be lost, sent to the DLQ or chained
onto a forged state; the forgery is an ALERT and a count; every run verifies with the trusted
key from the topic and from the archive (docs/design.md, "Sequencer rules").
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from click.testing import CliRunner
from confluent_kafka import Producer

from tests.services.archiver.helpers import running as archiving
from tests.services.archiver.helpers import wait_for
from tests.services.sequencer.support import (
    assert_chain,
    assert_signed_log,
    produce_raw,
    raw_event,
    read_all,
    running,
    sealed_by_run,
    wait_until,
)
from tracevault.cli import tracevault
from tracevault.config import Settings
from tracevault.heads import FINISHED_KEY_PREFIX, Head, HeldEvent, encode_head, find_head
from tracevault.kafka import partition_for
from tracevault.services.archiver import Archiver
from tracevault.transparency import RECORD_HEADER, TREE_KEY, Ed25519Signer

#: what an attack writes to heads: key, value, headers
Headers = list[tuple[str, str | bytes | None]]
Forged = tuple[bytes, bytes, Headers]
Forgery = Callable[[Settings, dict[str, str]], Forged]


def _head_of(settings: Settings, run_id: str) -> Head:
    head = find_head(settings, run_id)
    assert head is not None and head.next_seq > 0, run_id
    return head


def finished_for_an_open_run(s: Settings, r: dict[str, str]) -> Forged:
    head = _head_of(s, r["victim"])
    return r["victim"].encode(), encode_head(dataclasses.replace(head, finished=True)), []


def random_last_hash(s: Settings, r: dict[str, str]) -> Forged:
    head = _head_of(s, r["victim"])
    forged = dataclasses.replace(head, last_hash=os.urandom(32))
    return r["victim"].encode(), encode_head(forged), []


def garbage_under_a_run_key(s: Settings, r: dict[str, str]) -> Forged:
    return r["victim"].encode(), b"\xc3\x01" + os.urandom(60), []


def garbage_under_the_tree_key(s: Settings, r: dict[str, str]) -> Forged:
    value = (5023596536637309959).to_bytes(8, "big") + os.urandom(56)
    return TREE_KEY, value, [(RECORD_HEADER, b"tree")]


def garbage_under_a_chunk_key(s: Settings, r: dict[str, str]) -> Forged:
    return FINISHED_KEY_PREFIX + b"1/attacker/0/0", os.urandom(80), []


def another_runs_head_under_the_key(s: Settings, r: dict[str, str]) -> Forged:
    head = _head_of(s, r["other"])
    return r["victim"].encode(), encode_head(head), []


def a_forged_event_held_behind_a_gap(s: Settings, r: dict[str, str]) -> Forged:
    """An event of the attacker's, as if it had arrived past a gap: it would be sealed as the
    agent's own seq 4 when seq 3 arrives."""
    head = _head_of(s, r["victim"])
    forged = raw_event(r["victim"], 4, note="-forged")
    p = partition_for(r["victim"], s.partitions)
    held = HeldEvent(4, forged, p, 1, time.time_ns() // 1000)
    return r["victim"].encode(), encode_head(dataclasses.replace(head, held=(held,))), []


ATTACKS = [
    finished_for_an_open_run,
    random_last_hash,
    garbage_under_a_run_key,
    garbage_under_the_tree_key,
    garbage_under_a_chunk_key,
    another_runs_head_under_the_key,
    a_forged_event_held_behind_a_gap,
]


def _runs(partitions: int) -> dict[str, str]:
    """A victim, another open run and a finished run, all in the victim's partition (so a
    forged tree or chunk there touches every one of them)."""
    tag = uuid.uuid4().hex[:8]
    victim = f"victim-{tag}"
    p = partition_for(victim, partitions)
    names = iter(f"run-{tag}-{i}" for i in range(10_000))
    other = next(n for n in names if partition_for(n, partitions) == p)
    done = next(n for n in names if partition_for(n, partitions) == p)
    return {"victim": victim, "other": other, "done": done}


def _forge(settings: Settings, key: bytes, value: bytes, headers: Headers, partition: int) -> None:
    p = Producer(settings.kafka_config(**{"log_level": 0}))
    p.produce(settings.topics.heads, value, key, partition, headers=headers)
    assert p.flush(30) == 0


def _wave(
    *parts: tuple[str, int, int], raws: dict[str, list[bytes]]
) -> list[tuple[str | bytes | None, bytes | None]]:
    """(key, value) of seqs ``a..b-1`` of each run, run after run."""
    return [(run, v) for run, a, b in parts for v in raws[run][a:b]]


def _verify(settings: Settings, vkey: str, run_id: str, source: str) -> dict[str, Any]:
    env = {
        "TRACEVAULT_BOOTSTRAP_SERVERS": settings.bootstrap_servers,
        "TRACEVAULT_TOPIC_PREFIX": settings.topic_prefix,
        "TRACEVAULT_PARTITIONS": str(settings.partitions),
        "TRACEVAULT_ARCHIVE_URL": settings.archive_url,
    }
    # the victims' events are made by hand, unsigned: these attacks are on the heads
    args = ["replay", "verify", run_id, "--from", source, "--trusted-key", vkey, "--json"]
    args.append("--no-agent-check")
    res = CliRunner().invoke(tracevault, args, env=env)
    assert res.exit_code == 0, (run_id, source, res.output)
    out: dict[str, Any] = json.loads(res.stdout)
    assert out["log_checked"] is True, out
    return out


@pytest.mark.parametrize("forge", ATTACKS, ids=lambda f: f.__name__)
def test_a_forged_heads_record_is_an_alert_and_the_genuine_runs_go_on(
    forge: Forgery,
    settings_factory: Callable[..., Settings],
    log_signer: Ed25519Signer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = settings_factory(partitions=3, sequencer_batch_wait_ms=20)
    runs = _runs(settings.partitions)
    victim, other, done = runs["victim"], runs["other"], runs["done"]
    part = partition_for(victim, settings.partitions)
    raws = {
        victim: [raw_event(victim, s, last=5) for s in range(6)],
        other: [raw_event(other, s, last=6) for s in range(7)],
        done: [raw_event(done, s, last=2) for s in range(3)],
    }
    first = _wave((victim, 0, 3), (other, 0, 5), (done, 0, 3), raws=raws)
    with running(settings) as (_seq, errors):
        produce_raw(settings, first)
        wait_until(
            lambda: sum(len(v) for v in sealed_by_run(settings).values()) == 11,
            timeout=90,
            what="the first events sealed",
        )
    assert not errors, errors

    key, value, headers = forge(settings, runs)
    _forge(settings, key, value, headers, part)

    caplog.set_level(logging.ERROR, logger="tracevault.services.sequencer._loop")
    with running(settings) as (seq, errors):
        # the genuine tails, and a resend of the finished run (duplicates)
        rest = _wave((victim, 3, 6), (other, 5, 7), (done, 0, 3), raws=raws)
        produce_raw(settings, rest)

        def caught_up() -> bool:
            assert not errors, errors
            snap = seq.metrics.snapshot()
            taken = sum(
                v
                for k, v in snap.items()
                if k.startswith(
                    (
                        "tracevault_sequencer_sealed",
                        "tracevault_sequencer_dup",
                        "tracevault_sequencer_dlq",
                    )
                )
            )
            return taken >= len(rest)  # every record of the second wave judged

        wait_until(caught_up, timeout=120, what="the second wave to be sequenced")
        snap = seq.metrics.snapshot()
    assert not errors, errors
    assert not any(v for k, v in snap.items() if k.startswith("tracevault_sequencer_dlq")), snap

    # nothing lost, duplicated, refused or chained onto the forgery
    assert read_all(settings, settings.topics.dlq) == []
    sealed = sealed_by_run(settings)
    assert set(sealed) == {victim, other, done}
    for run_id, values in raws.items():
        assert_chain(run_id, [ev for _, ev in sealed[run_id]], values)
    assert_signed_log(settings, [log_signer.verifier])
    vkey = log_signer.verifier.vkey
    for run_id, values in raws.items():
        out = _verify(settings, vkey, run_id, "topic")
        assert out["count"] == len(values) and out["finished"] is True, out

    # the forgery was noticed: an ALERT, and a count
    rejected = sum(v for k, v in snap.items() if k.startswith("tracevault_sequencer_state_rej"))
    assert rejected >= 1, snap
    alerts = [r.getMessage() for r in caplog.records if "ALERT" in r.getMessage()]
    assert alerts, "no ALERT logged"

    # ... and the archive holds the same runs, verified with the same key
    archiver = Archiver(settings)
    total = sum(len(v) for v in raws.values())
    with archiving(archiver) as result:
        wait_for(lambda: archiver.stats.events_archived >= total, 90, "the archiver")
    assert not any(isinstance(r, BaseException) for r in result), result
    assert archiver.stats.events_quarantined == 0
    for run_id, values in raws.items():
        out = _verify(settings, vkey, run_id, "archive")
        assert out["count"] == len(values) and out["finished"] is True, out
