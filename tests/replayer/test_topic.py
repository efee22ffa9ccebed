"""Loading runs from the sealed topic (a real broker): seek, verify, tamper corpus."""

from __future__ import annotations

import dataclasses
import json

import pytest

from tests.replayer import agents
from tests.replayer.conftest import recorded
from tests.replayer.recording import seal
from tests.replayer.topic_writer import publish
from tracevault.errors import ChainError, NotFoundError
from tracevault.kafka import partition_for
from tracevault.replayer import load_run, replay, verify

# These runs are sealed without the signed log: no session key is trusted here.
pytestmark = pytest.mark.usefixtures("only_keys_given_here")


@pytest.fixture(scope="module")
def settings(request):
    # one prefix for the module: each test uses its own run ids
    factory = request.getfixturevalue("settings_factory")
    return factory(partitions=3)


@pytest.fixture(scope="module")
def settings_factory(kafka_bootstrap, tmp_path_factory):
    import uuid

    from tracevault.config import Settings
    from tracevault.kafka import ensure_topics

    def make(partitions: int = 3) -> Settings:
        base = tmp_path_factory.mktemp("tv")
        s = Settings(
            bootstrap_servers=kafka_bootstrap, topic_prefix=f"tv-{uuid.uuid4().hex[:12]}",
            partitions=partitions, archive_url=f"file://{base / 'archive'}",
            spool_dir=str(base / "spool"),
        )  # fmt: skip
        ensure_topics(s)
        return s

    return make


def test_a_run_is_read_from_its_partition_and_replays(settings) -> None:
    other = seal(recorded("run-other"))  # interleaved in the same topic
    publish(settings, other)
    sealed = seal(recorded("run-topic-1"))
    head = publish(settings, sealed)
    assert head.partition == partition_for("run-topic-1", 3)
    run = load_run(settings, "run-topic-1", source="topic")
    assert run.objects[0] == f"{settings.topics.sealed}[{head.partition}]@{head.first_offset}"
    report = verify(run)
    assert report.finished and report.count == 11 and report.checks[-1].startswith("T1")
    assert replay(report.events, agents.research_agent).matched


def test_unknown_run_is_not_found(settings) -> None:
    with pytest.raises(NotFoundError) as info:
        load_run(settings, "run-nobody", source="topic")
    assert "run-nobody" in str(info.value) and info.value.exit_code == 3


def _tampered(settings, run_id, mutate):
    honest = seal(recorded(run_id))
    publish(settings, mutate(list(honest)), honest=honest)
    with pytest.raises(ChainError) as info:
        verify(load_run(settings, run_id, source="topic"))
    return info.value


def test_flipped_byte_on_the_topic(settings) -> None:
    def flip(s):
        raw = bytearray(s[4].raw)
        raw[-2] ^= 0x10
        s[4] = dataclasses.replace(s[4], raw=bytes(raw))
        return s

    err = _tampered(settings, "run-t-flip", flip)
    assert err.seq == 4 and "check 4 hash" in str(err) and settings.topics.sealed in err.obj


def test_deleted_event_on_the_topic(settings) -> None:
    err = _tampered(settings, "run-t-del", lambda s: [*s[:7], *s[8:]])
    assert err.seq == 7 and "seq 7 is missing" in str(err)


def test_deleted_last_event_is_caught_by_the_head(settings) -> None:
    err = _tampered(settings, "run-t-last", lambda s: s[:-1])
    assert err.seq == 10 and "T1 head" in str(err)


def test_swapped_events_on_the_topic(settings) -> None:
    err = _tampered(settings, "run-t-swap", lambda s: [*s[:2], s[3], s[2], *s[4:]])
    assert err.seq == 2 and "check 2 seq" in str(err)


def test_event_moved_in_from_another_run_on_the_topic(settings) -> None:
    other = seal(recorded("run-t-src"))
    err = _tampered(settings, "run-t-move", lambda s: [*s[:6], other[6], *s[7:]])
    assert err.seq == 6 and "run-t-src" in str(err)


def test_cli_show_and_verify_from_the_topic(settings) -> None:
    from click.testing import CliRunner

    from tracevault.cli import tracevault

    publish(settings, seal(recorded("run-topic-cli")))
    base = ["--bootstrap-servers", settings.bootstrap_servers, "--prefix", settings.topic_prefix]
    runner = CliRunner()
    args = [*base, "replay", "verify", "run-topic-cli", "--from", "topic", "--json"]
    res = runner.invoke(tracevault, args)  # no signed log here: no key can vouch for it
    assert res.exit_code == 1 and json.loads(res.output)["status"] == "unverified"
    res = runner.invoke(tracevault, [*args, "--no-log-check"])
    assert res.exit_code == 0, res.output
    checks = json.loads(res.output)["checks"]
    assert checks[-2].startswith("T1 head") and checks[-1].startswith("I identity")
    show = [*base, "replay", "show", "run-topic-cli", "--from", "topic", "--json"]
    res = runner.invoke(tracevault, show)  # shown as the record: verified first, unverified
    assert res.exit_code == 1 and json.loads(res.stdout)["status"] == "unverified", res.output
    res = runner.invoke(tracevault, [*show, "--no-verify"])  # as stored, knowingly
    assert res.exit_code == 0 and len(res.stdout.splitlines()) == 11
    agent = "tests.replayer.agents:extra_clock_agent"
    rerun = [*base, "replay", "run", "run-topic-cli", "--from", "topic", "--agent", agent]
    res = runner.invoke(tracevault, rerun)  # a re-run takes the run as the record: verified
    assert res.exit_code == 1 and "unverified: run run-topic-cli" in res.output, res.output
    res = runner.invoke(tracevault, [*rerun, "--no-verify"])
    assert res.exit_code == 1 and "diverged at seq 4" in res.output


def test_export_from_the_topic_carries_the_head(settings, tmp_path) -> None:
    from tracevault.replayer import export_bundle, verify_bundle

    publish(settings, seal(recorded("run-topic-export")))
    out = tmp_path / "bundle"
    export_bundle(load_run(settings, "run-topic-export", source="topic"), out)
    head = json.loads((out / "head.json").read_bytes())
    assert head["last_seq"] == 10 and head["finished"] is True
    report = verify_bundle(out)
    assert report.finished and any(c.startswith("T1 head") for c in report.checks)
    # a head edited to hide an event the sequencer sealed is caught offline too
    head["last_seq"] = 11
    (out / "head.json").write_text(json.dumps(head))
    with pytest.raises(ChainError):
        verify_bundle(out)
