"""Erasing one run recorded under the tenant's own key, and one subject, with each provider.

Through the real pipeline: broker, sequencer, archiver on moto's S3 (Object Lock), keys in a
keyring file or moto's KMS over HTTP, each run's wrapped key in the run-key store (a
directory for the keyring, a versioned bucket without a lock for KMS).

Afterwards (docs/confidentiality.md, "Erasure: by destroying keys, never evidence"): no
tracevault store holds a usable key of the erased runs (the keyring file, the run-key store
in every version, KMS's key state, the four topics and every archived object are searched
for their wrapped and data keys), the erasure records verify and name what, when, why and
by whom, another run of the same tenant still opens, verifies and replays, the erased runs
still verify and ``show`` says "erased on DATE (REASON)". A run of format 1 (its key inline
in RUN_STARTED, under the tenant's key) still opens, and is refused for ``--run`` with a
message naming ``--tenant``.
"""

from __future__ import annotations

import base64
import dataclasses
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import pytest
from click.testing import CliRunner

from tests.conftest import unique_name
from tests.content import agents
from tests.content.stack import (
    archive_bytes,
    bucket_of,
    cli_env,
    kms_s3_settings,
    record_secret_run,
)
from tests.replayer.pipeline import sequencer_running, wait_sealed
from tests.replayer.recording import signed_raws
from tests.services.sequencer.support import produce_raw, read_all
from tracevault.cli import tracevault
from tracevault.config import Settings
from tracevault.content import (
    KEY_ATTRIBUTE,
    open_key_store,
    open_provider,
    wrapped_key_of,
)
from tracevault.errors import ContentKeyError
from tracevault.kafka import ensure_topics
from tracevault.schemas import EventKind, TraceEvent, decode_event
from tracevault.services.archiver import Archiver
from tracevault.transparency import ATTEST_ATTRIBUTE

AGENT = "tests.content.agents:secret_agent"
TENANT = "tenant-r"
SUBJECT = "dora@example.com"
RUN_REASON = "card number recorded by mistake"
SUBJECT_REASON = "GDPR Art. 17 request 2211"
GONE_TENANT, TENANT_REASON = "tenant-gone", "customer offboarded"


@dataclass(frozen=True)
class Erased:
    provider: str
    settings: Settings
    env: dict[str, str | None]
    runs: dict[str, str]
    #: run -> (wrapped key as the store held it, data key), taken before the erasure
    keys: dict[str, tuple[bytes, bytes]]
    records: dict[str, dict[str, Any]]
    endpoint: str


def _settings(kind: str, bootstrap: str, endpoint: str, base: Path) -> Settings:
    settings = kms_s3_settings(bootstrap, endpoint, base, "tv-erun", TENANT)
    if kind == "keyring":
        update = {
            "key_provider": "keyring",
            "keyring_path": str(base / "keys" / "keyring.json"),
            "run_key_store": str(base / "keys" / "run-keys"),
            "kms_endpoint_url": None,
        }
        settings = settings.model_copy(update=update)
    return settings


def _started(settings: Settings) -> dict[str, TraceEvent]:
    events = [decode_event(r.value) for r in read_all(settings, settings.topics.raw) if r.value]
    return {e.run_id: e for e in events if e.kind is EventKind.RUN_STARTED}


def _format_1_run(settings: Settings, run_id: str) -> None:
    """A run as the first encrypted format wrote it: the wrapped key inline in RUN_STARTED.

    Recorded on scratch topics, its RUN_STARTED given the inline form of its key (what the
    Recorder put there before the run-key store), then published to ``settings``' raw.
    """
    scratch = settings.model_copy(update={"topic_prefix": unique_name("tv-erun-v1")})
    ensure_topics(scratch)
    record_secret_run(scratch, run_id)
    events = [decode_event(r.value) for r in read_all(scratch, scratch.topics.raw) if r.value]
    ref = wrapped_key_of(events[:1])
    assert ref is not None and ref.stored
    inline = open_key_store(settings).get(run_id, ref).to_attribute()
    first = dataclasses.replace(events[0], attributes={**events[0].attributes,
                                                       KEY_ATTRIBUTE: inline})  # fmt: skip
    # its store entry goes: a format-1 run never had one, and must open from its record alone
    open_key_store(settings).erase(TENANT, None, run_id, when="-", reason="format 1")
    # signed again as the Recorder that wrote format 1 signed its own bytes (provenance is
    # required): the notes cover the inline key, not the bytes before the rewrite
    bare = [
        dataclasses.replace(
            e, attributes={k: v for k, v in e.attributes.items() if k != ATTEST_ATTRIBUTE}
        )
        for e in [first, *events[1:]]
    ]
    produce_raw(settings, [(run_id, raw) for raw in signed_raws(bare)])


def _cli(env: dict[str, str | None], *args: str) -> Any:
    res = CliRunner().invoke(tracevault, list(args), env=env, terminal_width=200)
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    return res


