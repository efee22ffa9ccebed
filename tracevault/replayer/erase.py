"""``tracevault erase``: make a run's, a subject's or a tenant's content unreadable for good.

Erasure destroys keys, never evidence (docs/confidentiality.md, "Erasure: by destroying
keys, never evidence"). A run's wrapped data key lives in the run-key store, a mutable store
tracevault deletes from; RUN_STARTED, sealed and locked, carries only a reference. So:

- ``--run RUN``: that run's entry in the run-key store (every version of it): its data key
  is nowhere any more, and no other run is touched;
- ``--subject S``: the KEK of data subject S of the tenant, and the entries of its runs;
- ``--tenant T``: the tenant's KEK, every subject KEK under it, and all their entries.

Runs recorded by format 1 (the wrapped key inline in RUN_STARTED) go only with the KEK that
wraps them: ``--run`` of such a run under a subject destroys that subject's KEK (the output
says so), and under the tenant's own KEK is refused (exit 2, naming ``--tenant``).

``--run`` binds to evidence first (docs/confidentiality.md, "Erasure binds to a verified
run"): the run must verify as ``replay verify`` checks it (trusted log key, agent keys, fail
closed: ``unverified`` is refused, exit 1), and its wrapped data key must open under the very
key about to be destroyed (the subject's or the tenant's KEK, through the run-key store for
format 2): a run anyone wrote to ``raw`` naming another tenant's or subject's reference would
otherwise aim the erasure at them. Refused, nothing is destroyed.

The erasure is evidence too: an **erasure record**, a run of its own (agent ``tracevault-erase``,
recorded in clear, signed by the operator key: ``operator_key_file``, trusted by verify as
``operator_vkeys``; without the key ``erase`` refuses before destroying anything) naming
what was erased (tenant, subject reference, run, KEK ids, run-key entries, provider), when,
why (``--reason``) and by whom (``--by``), published to ``raw`` like any run, so the
sequencer seals it into the signed log and the archiver archives it.
Everything else still verifies, the erased runs' integrity included: chain, log and witnesses
cover the ciphertext, which stays.
"""

from __future__ import annotations

import getpass
import uuid
from datetime import UTC, datetime
from typing import Any

import click

from tracevault._clitools import echo_json, settings_from, stdout
from tracevault.config import Settings
from tracevault.content import (
    KeyProvider,
    RunKeyStore,
    WrappedKey,
    open_key_store,
    open_provider,
    wrapped_key_of,
)
from tracevault.errors import ChainError, ConfigError, ContentKeyError, LogError, NotFoundError
from tracevault.producer import Publisher, Recorder
from tracevault.replayer._cliopts import FROM, JSON, trust
from tracevault.replayer._records import LazyEvents
from tracevault.replayer._verified import verified_run
from tracevault.transparency import (
    ERASE_AGENT,
    Ed25519Signer,
    NoteSigner,
    load_operator_signer,
)

__all__ = ["ERASE_AGENT", "erase", "operator_signer"]


def _target(  # noqa: PLR0917 - the command's options
    ctx: click.Context,
    settings: Settings,
    provider: KeyProvider,
    run_id: str | None,
    subject: str | None,
    tenant: str | None,
    *,
    source: str,
) -> tuple[str, list[str | None], WrappedKey | None]:
    """(tenant, the subject references to erase (``[None]``: the tenant's own key), the
    run's key reference for --run). A subject goes by every reference its runs may carry:
    keyed under each of the tenant's subject secrets, and the old unkeyed one."""
    given = [n for n, v in (("--run", run_id), ("--subject", subject)) if v is not None]
    if len(given) > 1 or (not given and tenant is None):
        raise ConfigError("erase needs exactly one of --run RUN, --subject S or --tenant T")
    if run_id is not None:
        if tenant is not None:
            raise ConfigError("erase --run finds the run's tenant in its record: drop --tenant")
        wrapped = _verified_reference(ctx, settings, run_id, source)
        if wrapped is None:
            raise ConfigError(
                f"run {run_id} was recorded in clear (no key provider): there is no key whose "
                "destruction erases it"
            )
        if not wrapped.stored and wrapped.subject is None:
            raise ConfigError(
                f"run {run_id} was recorded by format 1: its wrapped data key is inside its "
                f"RUN_STARTED (sealed and locked), under the key of tenant {wrapped.tenant!r} "
                "itself, which every run of the tenant shares: it cannot be erased alone. "
                f"Erase the whole tenant with --tenant {wrapped.tenant}; runs recorded since "
                "keep their key in the run-key store and are erasable one by one"
            )
        return wrapped.tenant, [wrapped.subject], wrapped
    t = tenant or settings.tenant
    refs: list[str | None] = [None]
    if subject is not None:
        refs = list(provider.subject_refs(t, subject))
    return t, refs, None


