"""A small demo, run as a user runs it, and its summary checked against the archive itself."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

import pytest

from tests.services.sequencer.support import assert_signed_log
from tests.stack.conftest import DemoRun
from tracevault.archive import list_runs, open_store
from tracevault.config import Settings
from tracevault.content import KEY_ATTRIBUTE, metadata_only, open_run
from tracevault.demo.run import _TICKETS
from tracevault.index import Filters, load_index, rebuild, search
from tracevault.replayer.load.archive import load_from_archive
from tracevault.schemas import decode_event
from tracevault.transparency import load_signer, parse_vkey


def test_small_demo_summary_matches_the_archive(demo_run: DemoRun) -> None:
    summary, archive, tmp_path = demo_run.summary, demo_run.archive, demo_run.cwd

    assert summary["runs"] == 12 == len(summary["run_ids"])
    assert summary["failed_runs"] >= 1  # chargeback tickets fail by design
    assert summary["verified"] == {"archive": 3, "topic": 3}
    assert summary["replayed"] == {"archive": 3, "topic": 3}

    store = open_store(archive)
    try:
        listed = {r.run_id for r in list_runs(store)}
        assert listed == set(summary["run_ids"])
        archived_events = 0
        for run_id in summary["run_ids"]:
            run = load_from_archive(store, run_id)  # the tiled log (docs/log.md, "Archive")
            seqs = [r["seq"] for r in run.records.rows]
            assert seqs == list(range(len(seqs))) and run.log_head, run_id  # finished
            archived_events += len(seqs)
    finally:
        store.close()
    assert summary["events"] == summary["events_sealed"] == summary["events_archived"]
    assert summary["events_archived"] == archived_events
    # The services were stopped cleanly: their logs end without a traceback.
    for path in summary["logs"].values():
        assert "Traceback" not in (tmp_path / path).read_text()


def test_the_commands_the_demo_prints_work(demo_run: DemoRun) -> None:
    env = {**os.environ, "TRACEVAULT_BOOTSTRAP_SERVERS": demo_run.bootstrap}
    commands = demo_run.summary["commands"]
    assert len(commands) >= 4
    for command in commands:
        proc = subprocess.run(
            shlex.split(command), cwd=demo_run.cwd, env=env, capture_output=True, text=True,
            timeout=120, check=False,
        )  # fmt: skip
        assert proc.returncode == 0, f"{command}\n{proc.stdout[-1500:]}\n{proc.stderr[-1500:]}"


def test_the_demo_signs_with_its_own_key(demo_run: DemoRun, log_vkey: str) -> None:
    key_file = demo_run.cwd / demo_run.summary["log_key_file"]
    assert key_file.stat().st_mode & 0o777 == 0o600
    vkey = demo_run.summary["log_vkey"]
    assert load_signer(key_file).verifier.vkey == vkey != log_vkey  # not the suite's key
    # its public half is where the printed commands read it: none verifies without a key
    vkey_file = demo_run.summary["log_vkey_file"]
    assert (demo_run.cwd / vkey_file).read_text().strip() == vkey
    # replay run takes the run as the record: it verifies too, so it names the key
    verifying = [c for c in demo_run.summary["commands"] if " verify " in c or " run " in c]
    assert len(verifying) >= 3
    assert all(f"--trusted-key @{vkey_file}" in c for c in verifying), verifying
    # ... and its agents sign with its own agent key (0600), whose vkey those commands trust
    assert (demo_run.cwd / ".tracevault" / "agent.key").stat().st_mode & 0o777 == 0o600
    agent = "--agent-key support-agent-00=@.tracevault/agent.vkey"  # the first run's agent
    assert all(agent in c for c in verifying if " export " not in c), verifying
    settings = Settings(bootstrap_servers=demo_run.bootstrap, topic_prefix=demo_run.prefix)
    cps = assert_signed_log(settings, [parse_vkey(vkey)])
    assert sum(len(c) for c in cps.values()) > 0


def test_the_demo_records_encrypted_content_it_verifies_without_a_key(demo_run: DemoRun) -> None:
    """The demo shows the product as configured in production: content encrypted under a
    keyring of its own (mode 0600), nothing of the tickets in clear in the archive, verify
    with no content key, show with the keyring and a clear refusal (exit 7) without it."""
    summary, cwd = demo_run.summary, demo_run.cwd
    assert summary["content"].startswith("encrypted (keyring"), summary["content"]
    keyring = cwd / ".tracevault" / "keyring.json"
    assert keyring.stat().st_mode & 0o777 == 0o600
    store = open_store(demo_run.archive)
    try:
        raws = [r["raw"] for rid in summary["run_ids"]
                for r in load_from_archive(store, rid).records.rows]  # fmt: skip
    finally:
        store.close()
    started = [ev for ev in map(decode_event, raws) if ev.seq == 0]
    assert len(started) == len(summary["run_ids"])
    assert all(KEY_ATTRIBUTE in ev.attributes for ev in started)
    for ticket in _TICKETS:
        assert not any(ticket.encode() in r for r in raws), ticket
    one = summary["run_ids"][0]
    base = [sys.executable, "-m", "tracevault", "--prefix", demo_run.prefix, "replay",
            "--archive-url", demo_run.archive]  # fmt: skip
    env = {**os.environ, "TRACEVAULT_BOOTSTRAP_SERVERS": demo_run.bootstrap,
           "TRACEVAULT_KEY_PROVIDER": "none"}  # fmt: skip
    vkey = f"@{summary['log_vkey_file']}"
    agent = "support-agent-00=@.tracevault/agent.vkey"  # the first run is agent 00's
    for args, code in (
        (["verify", one, "--trusted-key", vkey, "--agent-key", agent], 0),
        # show verifies first (fails closed); verified, the content is what it cannot open
        (["show", one, "--json", "--trusted-key", vkey, "--agent-key", agent], 7),
    ):
        proc = subprocess.run([*base, *args], cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=120, check=False)  # fmt: skip
        assert proc.returncode == code, (args, proc.stdout[-800:], proc.stderr[-800:])
    keyed = {**env, "TRACEVAULT_KEY_PROVIDER": "keyring"}
    proc = subprocess.run([*base, "show", one, "--json", "--trusted-key", vkey,
                           "--agent-key", agent], cwd=cwd, env=keyed,
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-800:]
    assert any(t in proc.stdout for t in _TICKETS)


def test_the_index_of_the_demo_fleet_finds_what_the_archive_holds(demo_run: DemoRun) -> None:
    """Recorded through Kafka, sealed, archived by the real services, then indexed from the
    archive alone: search by agent, tool and status returns exactly the runs an independent
    read of each archived run gives, encrypted content stays out of the index, and every hit
    verifies with the demo's log key and agent vkeys (tracevault search --verify, the real
    CLI)."""
    store = open_store(demo_run.archive)
    try:
        report = rebuild(store)
        assert report.runs == len(demo_run.summary["run_ids"]) and not report.unreadable
        truth = {}
        for rid in demo_run.summary["run_ids"]:
            evs = metadata_only([decode_event(r["raw"]) for r in
                                 load_from_archive(store, rid).records.rows])  # fmt: skip
            last = evs[-1]
            truth[rid] = (
                evs[0].agent.agent_id,
                {json.loads(e.request)["tool"] for e in evs if e.kind.value == "TOOL_CALL"},
                "errored" if last.error is not None else "finished",
            )
        for agent in {a for a, _, _ in truth.values()}:
            got = {h.run_id for h in search(store, Filters(agent=agent)).hits}
            assert got == {r for r, (a, _, _) in truth.items() if a == agent}
        for tool in set().union(*(t for _, t, _ in truth.values())):
            got = {h.run_id for h in search(store, Filters(tool=tool)).hits}
            assert got == {r for r, (_, t, _) in truth.items() if tool in t}, tool
        for status in ("finished", "errored"):
            got = {h.run_id for h in search(store, Filters(status=status)).hits}
            assert got == {r for r, (_, _, s) in truth.items() if s == status}, status
        assert all(h.tenant for h in search(store, Filters()).hits)  # encrypted: tenant known
        index = load_index(store)
        blob = b"".join(store.get(k) for k in index.objects)
        for ticket in _TICKETS:  # no content in the index, in clear or otherwise
            assert ticket.encode() not in blob, ticket
    finally:
        store.close()
    # the demo's deployment trusts its own agent key for every agent id (its agent_vkeys)
    vkeys = demo_run.cwd / ".tracevault" / "agent_vkeys.json"
    env = {**os.environ, "TRACEVAULT_BOOTSTRAP_SERVERS": demo_run.bootstrap,
           "TRACEVAULT_AGENT_VKEYS": f"@{vkeys}"}  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-m", "tracevault", "--prefix", demo_run.prefix, "search", "--archive",
         demo_run.archive, "--verify", "--trusted-key", f"@{demo_run.summary['log_vkey_file']}",
         "--json"],
        cwd=demo_run.cwd, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert {h["verified"] for h in json.loads(proc.stdout)} == {"ok"}


def test_search_grep_opens_only_what_the_readers_keys_open(
    demo_run: DemoRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--grep matches content inside the encrypted demo runs with the demo's keyring, and
    without a key names every candidate 'not searchable (tenant X)' instead of guessing; the
    matched runs are exactly those whose opened content holds the pattern."""
    pattern = "chargeback requested"
    monkeypatch.chdir(demo_run.cwd)
    keyed = Settings(key_provider="keyring")
    store = open_store(demo_run.archive)
    try:
        rebuild(store)
        truth = set()
        for rid in demo_run.summary["run_ids"]:
            evs = [decode_event(r["raw"]) for r in load_from_archive(store, rid).records.rows]
            if any(pattern.encode() in e.request for e in open_run(keyed, evs)):
                truth.add(rid)
    finally:
        store.close()
    assert truth  # the demo's chargeback tickets
    base = [sys.executable, "-m", "tracevault", "--prefix", demo_run.prefix, "search",
            "--archive", demo_run.archive, "--grep", pattern, "--json"]  # fmt: skip
    for provider in ("keyring", "none"):
        env = {**os.environ, "TRACEVAULT_BOOTSTRAP_SERVERS": demo_run.bootstrap,
               "TRACEVAULT_KEY_PROVIDER": provider}  # fmt: skip
        proc = subprocess.run(base, cwd=demo_run.cwd, env=env, capture_output=True, text=True,
                              timeout=300, check=False)  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-2000:]
        out = json.loads(proc.stdout)
        if provider == "keyring":
            assert {h["run_id"] for h in out["hits"]} == truth
            assert not out["not_searchable"]
        else:
            assert out["hits"] == []
            closed = {c["run_id"] for c in out["not_searchable"]}
            assert closed == set(demo_run.summary["run_ids"])
            assert "not searchable (tenant " in proc.stderr
        assert pattern not in proc.stderr
