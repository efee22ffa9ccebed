"""``tracevault archiver``: the long-running service that writes the archive.

The commands that operate on what it wrote (``tracevault archive ls/hold/release/purge/
retention-report``) live with the storage, in :mod:`tracevault.archive.commands`.
"""

from __future__ import annotations

import click

from tracevault._clitools import stderr
from tracevault.archive.commands import archive_option, store_from

__all__ = ["archiver"]


@click.command("archiver")
@archive_option
@click.option("--retention-days", type=int, help="Days every object is locked [183, minimum 183].")
@click.option(
    "--lock-mode", type=click.Choice(["COMPLIANCE", "GOVERNANCE"]), help="S3 Object Lock mode."
)
@click.option(
    "--trusted-key",
    "trusted_keys",
    multiple=True,
    metavar="VKEY|@FILE",
    help="The log's verifier key (repeatable) [env TRACEVAULT_LOG_VKEYS]. Required.",
)
@click.option("--segment-max-events", type=click.IntRange(1), help="Leaves per flush [10000].")
@click.option("--segment-max-bytes", type=click.IntRange(1024), help="Bytes per flush [64 MiB].")
@click.option(
    "--segment-max-age", type=click.FloatRange(min=0, min_open=True), help="Seconds [60]."
)
@click.option("--group-id", help="Consumer group [tracevault-archiver.<prefix>].")
@click.option("--instance-id", help="Static group member id: fast restarts (e.g. the host name).")
@click.option(
    "--until-idle",
    type=click.FloatRange(min=0),
    help="Exit after this many seconds without a message (backfills, batch jobs).",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65_535),
    help="Serve Prometheus counters on http://0.0.0.0:PORT/metrics and progress on /healthz "
    "(503 when stuck) [off].",
)
@click.pass_context
def archiver(
    ctx: click.Context,
    *,
    archive_url: str | None,
    s3_endpoint_url: str | None,
    retention_days: int | None,
    lock_mode: str | None,
    trusted_keys: tuple[str, ...],
    segment_max_events: int | None,
    segment_max_bytes: int | None,
    segment_max_age: float | None,
    group_id: str | None,
    instance_id: str | None,
    until_idle: float | None,
    metrics_port: int | None,
) -> None:
    """Archive what the signed log lists, as immutable, retained objects.

    Consumes <prefix>.sealed (read_committed), verifies every checkpoint record with the
    trusted log keys and writes each partition's log as C2SP tiles plus a small index per
    run (docs/log.md). A record no verified checkpoint lists is quarantined, never
    archived. Offsets are committed only after the objects are durably written; a kill at
    any moment loses nothing and archives nothing twice. SIGTERM or Ctrl-C flushes, exits.

    \b
    Examples:
      tracevault archiver --archive file:///var/lib/tv/archive \\
          --trusted-key @/etc/tracevault/log.vkey
      tracevault archiver --archive s3://audit-logs/tracevault \\
          --s3-endpoint-url http://minio:9000 --lock-mode COMPLIANCE
      TRACEVAULT_ARCHIVE_URL=s3://audit-logs/tv \\
          tracevault archiver --instance-id $(hostname)

    Exits 3 when Kafka or the object store does not answer (a supervisor may restart it)
    and 4 when the archive is inconsistent (restarting does not help: an operator must
    look); see `tracevault --help` for every code.
    """
    from tracevault.services.archiver._archiver import Archiver  # noqa: PLC0415 - Kafka import
    from tracevault.services.runtime import serve, stop_on_signals  # noqa: PLC0415

    extra = {"log_vkeys": ",".join(trusted_keys)} if trusted_keys else {}
    settings, store = store_from(
        ctx,
        create=True,  # the archiver writes: it makes its store
        **extra,
        archive_url=archive_url,
        s3_endpoint_url=s3_endpoint_url,
        retention_days=retention_days,
        lock_mode=lock_mode,
        archive_segment_max_events=segment_max_events,
        archive_segment_max_bytes=segment_max_bytes,
        archive_segment_max_age_s=segment_max_age,
        archive_group_id=group_id,
        archive_instance_id=instance_id,
        archive_metrics_port=metrics_port,
    )
    worker = Archiver(settings, store=store)
    # Handled before /healthz answers: a supervisor that saw it healthy may stop it at once.
    # SIGTERM/SIGINT: open segments are flushed; the process is gone within 10s.
    undo = stop_on_signals(worker.stop, "archiver")
    if settings.archive_metrics_port is not None:
        port = serve(settings.archive_metrics_port, worker.registry, worker.health)
        stderr.print(f"metrics on http://0.0.0.0:{port}/metrics, health on /healthz")
    stderr.print(f"archiving {settings.topics.sealed} to {store.url} (Ctrl-C to stop)")
    try:
        stats = worker.run(until_idle=until_idle)
    finally:
        undo()
    stderr.print(
        f"stopped: {stats.events_archived} events archived in {stats.segments_written} "
        f"flushes, {stats.runs_finished} runs finished, {stats.events_skipped} skipped, "
        f"{stats.events_quarantined} quarantined"
    )
