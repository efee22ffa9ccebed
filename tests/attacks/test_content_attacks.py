"""Attacks on encrypted content, through the real broker and sequencer (keyring provider).

The attacker can write a raw topic (a compromised agent host, or a Kafka admin: here, a plain
producer on another deployment's ``raw``), and holds a victim's recorded raw bytes. They do
not hold the tenant's KEK. What they try: move ciphertexts to another seq or field, or re-post
the victim's run (its key reference included, and a copy of its run-key store entry: they can
write that store too) under a run id of their own, so that a reader with the tenant's key
decrypts it somewhere it was not recorded. Every move must fail to decrypt,
naming run, seq and field (exit 7), and print none of the plaintext.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.content import agents
from tests.replayer.pipeline import fresh_settings, record_live, sequencer_running, wait_sealed
from tests.services.sequencer.support import produce_raw, read_all
from tracevault.cli import tracevault
from tracevault.config import Settings
from tracevault.schemas import EventKind, TraceEvent, decode_event, encode_event


def _keyed(settings: Settings, keyring: Path) -> Settings:
    return settings.model_copy(update={"key_provider": "keyring", "keyring_path": str(keyring)})


@pytest.fixture
def victim(kafka_bootstrap: str, tmp_path: Path) -> tuple[Settings, list[TraceEvent]]:
    """A run recorded with encryption; its raw events as the attacker holds them."""
    settings = _keyed(fresh_settings(kafka_bootstrap, tmp_path / "v", "tvvictim"), tmp_path / "kr")
    out = record_live(
        settings, agents.secret_agent, agents.INPUT, "victim-run", model=agents.model,
        tools=agents.TOOLS,
    )  # fmt: skip
    assert not isinstance(out, BaseException), out
    raw = read_all(settings, settings.topics.raw)
    events = [decode_event(r.value) for r in raw if r.value is not None]
    assert [e.seq for e in events] == list(range(7))
    return settings, events


def _post_and_show(
    victim_settings: Settings, events: list[TraceEvent], tmp_path: Path, stem: str
) -> Any:
    """Seal ``events`` in a deployment of the attacker's, then read them with the key."""
    settings = _keyed(
        fresh_settings(victim_settings.bootstrap_servers, tmp_path / stem, stem),
        Path(victim_settings.keyring_path),
    )
    run_id = events[0].run_id
    with sequencer_running(settings):
        produce_raw(settings, [(run_id, encode_event(e)) for e in events])
        wait_sealed(settings, run_id)
    env = {
        "TRACEVAULT_BOOTSTRAP_SERVERS": settings.bootstrap_servers,
        "TRACEVAULT_TOPIC_PREFIX": settings.topic_prefix,
        "TRACEVAULT_KEY_PROVIDER": "keyring",
        "TRACEVAULT_KEYRING_PATH": settings.keyring_path,
    }
    # --no-verify: the content layer is under attack here, so it must refuse on its own (with
    # verification, check I names the moved ciphertext first: tests/attacks/test_agent_identity)
    return CliRunner().invoke(
        tracevault, ["replay", "show", run_id, "--from", "topic", "--json", "--no-verify"], env=env
    )


def _assert_refused(res: Any, *named: str) -> None:
    assert res.exit_code == 7, res.output
    for word in named:
        assert word in res.output, res.output
    assert not any(s in res.output for s in agents.SECRETS), res.output


def test_a_request_moved_to_another_seq_does_not_decrypt(victim: Any, tmp_path: Path) -> None:
    settings, events = victim
    assert events[1].kind is events[4].kind is EventKind.TOOL_CALL
    moved = list(events)
    moved[4] = dataclasses.replace(events[4], request=events[1].request)
    res = _post_and_show(settings, moved, tmp_path, "tvmoveseq")
    _assert_refused(res, "victim-run", "seq 4", "$.request")


def test_a_response_moved_into_the_request_does_not_decrypt(victim: Any, tmp_path: Path) -> None:
    settings, events = victim
    moved = list(events)
    moved[2] = dataclasses.replace(events[2], request=events[2].response)
    res = _post_and_show(settings, moved, tmp_path, "tvmovefield")
    _assert_refused(res, "seq 2", "$.request")


def test_a_run_reposted_under_another_id_does_not_open(victim: Any, tmp_path: Path) -> None:
    # The key reference is copied along; the run-key store has no entry for the new id.
    settings, events = victim
    stolen = [dataclasses.replace(e, run_id="attacker-run") for e in events]
    res = _post_and_show(settings, stolen, tmp_path, "tvrepost")
    _assert_refused(res, "tenant 'default'", "keyring")


def test_the_untouched_run_opens_in_the_same_setup(victim: Any, tmp_path: Path) -> None:
    # The control: the same path with nothing moved decrypts, so the refusals above are the
    # moves' doing and not the harness's.
    settings, events = victim
    res = _post_and_show(settings, list(events), tmp_path, "tvcontrol")
    assert res.exit_code == 0, res.output
    assert agents.SECRETS[0] in res.output


def test_a_run_key_entry_copied_to_another_run_does_not_open(victim: Any, tmp_path: Path) -> None:
    # The attacker can also write the run-key store: the victim's entry is copied to the
    # reposted run's name, its run field rewritten to match. The wrapping itself is bound to
    # the victim's run id (the keyring's AAD), so the provider refuses it.
    settings, events = victim
    store = Path(settings.keyring_path).parent / "run-keys" / "default" / "-"
    entry = json.loads((store / "victim-run.json").read_bytes())
    entry["run"] = "attacker-run"
    copied = store / "attacker-run.json"
    copied.write_bytes(json.dumps(entry).encode())
    copied.chmod(0o600)
    stolen = [dataclasses.replace(e, run_id="attacker-run") for e in events]
    res = _post_and_show(settings, stolen, tmp_path, "tvcopykey")
    _assert_refused(res, "attacker-run", "another run")
