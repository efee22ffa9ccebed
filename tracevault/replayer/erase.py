"""``tracevault erase``: make a subject's, a run's or a tenant's content unreadable for good.

Erasure destroys keys, never evidence (docs/confidentiality.md, "Erasure: by destroying
keys, never evidence"). A run's wrapped data key is inside its RUN_STARTED, sealed into the
chain and locked in the archive; what can go is the key-encryption key that wraps it. So:

- ``--subject S``: the KEK of data subject S of the tenant: every run recorded with
  ``Recorder(subject=S)``;
- ``--run RUN``: the KEK that wraps that run, which must be a subject's (a run under the
  tenant's own KEK shares it with every run of the tenant, and is refused: use ``--tenant``);
  every run of that subject goes with it, and the output says so;
- ``--tenant T``: the tenant's KEK and every subject KEK under it.

The erasure is evidence too: an **erasure record**, a run of its own (agent ``tracevault-erase``,
recorded in clear) naming what was erased (tenant, subject reference, run, key ids,
provider), when, why (``--reason``) and by whom (``--by``), published to ``raw`` like any run,
so the sequencer seals it into the signed log and the archiver archives it. Everything else
still verifies, the erased runs' integrity included: chain, log and witnesses cover the
ciphertext, which stays.
"""

from __future__ import annotations

import getpass
import uuid
from datetime import UTC, datetime
from typing import Any

import click

from tracevault._clitools import echo_json, settings_from, stdout
from tracevault.config import Settings
from tracevault.content import KeyProvider, open_provider, subject_ref, wrapped_key_of
from tracevault.errors import ConfigError, NotFoundError
from tracevault.producer import Publisher, Recorder
from tracevault.replayer._cliopts import FROM, JSON
from tracevault.replayer._load import load_run
from tracevault.replayer._records import LazyEvents

__all__ = ["ERASE_AGENT", "erase"]

#: the agent_id of erasure records
ERASE_AGENT = "tracevault-erase"


def _target(
    settings: Settings, run_id: str | None, subject: str | None, tenant: str | None, source: str
) -> tuple[str, str | None]:
    """(tenant, subject reference or None) whose KEK the erasure destroys."""
    given = [n for n, v in (("--run", run_id), ("--subject", subject)) if v is not None]
    if len(given) > 1 or (not given and tenant is None):
        raise ConfigError("erase needs exactly one of --run RUN, --subject S or --tenant T")
    if run_id is not None:
        if tenant is not None:
            raise ConfigError("erase --run finds the run's tenant in its record: drop --tenant")
        run = load_run(settings, run_id, source="topic" if source == "topic" else "archive")
        wrapped = wrapped_key_of(LazyEvents([r["raw"] for r in run.records.rows[:1]]))
        if wrapped is None:
            raise ConfigError(
                f"run {run_id} was recorded in clear (no key provider): there is no key whose "
                "destruction erases it"
            )
        if wrapped.subject is None:
            raise ConfigError(
                f"run {run_id} is wrapped by the key of tenant {wrapped.tenant!r} itself, "
                "which every run of the tenant shares: it cannot be erased alone. Erase the "
                f"whole tenant with --tenant {wrapped.tenant}, or record what may need "
                "erasure with Recorder(subject=...)"
            )
        return wrapped.tenant, wrapped.subject
    t = tenant or settings.tenant
    return t, None if subject is None else subject_ref(t, subject)


def _record(settings: Settings, erasure: dict[str, Any]) -> str:
    """Publish the erasure record (in clear: it must be readable without any key)."""
    clear = settings.model_copy(update={"key_provider": "none"})
    publisher = Publisher(clear)
    run_id = f"erasure-{uuid.uuid4()}"
    try:
        rec = Recorder(publisher=publisher, agent_id=ERASE_AGENT, agent_version="1", run_id=run_id)
        rec.run(lambda erasure, _edges: {"erased": erasure["keys"]}, erasure)
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
    provider: KeyProvider, tenant: str, ref: str | None, when: str, reason: str
) -> list[str]:
    gone = provider.destroy(tenant, ref, when=when, reason=reason)
    if not gone:
        who = f"tenant {tenant!r}" + ("" if ref is None else f", subject ref {ref}")
        raise NotFoundError(
            f"no live key of {who} in provider {provider.name}: never created, or already "
            "erased; nothing was changed"
        )
    return gone


@click.command("erase")
@click.option("--run", "run_id", metavar="RUN", help="Erase the subject whose key wraps RUN.")
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
    """Destroy the key that opens a subject's, a run's or a tenant's content; record it.

    The content stays, as ciphertext no key opens: every proof (chain, signed log,
    witnesses, bundles) still verifies. An erasure record naming what, when, why and by
    whom is sealed into the log as a run of its own (agent tracevault-erase). Needs the key
    provider (TRACEVAULT_KEY_PROVIDER) that holds the keys.

    \b
    Example:
      tracevault erase --subject customer-42 --reason "GDPR Art. 17 request #1187"
      tracevault erase --run run-42 --reason "card number recorded by mistake"
    """
    if not reason.strip():
        raise ConfigError("erase --reason must say why")
    settings = settings_from(ctx, archive_url=archive_url, s3_endpoint_url=s3_endpoint_url)
    provider = open_provider(settings)
    if provider is None:
        raise ConfigError(
            "erase needs the key provider that holds the keys: set TRACEVAULT_KEY_PROVIDER"
        )
    tenant_of, ref = _target(settings, run_id, subject, tenant, source)
    when = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    gone = _destroy(provider, tenant_of, ref, when, reason)
    erasure = {
        "tenant": tenant_of,
        "subject": ref,
        "run": run_id,
        "provider": provider.name,
        "keys": gone,
        "when": when,
        "reason": reason,
        "by": by or getpass.getuser(),
    }
    record = _record(settings, erasure)
    if as_json:
        echo_json({**erasure, "record": record})
        return
    what = f"tenant {tenant_of!r}" + ("" if ref is None else f", subject ref {ref}")
    stdout.print(
        f"[green]erased[/] {what}: {len(gone)} key(s) destroyed in {provider.name} on {when}"
    )
    if run_id is not None:
        stdout.print(f"every run of that subject, {run_id} among them, is unreadable now")
    stdout.print(f"erasure record: run {record} (`tracevault replay verify {record}`)")