@pytest.fixture(scope="module", params=["keyring", "kms"])
def erased(
    request: pytest.FixtureRequest,
    kafka_bootstrap: str,
    s3_endpoint: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Erased]:
    kind = request.param
    settings = _settings(kind, kafka_bootstrap, s3_endpoint, tmp_path_factory.mktemp(kind))
    env = cli_env(settings)
    tag = unique_name("err")
    runs = {n: f"{tag}-{n}" for n in ("one", "other", "dora1", "dora2", "legacy", "gone")}
    with sequencer_running(settings):
        record_secret_run(settings, runs["one"])
        record_secret_run(settings, runs["other"])
        record_secret_run(settings, runs["dora1"], subject=SUBJECT)
        record_secret_run(settings, runs["dora2"], subject=SUBJECT)
        _format_1_run(settings, runs["legacy"])
        record_secret_run(settings, runs["gone"], tenant=GONE_TENANT)
        for rid in runs.values():
            wait_sealed(settings, rid)
        started = _started(settings)
        store, provider = open_key_store(settings), open_provider(settings)
        assert provider is not None
        keys = {}
        for n in ("one", "other", "dora1", "dora2", "gone"):
            ref = wrapped_key_of([started[runs[n]]])
            assert ref is not None and ref.stored and not ref.blob
            wrapped = store.get(runs[n], ref)
            keys[runs[n]] = (wrapped.blob, provider.unwrap(wrapped, runs[n]))
        Archiver(settings).run(until_idle=1.0)
        by_run = _cli(env, "erase", "--run", runs["one"], "--by", "dpo", "--reason",
                      RUN_REASON, "--json")  # fmt: skip
        assert by_run.exit_code == 0, by_run.output
        by_subject = _cli(env, "erase", "--subject", SUBJECT, "--by", "dpo", "--reason",
                          SUBJECT_REASON, "--json")  # fmt: skip
        assert by_subject.exit_code == 0, by_subject.output
        by_tenant = _cli(env, "erase", "--tenant", GONE_TENANT, "--by", "dpo", "--reason",
                         TENANT_REASON, "--json")  # fmt: skip
        assert by_tenant.exit_code == 0, by_tenant.output
        records = {"run": json.loads(by_run.output), "subject": json.loads(by_subject.output),
                   "tenant": json.loads(by_tenant.output)}  # fmt: skip
        for r in records.values():
            wait_sealed(settings, r["record"])
    Archiver(settings).run(until_idle=1.0)
    yield Erased(kind, settings, env, runs, keys, records, s3_endpoint)


def _subject_ref(e: Erased) -> str:
    """SUBJECT's reference: keyed under the tenant's subject secret, which the provider holds."""
    provider = open_provider(e.settings)
    assert provider is not None
    return provider.subject_ref(TENANT, SUBJECT)


def _every_store(e: Erased) -> bytes:
    """The bytes of every place tracevault keeps anything: the four topics, every version of
    every archived object, the run-key store (every version), the keyring file."""
    s = e.settings
    parts = [archive_bytes(e.endpoint, bucket_of(s))]
    for topic in (s.topics.raw, s.topics.sealed, s.topics.heads, s.topics.dlq):
        parts += [r.value or b"" for r in read_all(s, topic)]
    assert s.run_key_store is not None
    if e.provider == "keyring":
        parts.append(Path(s.keyring_path).read_bytes())
        parts += [p.read_bytes() for p in Path(s.run_key_store).rglob("*") if p.is_file()]
    else:
        parts.append(archive_bytes(e.endpoint, s.run_key_store.removeprefix("s3://").split("/")[0]))
    return b"\n".join(parts)


def _needles(wrapped: bytes, data_key: bytes) -> list[bytes]:
    return [wrapped, base64.b64encode(wrapped), data_key, base64.b64encode(data_key),
            data_key.hex().encode()]  # fmt: skip


def test_no_store_holds_a_usable_key_of_the_erased_runs(erased: Erased) -> None:
    everything = _every_store(erased)
    runs = erased.runs
    for n in ("one", "dora1", "dora2", "gone"):
        for needle in _needles(*erased.keys[runs[n]]):
            assert needle not in everything, (n, needle)
    # the search would have found them: the kept run's wrapped key is in the run-key store
    other_wrapped, other_key = erased.keys[runs["other"]]
    assert base64.b64encode(other_wrapped) in everything
    assert other_key not in everything  # a data key is never stored unwrapped
    # the provider's side: the subject's KEK is dead, the tenant's alive (the other run needs it)
    ref = _subject_ref(erased)
    if erased.provider == "kms":
        kms = boto3.client("kms", endpoint_url=erased.endpoint)
        dead = kms.describe_key(KeyId=f"alias/tracevault/{TENANT}/{ref}")["KeyMetadata"]
        assert dead["KeyState"] == "PendingDeletion" and not dead["Enabled"]
        assert [dead["KeyId"]] == erased.records["subject"]["keys"]
        live = kms.describe_key(KeyId=f"alias/tracevault/{TENANT}")["KeyMetadata"]
        assert live["KeyState"] == "Enabled"
        gone = kms.describe_key(KeyId=f"alias/tracevault/{GONE_TENANT}")["KeyMetadata"]
        assert gone["KeyState"] == "PendingDeletion"
    else:
        keks = json.loads(Path(erased.settings.keyring_path).read_bytes())["keks"]
        assert "key" not in keks[f"{TENANT}/{ref}"] and "key" in keks[f"{TENANT}/-"]
        assert [keks[f"{TENANT}/{ref}"]["id"]] == erased.records["subject"]["keys"]
        assert "key" not in keks[f"{GONE_TENANT}/-"]


