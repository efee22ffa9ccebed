"""``tracevault report``: runs as one HTML file that re-verifies itself in the browser."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import click

from tracevault._clitools import echo_json, settings_from, stderr, stdout
from tracevault.desk.evidence import Reveal, RunEvidence, gather
from tracevault.desk.report import render_report
from tracevault.errors import ConfigError
from tracevault.replayer import Trust
from tracevault.transparency import NoteVerifier

__all__ = ["AGENT_KEY", "OFFLINE", "report", "vkey_texts"]

#: ``replay verify``'s --agent-key, spelled as it is there (the desk verifies as it does).
AGENT_KEY = click.option(
    "--agent-key",
    "agent_key_pairs",
    multiple=True,
    metavar="AGENT_ID=VKEY",
    help="An agent key allowed to record as AGENT_ID (repeatable; adds to "
    "TRACEVAULT_AGENT_VKEYS): a run its agent did not write fails check I.",
)


#: ``replay verify``'s --offline, spelled as it is there.
OFFLINE = click.option(
    "--offline",
    is_flag=True,
    help="Accept an archive nothing proved current (the sealed topic not compared), "
    "knowingly. Without it such a run is UNVERIFIED: a rolled-back archive verifies by itself.",
)


@click.command("report")
@click.argument("run_ids", nargs=-1, required=True)
@click.option(
    "-o",
    "--output",
    "out",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="The HTML file to write.",
)
@click.option(
    "--reveal",
    default="none",
    show_default=True,
    metavar="all|none|SEQS",
    help="Whose payloads to show: all, none, or seqs like 3,5-7. The others are "
    "shown by SHA-256 and their raw bytes left out. An encrypted run opens only "
    "through this reader's key provider, else hashes.",
)
@click.option(
    "--from",
    "source",
    type=click.Choice(["topic", "archive"]),
    default="archive",
    show_default=True,
    help="Read the runs from the sealed topic or the archive.",
)
@click.option(
    "--archive-url",
    envvar="TRACEVAULT_ARCHIVE_URL",
    help="file://PATH or s3://BUCKET/PREFIX [env TRACEVAULT_ARCHIVE_URL].",
)
@click.option(
    "--s3-endpoint-url",
    envvar="TRACEVAULT_S3_ENDPOINT_URL",
    help="S3 endpoint for MinIO or another S3-compatible store.",
)
@click.option(
    "--trusted-key",
    "trusted_keys",
    multiple=True,
    metavar="VKEY|@FILE",
    help="A log key to trust (repeatable; adds to TRACEVAULT_LOG_VKEYS).",
)
@click.option(
    "--witness-key",
    "witness_keys",
    multiple=True,
    metavar="VKEY|@FILE",
    help="A witness key whose cosignature counts (repeatable).",
)
@click.option(
    "--min-witnesses",
    type=click.IntRange(0),
    help="Witness cosignatures required [1 with --witness-key].",
)
@AGENT_KEY
@click.option(
    "--witness-store",
    "witness_stores",
    multiple=True,
    metavar="URL",
    help="A witness's store to read its cosignatures from (repeatable) "
    "[env TRACEVAULT_WITNESS_STORES, comma-separated].",
)
@OFFLINE
@click.option(
    "--allow-unfinished", is_flag=True, help="Accept a run still in progress (no RUN_FINISHED yet)."
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def report(
    ctx: click.Context,
    /,
    run_ids: tuple[str, ...],
    out: Path,
    reveal: str,
    source: str,
    archive_url: str | None,
    s3_endpoint_url: str | None,
    trusted_keys: tuple[str, ...],
    witness_keys: tuple[str, ...],
    min_witnesses: int | None,
    agent_key_pairs: tuple[str, ...],
    witness_stores: tuple[str, ...],
    offline: bool,
    allow_unfinished: bool,
    as_json: bool,
) -> None:
    """Write RUN… as ONE self-contained HTML file that re-verifies itself when opened.

    Each run is verified first as `replay verify` does (freshness against the topic
    and the witness stores, signed log, chain, then provenance with --agent-key or
    TRACEVAULT_AGENT_VKEYS); the file holds its
    timeline, the payloads you reveal, that result, and the proofs themselves: raw
    events (revealed seqs), inclusion proofs, the signed checkpoint with its
    cosignatures, the trusted keys. Opened in a browser, with no network,
    it recomputes the chain, the inclusion proofs and the signatures with WebCrypto
    and says at the top, in words, which checks hold; one changed byte turns it red
    naming the seq.

    Fails closed: with no trusted log key, or no trusted agent vkey proving who
    wrote a run, the report is written saying UNVERIFIED at the top and the command
    exits 1; a run that fails verify is written with the failure at the top, exit 1.

    \b
    Examples:
      tracevault report run-42 -o run-42.html --trusted-key @log.vkey
      tracevault report run-42 run-43 -o incident.html --reveal 3,5-7
    """
    settings = settings_from(ctx, archive_url=archive_url, s3_endpoint_url=s3_endpoint_url)
    trust = Trust.of(
        settings,
        trusted_keys=trusted_keys,
        witness_keys=witness_keys,
        min_witnesses=min_witnesses,
        agent_key_pairs=agent_key_pairs,
        witness_stores=witness_stores,
        allow_unfinished=allow_unfinished,
        offline=offline,
    )
    policy = trust.policy
    wanted = Reveal.parse(reveal)
    if out.exists() and out.is_dir():
        raise ConfigError(f"-o {out}: is a directory; give the HTML file to write")
    runs = []
    for run_id in run_ids:
        with stderr.status(f"loading and verifying {run_id}…"):
            runs.append(
                gather(
                    settings,
                    run_id,
                    source=source,
                    trust=trust,
                    reveal=wanted,
                    proofs=True,
                )
            )
    page = render_report(
        runs,
        vkeys=vkey_texts(() if policy is None else policy.keys),
        witness_vkeys=vkey_texts(() if policy is None else policy.witnesses),
        min_witnesses=0 if policy is None else policy.min_witnesses,
    )
    out.write_text(page, encoding="utf-8")
    ok = all(r.verified for r in runs)
    _say(out, runs, len(page.encode()), as_json=as_json)
    if not ok:
        raise click.exceptions.Exit(1)


def vkey_texts(verifiers: Sequence[NoteVerifier]) -> list[str]:
    """The keys' text forms, once each (the env's and a flag's may name the same key)."""
    return list(dict.fromkeys(str(getattr(v, "vkey", "")) for v in verifiers if hasattr(v, "vkey")))


def _say(out: Path, runs: Sequence[RunEvidence], size: int, *, as_json: bool) -> None:
    if as_json:
        echo_json(
            {
                "report": str(out),
                "ok": all(r.verified for r in runs),
                "bytes": size,
                "runs": [
                    {"run_id": r.run_id, "status": r.status, "failure": r.failure, "why": r.why}
                    for r in runs
                ],
            }
        )
        return
    for r in runs:
        style = "green" if r.verified else "red bold"
        why = "" if r.failure is None else f": {r.failure}"
        if r.status == "unverified":
            why = f": {r.why}"
        stdout.print(f"[{style}]{r.status}[/] {r.run_id}{why}", soft_wrap=True)
    stdout.print(f"wrote {out} ({size} bytes)", soft_wrap=True)