def _verified_reference(
    ctx: click.Context, settings: Settings, run_id: str, source: str
) -> WrappedKey | None:
    """The key reference of ``run_id``'s RUN_STARTED, once the run verifies as ``replay
    verify`` checks it (the deployment's trusted log key and agent keys): an unverified run
    is refused (exit 1) before anything is destroyed, for its RUN_STARTED names the keys."""
    checks = trust(settings)
    if checks.policy is None:
        raise LogError(
            f"erase refused: run {run_id} is unverified (no trusted log key: set "
            "TRACEVAULT_LOG_VKEYS): its RUN_STARTED, which names the tenant and subject whose "
            "key would be destroyed, is not proven to be the record; nothing was erased",
            run=run_id,
        )
    meta = ctx.find_root().meta
    meta.setdefault("replay.archive_url", settings.archive_url)
    meta.setdefault("replay.s3_endpoint_url", settings.s3_endpoint_url)
    try:
        _, run, _ = verified_run(ctx, run_id, source, checks, doing="erases")
    except (ChainError, LogError) as exc:
        raise LogError(
            f"erase refused: run {run_id} does not verify ({exc}); nothing was erased", run=run_id
        ) from None
    return wrapped_key_of(LazyEvents([r["raw"] for r in run.records.rows[:1]]))


def _opens(provider: KeyProvider, store: RunKeyStore, run_id: str, wrapped: WrappedKey) -> None:
    """Refuse unless ``run_id``'s wrapped data key opens under the key ``erase`` destroys.

    A RUN_STARTED is only a claim about which tenant and subject a run belongs to: the proof is
    that the subject's (or tenant's) KEK unwraps the run's data key for this run. A format-2
    entry already erased is left to ``_destroy`` (nothing live: "already erased", exit 3).
    """
    who = f"run {run_id} ({wrapped.describe()})"
    try:
        if wrapped.stored:
            if store.is_erased(run_id, wrapped):
                return
            wrapped = store.get(run_id, wrapped)
        provider.unwrap(wrapped, run_id)
    except ContentKeyError as exc:
        raise ContentKeyError(
            f"erase refused: {who}: its wrapped data key does not open under the key it names, "
            f"so the run is not proven to belong to that tenant or subject ({exc}); nothing "
            "was erased"
        ) from None


def operator_signer(settings: Settings) -> NoteSigner:
    """The operator key that signs erasure records: ``operator_key_file`` (mode 0600), else
    ``operator_key``; ConfigError (exit 2, before anything is destroyed) when neither is set.

    Why: an unsigned erasure record is what anyone who can write ``raw`` can record, so
    verify treats one as forged (docs/confidentiality.md, "Erasure records are signed")."""
    if settings.operator_key_file:
        return load_operator_signer(settings.operator_key_file)
    text = "" if settings.operator_key is None else settings.operator_key.get_secret_value()
    if text.strip():
        return Ed25519Signer.from_skey(text)
    raise ConfigError(
        "erase signs its erasure record with the operator key: set TRACEVAULT_OPERATOR_KEY_FILE "
        "(`tracevault keys generate --type operator --name NAME --out operator.key`) and list "
        "its vkey in TRACEVAULT_OPERATOR_VKEYS where records are verified; nothing was erased"
    )


def _record(settings: Settings, erasure: dict[str, Any], signer: NoteSigner) -> str:
    """Publish the erasure record, signed by the operator key (in clear: it must be readable
    without any content key)."""
    clear = settings.model_copy(update={"key_provider": "none"})
    publisher = Publisher(clear)
    run_id = f"erasure-{uuid.uuid4()}"
    try:
        rec = Recorder(
            publisher=publisher,
            agent_id=ERASE_AGENT,
            agent_version="1",
            run_id=run_id,
            agent_key=signer,
        )
        rec.run(lambda e, _edges: {"erased": e["keys"] + e["entries"]}, erasure)
    finally:
        publisher.flush(30)
        report = publisher.close(timeout=30)
    if report.undelivered:
        stdout.print(
            f"[yellow]the erasure record {run_id} waits in the spool ({settings.spool_dir}) "
            "until Kafka takes it: `tracevault spool drain`[/]"
        )
    return run_id