def test_the_erasure_records_verify_and_name_what_when_why_who(erased: Erased) -> None:
    env = {**erased.env, "TRACEVAULT_KEY_PROVIDER": "none"}  # readable without any key
    runs, by_run, by_subject = erased.runs, erased.records["run"], erased.records["subject"]
    by_tenant = erased.records["tenant"]
    assert by_tenant["tenant"] == GONE_TENANT and len(by_tenant["keys"]) == 1
    assert by_tenant["entries"] == [f"{GONE_TENANT}/-/{runs['gone']}.json"]
    assert by_run["run"] == runs["one"] and by_run["keys"] == []
    assert by_run["entries"] == [f"{TENANT}/-/{runs['one']}.json"]
    ref = _subject_ref(erased)
    assert sorted(by_subject["entries"]) == sorted(
        f"{TENANT}/{ref}/{runs[n]}.json" for n in ("dora1", "dora2")
    )
    for record, reason in ((by_run, RUN_REASON), (by_subject, SUBJECT_REASON),
                           (by_tenant, TENANT_REASON)):  # fmt: skip
        assert record["by"] == "dpo" and record["reason"] == reason
        res = _cli(env, "replay", "verify", record["record"])
        assert res.exit_code == 0, res.output
        res = _cli(env, "replay", "show", record["record"], "--json")
        assert res.exit_code == 0, res.output
        text = json.dumps(json.loads(res.output.splitlines()[0]))
        for value in (reason, "dpo", record["tenant"], record["when"], *record["entries"],
                      *record["keys"]):  # fmt: skip
            assert value in text, value
        assert SUBJECT not in res.output  # the subject goes by its reference only


def test_another_run_of_the_tenant_opens_verifies_and_replays(erased: Erased) -> None:
    env, other = erased.env, erased.runs["other"]
    assert _cli(env, "replay", "verify", other).exit_code == 0
    res = _cli(env, "replay", "show", other, "--json")
    assert res.exit_code == 0 and agents.SECRETS[0] in res.output, res.output
    res = _cli(env, "replay", "run", other, "--agent", AGENT)
    assert res.exit_code == 0, res.output


def test_the_erased_runs_verify_and_show_says_erased_on_date(
    erased: Erased, tmp_path: Path
) -> None:
    env, today = erased.env, datetime.now(UTC).strftime("%Y-%m-%d")
    for n, reason in (("one", RUN_REASON), ("dora1", SUBJECT_REASON), ("dora2", SUBJECT_REASON)):
        rid = erased.runs[n]
        res = _cli(env, "replay", "verify", rid)
        assert res.exit_code == 0, res.output
        res = _cli(env, "replay", "show", rid)
        assert res.exit_code == 7, res.output
        assert f"erased on {today}" in res.output and f"({reason})" in res.output, res.output
        assert not any(s in res.output for s in agents.SECRETS)
        assert _cli(env, "replay", "run", rid, "--agent", AGENT).exit_code == 7
    gone = _cli({**env, "TRACEVAULT_TENANT": GONE_TENANT}, "replay", "show", erased.runs["gone"])
    assert gone.exit_code == 7 and f"({TENANT_REASON})" in gone.output, gone.output
    assert _cli(env, "replay", "verify", erased.runs["gone"]).exit_code == 0
    # a bundle of the erased run: ciphertext only, and it verifies
    out = tmp_path / "bundle"
    res = _cli(env, "replay", "export", erased.runs["one"], "-o", str(out))
    assert res.exit_code == 0, res.output
    assert _cli(env, "replay", "verify", "--bundle", str(out)).exit_code == 0
    with pytest.raises(ContentKeyError, match="erased on"):
        store = open_key_store(erased.settings)
        ref = wrapped_key_of([_started(erased.settings)[erased.runs["one"]]])
        assert ref is not None
        store.get(erased.runs["one"], ref)


def test_a_format_1_run_still_opens_and_goes_only_with_its_tenant(erased: Erased) -> None:
    env, legacy = erased.env, erased.runs["legacy"]
    res = _cli(env, "replay", "show", legacy, "--json")
    assert res.exit_code == 0 and agents.SECRETS[0] in res.output, res.output
    res = _cli(env, "erase", "--run", legacy, "--reason", "x")
    assert res.exit_code == 2, res.output
    assert "format 1" in res.output and f"--tenant {TENANT}" in res.output, res.output
    res = _cli(env, "erase", "--run", erased.runs["one"], "--reason", "again")
    assert res.exit_code == 3 and "already erased" in res.output, res.output
