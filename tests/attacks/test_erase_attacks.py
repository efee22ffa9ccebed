"""Aiming ``tracevault erase`` at someone else, and forging its records, through the real
broker and sequencer.

The attacker can write ``raw`` with no key at all (a compromised agent host), and reads the
clear metadata of genuine runs (the tenant and the subject reference of bob's runs are in
their RUN_STARTED). They record a run X whose RUN_STARTED names tenant A and bob's subject
reference, with a wrapped key of their own making, and wait for an operator to erase X: a
``--run`` of a run whose key is inline under a subject's KEK destroys that KEK. ``erase``
must open X's wrapped data key with the key it is about to destroy, refuse when it does not
(naming the run, the tenant/subject and why), destroy nothing, and bob's runs still open
(docs/confidentiality.md, "Erasure binds to a verified run"). Two defenses, each tested on
its own: a keyless writer's X fails verify (check I), so erase refuses before it opens a
key; an insider whose agent key the deployment trusts makes an X that verifies, and the
key binding refuses it.

The same attacker records an erasure record of their own: a keyless Recorder with
``agent_id="tracevault-erase"`` and ``run_id="erasure-<uuid>"`` naming another tenant's run.
It fails verify, naming it as forged, and the run it names still reads; the genuine record
``erase`` writes (signed by the operator key) verifies (docs/confidentiality.md, "Erasure
records are signed").
"""

from __future__ import annotations

import dataclasses
import json
import secrets
import uuid
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.content import agents
from tests.replayer.pipeline import fresh_settings, record_live, sequencer_running, wait_sealed
from tests.replayer.recording import signed_raws
from tests.services.sequencer.support import produce_raw, read_all
from tracevault.cli import tracevault
from tracevault.config import Settings
from tracevault.content import KEY_ATTRIBUTE, WrappedKey, wrapped_key_of
from tracevault.producer import Publisher, Recorder
from tracevault.schemas import EventKind, TraceEvent, decode_event, encode_event
from tracevault.transparency import ATTEST_ATTRIBUTE, ERASE_AGENT, Ed25519Signer

TENANT = "tenant-a"
BOB = "bob@example.com"


@dataclasses.dataclass(frozen=True)
class Deployment:
    settings: Settings
    env: dict[str, str | None]
    #: bob's genuine runs, recorded under his subject key
    bob: tuple[str, str]
    #: bob's genuine RUN_STARTED reference, as anyone reading raw sees it
    ref: WrappedKey
    events: list[TraceEvent]