def _destroy(
    provider: KeyProvider,
    store: RunKeyStore,
    target: tuple[str, list[str | None], WrappedKey | None],
    run_id: str | None,
    *,
    when: str,
    reason: str,
) -> tuple[list[str], list[str]]:
    """(KEK ids destroyed, run-key entries deleted); NotFoundError when nothing was live."""
    tenant, refs, wrapped = target
    keks: list[str] = []
    entries: list[str] = []
    for ref in refs:
        if wrapped is not None and wrapped.stored:  # one run: its entry, and nothing else
            entries += store.erase(tenant, ref, run_id, when=when, reason=reason)
        else:
            keks += provider.destroy(tenant, ref, when=when, reason=reason)
            entries += store.erase(tenant, ref, None, when=when, reason=reason)
    if not keks and not entries:
        who = f"tenant {tenant!r}" + ("" if refs[0] is None else f", subject ref {refs[0]}")
        if run_id is not None:
            who = f"run {run_id} ({who})"
        raise NotFoundError(
            f"no live key of {who} in provider {provider.name} or the run-key store "
            f"{store.where}: never created, or already erased; nothing was changed"
        )
    return keks, entries


@click.command("erase")
@click.option("--run", "run_id", metavar="RUN", help="Erase the run RUN alone.")
@click.option("--subject", metavar="S", help="Erase every run of data subject S.")
@click.option("--tenant", metavar="T", help="Erase the tenant T (or name the subject's tenant).")
@click.option("--reason", required=True, help="Why: kept in the erasure record and the key.")
@click.option("--by", default=None, help="Who asked for it [the user running this].")
@click.option("--archive-url", help="Find --run in this archive [env TRACEVAULT_ARCHIVE_URL].")
@click.option("--s3-endpoint-url", help="S3-compatible endpoint for s3:// archives.")
@FROM
@JSON
@click.pass_context
def erase(
    ctx: click.Context,
    *,
    run_id: str | None,
    subject: str | None,
    tenant: str | None,
    reason: str,
    by: str | None,
    archive_url: str | None,
    s3_endpoint_url: str | None,
    source: str,
    as_json: bool,
) -> None:
    """Destroy the keys that open a run's, a subject's or a tenant's content; record it.

    --run deletes that run's wrapped key from the run-key store (TRACEVAULT_RUN_KEY_STORE),
    every version of it; --subject and --tenant destroy their key-encryption keys in the
    provider (TRACEVAULT_KEY_PROVIDER) and delete their runs' entries too. The content
    stays, as ciphertext no key opens: every proof (chain, signed log, witnesses, bundles)
    still verifies. An erasure record naming what, when, why and by whom is sealed into the
    log as a run of its own (agent tracevault-erase).

    \b
    Example:
      tracevault erase --subject customer-42 --reason "GDPR Art. 17 request #1187"
      tracevault erase --run run-42 --reason "card number recorded by mistake"
    """
    if not reason.strip():
        raise ConfigError("erase --reason must say why")
    settings = settings_from(ctx, archive_url=archive_url, s3_endpoint_url=s3_endpoint_url)
    signer = operator_signer(settings)
    provider = open_provider(settings)
    if provider is None:
        raise ConfigError(
            "erase needs the key provider that holds the keys: set TRACEVAULT_KEY_PROVIDER"
        )
    target = _target(ctx, settings, provider, run_id, subject, tenant, source=source)
    tenant_of, refs, wrapped = target
    ref = refs[0]
    store = open_key_store(settings)
    if run_id is not None and wrapped is not None:
        _opens(provider, store, run_id, wrapped)
    when = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    keks, entries = _destroy(provider, store, target, run_id, when=when, reason=reason)
    erasure = {
        "tenant": tenant_of,
        "subject": ref,
        "run": run_id,
        "provider": provider.name,
        "keys": keks,
        "store": store.where,
        "entries": entries,
        "when": when,
        "reason": reason,
        "by": by or getpass.getuser(),
    }
    record = _record(settings, erasure, signer)
    if as_json:
        echo_json({**erasure, "record": record})
        return
    what = f"tenant {tenant_of!r}" + ("" if ref is None else f", subject ref {ref}")
    if run_id is not None and not keks:
        what = f"run {run_id} ({what})"
    stdout.print(
        f"[green]erased[/] {what} on {when}: {len(keks)} key(s) destroyed in {provider.name}, "
        f"{len(entries)} run key(s) deleted from {store.where}"
    )
    if run_id is not None and keks:
        stdout.print(
            f"{run_id} was recorded by format 1 (its key inline, under its subject's key): "
            "every run of that subject is unreadable now"
        )
    stdout.print(f"erasure record: run {record} (`tracevault replay verify {record}`)")
