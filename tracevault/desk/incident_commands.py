"""``tracevault incident``: a serious-incident package of runs, and its check."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from tracevault._clitools import echo_json, settings_from, stderr, stdout
from tracevault.archive import open_store
from tracevault.config import Settings
from tracevault.desk.commands import AGENT_KEY, OFFLINE, vkey_texts
from tracevault.desk.evidence import Reveal, RunEvidence, gather
from tracevault.desk.incident import PackageCheck, PackageWriter, verify_package
from tracevault.desk.report import render_report
from tracevault.errors import ConfigError, TraceVaultError
from tracevault.index import STATUSES, Filters, search
from tracevault.replayer import LogPolicy, Trust, export_bundle
from tracevault.replayer.erase import operator_signer
from tracevault.replayer.load.source import load_archived
from tracevault.transparency import load_verifiers, operator_verifiers

__all__ = ["incident"]

_DATE = click.DateTime(formats=["%Y-%m-%d", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M:%S%z"])


@click.group("incident")
def incident() -> None:
    """Package runs for a serious-incident report, and check a package.

    A package is a directory: a self-verifying HTML report and an evidence bundle per run,
    a crosswalk to EU AI Act Art. 12, 19, 26(6), 72, 73 and ISO/IEC 24970, and a
    manifest of every file's SHA-256 signed by the operator key (docs/desk.md).
    """


@incident.command("create")
@click.argument("run_ids", nargs=-1)
@click.option("-o", "--output", "out", required=True, type=click.Path(path_type=Path),
              help="The package directory to write (new or empty).")  # fmt: skip
@click.option("--agent", help="Also every run of this agent id the index finds.")
@click.option("--tool", help="Also every run that called this tool (index).")
@click.option("--status", type=click.Choice(STATUSES), help="Index filter: how the run stands.")
@click.option("--since", type=_DATE, help="Index filter: runs started at or after (UTC).")
@click.option("--until", type=_DATE, help="Index filter: runs started before (UTC).")
@click.option("--limit", type=click.IntRange(1), default=50, show_default=True,
              help="At most this many runs from the index.")  # fmt: skip
@click.option("--reveal", default="none", show_default=True, metavar="all|none|SEQS",
              help="Payloads the reports show (else their SHA-256), as in `report`.")  # fmt: skip
@click.option("--archive-url", envvar="TRACEVAULT_ARCHIVE_URL",
              help="file://PATH or s3://BUCKET/PREFIX [env TRACEVAULT_ARCHIVE_URL].")  # fmt: skip
@click.option("--trusted-key", "trusted_keys", multiple=True, metavar="VKEY|@FILE",
              help="A log key to trust (repeatable; adds to TRACEVAULT_LOG_VKEYS).")  # fmt: skip
@AGENT_KEY
@OFFLINE
@click.option("--allow-unfinished", is_flag=True, help="Accept runs still in progress.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def create(ctx: click.Context, /, run_ids: tuple[str, ...], out: Path, **opts: Any) -> None:
    """Package RUN… (and the runs the index filters find) into -o DIR, signed.

    Each run is verified as `replay verify` does; its report (`tracevault report`)
    is written either way, its bundle (`replay export`) only if it verifies. The
    manifest is signed with the operator key (TRACEVAULT_OPERATOR_KEY_FILE, as for
    `tracevault erase`). Exits 1 if any run did not verify (the package is still
    written, saying so per run).

    \b
    Examples:
      tracevault incident create run-42 run-43 -o incident-2026-12-02
      tracevault incident create --tool send_email --since 2026-12-01 -o inc-7
    """
    settings = settings_from(ctx, archive_url=opts["archive_url"])
    signer = operator_signer(settings)  # before anything is written: no key, no package
    trust = Trust.of(
        settings,
        trusted_keys=opts["trusted_keys"],
        agent_key_pairs=opts["agent_key_pairs"],
        allow_unfinished=opts["allow_unfinished"],
        offline=opts["offline"],
    )
    policy = trust.policy
    reveal = Reveal.parse(opts["reveal"])
    chosen, selection = _chosen(settings, run_ids, opts)
    writer = PackageWriter(out)
    verified = True
    for run_id in chosen:
        with stderr.status(f"verifying {run_id}…"):
            ev = gather(settings, run_id, source="archive", trust=trust, reveal=reveal,
                        proofs=True)  # fmt: skip
        verified = verified and ev.verified
        writer.add_run(_package_run(settings, writer, ev, policy))
    manifest = writer.seal(signer, selection)
    _say(out, manifest, as_json=opts["as_json"])
    if not verified:
        raise click.exceptions.Exit(1)


@incident.command("verify")
@click.argument("package", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--operator-vkey", "vkeys", multiple=True, metavar="VKEY|@FILE",
              help="An operator key to trust (repeatable; adds to "
                   "TRACEVAULT_OPERATOR_VKEYS).")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def verify(ctx: click.Context, /, package: Path, vkeys: tuple[str, ...], as_json: bool) -> None:
    """Check PACKAGE: the operator's signature, then every byte of every file.

    Fails closed: with no trusted operator vkey the result is `unverified`, exit 1; a
    changed, missing or added file is `failed`, exit 1, naming it. Each bundle is then
    checked on its own with `replay verify --bundle`, each report by opening it.

    \b
    Examples:
      tracevault incident verify inc-7 --operator-vkey @operator.vkey
    """
    settings = settings_from(ctx)
    trusted = [*operator_verifiers(settings.operator_vkeys), *load_verifiers(list(vkeys))]
    check = verify_package(package, trusted)
    _said(package, check, as_json=as_json)
    if not check.ok:
        raise click.exceptions.Exit(1)


def _chosen(
    settings: Settings, run_ids: tuple[str, ...], opts: dict[str, Any]
) -> tuple[list[str], dict[str, Any]]:
    """The runs named, then those the index finds with the filters given; how they were
    chosen, for the manifest (so the selection can be made again)."""
    given = {k: opts[k] for k in ("agent", "tool", "status", "since", "until") if opts[k]}
    for k in ("since", "until"):
        if k in given:
            when: datetime = given[k]
            given[k] = when.replace(tzinfo=UTC) if when.tzinfo is None else when
    found: list[str] = []
    if given:
        store = open_store(settings.archive_url, settings, create=False)
        try:
            hits = search(store, Filters.of(**given, limit=opts["limit"])).hits
        finally:
            store.close()
        found = [h.run_id for h in hits]
    chosen = list(dict.fromkeys([*run_ids, *found]))
    if not chosen:
        raise ConfigError("no run to package: name RUN ids or give index filters that find some")
    selection: dict[str, Any] = {"run_ids": list(run_ids)}
    if given:
        filters = {k: v.isoformat() if isinstance(v, datetime) else v for k, v in given.items()}
        selection["search"] = {**filters, "limit": opts["limit"], "found": found}
    return chosen, selection


def _package_run(
    settings: Settings, writer: PackageWriter, ev: RunEvidence, policy: LogPolicy | None
) -> dict[str, Any]:
    """Write ``ev``'s report and (if it verifies) its bundle; its entry of the manifest."""
    safe = ev.run_id.replace("/", "_")
    report = f"reports/{safe}.html"
    keys = () if policy is None else policy.keys
    writer.write(report, render_report([ev], vkeys=vkey_texts(keys)).encode())
    entry: dict[str, Any] = {"run_id": ev.run_id, "status": ev.status, "report": report,
                             "failure": ev.failure, "why": ev.why, "bundle": None}  # fmt: skip
    if not ev.verified:
        entry["bundle_skipped"] = "the run did not verify: its report shows why"
        return entry
    bundle = f"bundles/{safe}"
    store = open_store(settings.archive_url, settings, create=False)
    try:
        export_bundle(load_archived(store, ev.run_id), writer.root / bundle, store=store,
                      log=policy)  # fmt: skip
    except TraceVaultError as exc:
        entry["bundle_skipped"] = str(exc)
        return entry
    finally:
        store.close()
    entry["bundle"] = bundle
    return entry


def _say(out: Path, manifest: dict[str, Any], *, as_json: bool) -> None:
    if as_json:
        echo_json({"package": str(out), **{k: manifest[k] for k in ("runs", "signed_by")}})
        return
    for r in manifest["runs"]:
        style = "green" if r["status"] == "verified" else "red bold"
        stdout.print(f"[{style}]{r['status']}[/] {r['run_id']}", soft_wrap=True)
    files = len(manifest["files"])
    stdout.print(f"wrote {out}: {files} files, manifest signed by {manifest['signed_by']}")


def _said(package: Path, check: PackageCheck, *, as_json: bool) -> None:
    if as_json:
        echo_json({"package": str(package), **check.to_json()})
        return
    style = "green" if check.ok else "red bold"
    who = f" (signed by {check.signer})" if check.signer else ""
    stdout.print(f"[{style}]{check.status}[/] {package}{who}", soft_wrap=True)
    for p in check.problems:
        stdout.print(f"  {p}", soft_wrap=True, highlight=False)