@pytest.fixture(scope="module")
def deployment(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Deployment:
    base = tmp_path_factory.mktemp("erase-aim")
    settings = fresh_settings(kafka_bootstrap, base, "tverase").model_copy(
        update={
            "key_provider": "keyring",
            "keyring_path": str(base / "keys" / "keyring.json"),
            "tenant": TENANT,
        }
    )
    bob = ("bob-run-1", "bob-run-2")
    with sequencer_running(settings):
        for rid in bob:
            out = record_live(
                settings, agents.secret_agent, agents.INPUT, rid, model=agents.model,
                tools=agents.TOOLS, subject=BOB,
            )  # fmt: skip
            assert not isinstance(out, BaseException), out
            wait_sealed(settings, rid)
    events = [decode_event(r.value) for r in read_all(settings, settings.topics.raw) if r.value]
    mine = [e for e in events if e.run_id == bob[0]]
    ref = wrapped_key_of(mine[:1])
    assert ref is not None and ref.subject is not None and ref.tenant == TENANT
    env: dict[str, str | None] = {
        "TRACEVAULT_BOOTSTRAP_SERVERS": settings.bootstrap_servers,
        "TRACEVAULT_TOPIC_PREFIX": settings.topic_prefix,
        "TRACEVAULT_ARCHIVE_URL": settings.archive_url,
        "TRACEVAULT_SPOOL_DIR": settings.spool_dir,
        "TRACEVAULT_KEY_PROVIDER": "keyring",
        "TRACEVAULT_KEYRING_PATH": settings.keyring_path,
        "TRACEVAULT_TENANT": TENANT,
    }
    return Deployment(settings, env, bob, ref, mine)


def _cli(env: dict[str, str | None], *args: str) -> Any:
    return CliRunner().invoke(tracevault, list(args), env=env, terminal_width=200)


def _forge(d: Deployment, run_id: str, attribute: str, *, insider: bool = True) -> None:
    """Bob's run re-posted as ``run_id``, its key attribute replaced. ``insider``: by an
    agent host holding a genuine agent key the deployment trusts, its notes signed afresh
    for ``run_id`` (so the run verifies and only erase's key binding stands in the way);
    else by a keyless raw writer, bob's notes (signed for bob's run) left as they were."""
    first = d.events[0]
    assert first.kind is EventKind.RUN_STARTED
    forged = [dataclasses.replace(e, run_id=run_id) for e in d.events]
    forged[0] = dataclasses.replace(
        forged[0], attributes={**first.attributes, KEY_ATTRIBUTE: attribute}
    )
    if insider:
        forged = [
            dataclasses.replace(
                e, attributes={k: v for k, v in e.attributes.items() if k != ATTEST_ATTRIBUTE}
            )
            for e in forged
        ]
        raws = signed_raws(forged)  # the session's agent key, trusted for every agent_id
    else:
        raws = [encode_event(e) for e in forged]
    with sequencer_running(d.settings):
        produce_raw(d.settings, [(run_id, r) for r in raws])
        wait_sealed(d.settings, run_id)


def _keyring(d: Deployment) -> dict[str, Any]:
    return dict(json.loads(Path(d.settings.keyring_path).read_bytes())["keks"])


def _bob_still_opens(d: Deployment) -> None:
    for rid in d.bob:
        res = _cli(d.env, "replay", "show", rid, "--from", "topic", "--json")
        assert res.exit_code == 0, res.output
        assert agents.SECRETS[0] in res.output


def _refused(d: Deployment, run_id: str, *named: str) -> None:
    before = _keyring(d)
    res = _cli(d.env, "erase", "--run", run_id, "--from", "topic", "--reason", "GDPR")
    assert res.exit_code != 0, res.output
    for word in ("erase refused", run_id, *named):
        assert word in res.output, (word, res.output)
    assert _keyring(d) == before  # nothing destroyed
    _bob_still_opens(d)


def test_a_run_naming_bobs_subject_with_a_key_of_its_own_is_not_erased(d: Deployment) -> None:
    # Format 1: the wrapped key inline, under bob's subject KEK (its id is in his reference):
    # on main, erase --run destroyed bob's KEK and every run of bob read "erased".
    aimed = dataclasses.replace(d.ref, blob=secrets.token_bytes(60), stored=False)
    _forge(d, "aimed-inline", aimed.to_attribute())
    _refused(d, "aimed-inline", f"tenant {TENANT!r}", f"subject ref {d.ref.subject}",
             "does not open")  # fmt: skip


def test_a_run_naming_bobs_subject_by_reference_is_not_erased(d: Deployment) -> None:
    # Format 2: a reference to a run-key entry that the attacker never had.
    _forge(d, "aimed-ref", d.ref.to_reference())
    _refused(d, "aimed-ref", f"subject ref {d.ref.subject}", "holds no key")


def test_a_keyless_forgery_naming_bobs_subject_is_refused_at_verify(d: Deployment) -> None:
    # The keyless raw writer: bob's notes vouch for bob's run, not this one, so erase
    # refuses at verify (check I) before it opens any key.
    aimed = dataclasses.replace(d.ref, blob=secrets.token_bytes(60), stored=False)
    _forge(d, "aimed-keyless", aimed.to_attribute(), insider=False)
    _refused(d, "aimed-keyless", "does not verify", "check I identity")
    res = _cli(d.env, "replay", "verify", "aimed-keyless", "--from", "topic")
    assert res.exit_code == 1 and "check I identity" in res.output, res.output


def test_an_unverified_run_is_not_erased(d: Deployment) -> None:
    # No trusted log key: the run's RUN_STARTED is not proven to be the record.
    env = {**d.env, "TRACEVAULT_LOG_VKEYS": ""}
    res = _cli(env, "erase", "--run", d.bob[0], "--from", "topic", "--reason", "GDPR")
    assert res.exit_code == 1, res.output
    assert "erase refused" in res.output and "unverified" in res.output, res.output
    _bob_still_opens(d)


def test_bobs_genuine_run_is_erased_and_only_it(d: Deployment) -> None:
    # The control: the same command on a genuine run of bob's verifies, opens and erases it.
    res = _cli(d.env, "erase", "--run", d.bob[1], "--from", "topic", "--reason", "GDPR")
    assert res.exit_code == 0, res.output
    res = _cli(d.env, "replay", "show", d.bob[1], "--from", "topic")
    assert res.exit_code == 7 and "erased on" in res.output, res.output
    res = _cli(d.env, "replay", "show", d.bob[0], "--from", "topic", "--json")
    assert res.exit_code == 0 and agents.SECRETS[0] in res.output, res.output


@pytest.fixture
def d(deployment: Deployment) -> Deployment:
    return deployment


def _forged_record(settings: Settings, names: str, key: Ed25519Signer | None) -> str:
    """An erasure record as ``erase`` writes one, by a Recorder of the attacker's."""
    # no agent key of the deployment's either: ``key`` None is a truly unsigned record
    clear = settings.model_copy(
        update={"key_provider": "none", "agent_key": None, "agent_key_file": None}
    )
    run_id = f"erasure-{uuid.uuid4()}"
    publisher = Publisher(clear)
    try:
        rec = Recorder(publisher=publisher, agent_id=ERASE_AGENT, agent_version="1",
                       run_id=run_id, agent_key=key)  # fmt: skip
        erasure = {"tenant": "tenant-b", "subject": None, "run": names, "keys": [],
                   "entries": [f"tenant-b/-/{names}.json"], "by": "dpo"}  # fmt: skip
        rec.run(lambda e, _edges: {"erased": e["entries"]}, erasure)
    finally:
        assert publisher.flush(30)
        publisher.close()
    return run_id


def test_a_forged_erasure_record_fails_verify_and_the_genuine_one_verifies(
    d: Deployment, tmp_path: Path
) -> None:
    with sequencer_running(d.settings):
        unsigned = _forged_record(d.settings, d.bob[0], None)
        # signed too, by a key the deployment does not trust as an operator's
        stranger = _forged_record(d.settings, d.bob[0], Ed25519Signer.generate("evil.example"))
        wait_sealed(d.settings, unsigned)
        wait_sealed(d.settings, stranger)
        # readers ignore them: the run they name still reads
        res = _cli(d.env, "replay", "show", d.bob[0], "--from", "topic", "--json")
        assert res.exit_code == 0 and agents.SECRETS[0] in res.output, res.output
        genuine = _cli(d.env, "erase", "--run", d.bob[0], "--from", "topic", "--reason", "x",
                       "--json")  # fmt: skip
        assert genuine.exit_code == 0, genuine.output
        record = json.loads(genuine.output)["record"]
        for rid in (unsigned, stranger, record):
            wait_sealed(d.settings, rid)
    for rid, why in ((unsigned, "carries no operator signature"),
                     (stranger, "not signed by a trusted operator key")):  # fmt: skip
        res = _cli(d.env, "replay", "verify", rid, "--from", "topic")
        assert res.exit_code == 1, res.output
        assert f"erasure record {rid}" in res.output and "forged" in res.output, res.output
        assert why in res.output, res.output
    res = _cli(d.env, "replay", "verify", record, "--from", "topic")
    assert res.exit_code == 0, res.output
    assert "erasure record is signed by a trusted operator key" in res.output, res.output
    # without the operator's vkey the genuine record cannot be checked: unverified, exit 1
    res = _cli({**d.env, "TRACEVAULT_OPERATOR_VKEYS": ""}, "replay", "verify", record,
               "--from", "topic")  # fmt: skip
    assert res.exit_code == 1 and "unverified" in res.output, res.output
    # and without the operator's key, erase refuses before destroying anything
    before = _keyring(d)
    res = _cli({**d.env, "TRACEVAULT_OPERATOR_KEY": ""}, "erase", "--subject", BOB,
               "--reason", "x")  # fmt: skip
    assert res.exit_code == 2 and "TRACEVAULT_OPERATOR_KEY_FILE" in res.output, res.output
    assert _keyring(d) == before
