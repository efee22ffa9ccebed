"""``tracevault witness``: the witness service (``run``, on the service runtime), and beside it
``status`` and ``push`` from the witness's library (:mod:`tracevault.witness.commands`)."""

from __future__ import annotations

import threading
from datetime import timedelta

import click

from tracevault._clitools import settings_from, stderr
from tracevault.archive import open_store
from tracevault.config import Settings
from tracevault.errors import ConfigError
from tracevault.transparency import CosignatureSigner, load_witness_signer
from tracevault.witness.commands import LOG_VKEYS, STORE_HELP, log_keys, push, status, store_url_of

__all__ = ["witness"]


def _signer(settings: Settings) -> CosignatureSigner:
    if settings.witness_key_file:
        return load_witness_signer(settings.witness_key_file)
    if settings.witness_key is not None:
        return CosignatureSigner.from_skey(settings.witness_key.get_secret_value())
    raise ConfigError(
        "no witness key: pass --key-file (or set TRACEVAULT_WITNESS_KEY_FILE or "
        "TRACEVAULT_WITNESS_KEY); make one with `tracevault keys generate --type witness`"
    )


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def witness() -> None:
    """A witness: cosign each partition log's checkpoints, refuse forks.

    \b
    It follows the checkpoint records in <prefix>.sealed, checks each is
    signed by a trusted log key and extends the last checkpoint it
    cosigned (a consistency proof), cosigns it (C2SP cosignature/v1)
    and keeps the cosigned checkpoint in its own store. A fork (two
    roots for one size, or a failing proof) or a rollback is refused,
    logged as ALERT, counted and kept as a refusal record; an older
    checkpoint it never cosigned is only answered 409 (docs/log.md).

    \b
    Setup:
      tracevault keys generate --type witness --name w1.example \\
          --out witness.key
      export TRACEVAULT_LOG_VKEYS=<the sequencer's log vkey>
      tracevault witness run --key-file witness.key \\
          --store file:///var/lib/tracevault-witness
    A log can also push checkpoints with a consistency proof: add
    --listen-port PORT (C2SP tlog-witness POST /add-checkpoint).
    A witness we did not write (litewitness, any C2SP tlog-witness):
      tracevault witness push --archive URL --witness-url URL \\
          --witness-key VKEY --store URL
    Records gone from the topic before it read them (a gap) stall it
    until a later checkpoint proves consistency; --archive URL lets it
    read the missing nodes from the archive's tiles.
    Give verifiers the printed witness vkey:
      tracevault replay verify RUN --witness-key <vkey> --min-witnesses 1
    """


@witness.command()
@click.option(
    "--key-file",
    type=click.Path(dir_okay=False),
    help="Witness private key file, mode 0600 [env TRACEVAULT_WITNESS_KEY_FILE; "
    "or the key itself in TRACEVAULT_WITNESS_KEY].",
)
@click.option("--store", "store_url", metavar="URL", help=STORE_HELP)
@LOG_VKEYS
@click.option(
    "--metrics-port",
    type=int,
    metavar="PORT",
    help="Serve /metrics and /healthz here [env TRACEVAULT_WITNESS_METRICS_PORT].",
)
@click.option("--group-id", help="Kafka consumer group [default tracevault-witness.<prefix>].")
@click.option(
    "--listen-port",
    type=int,
    metavar="PORT",
    help="Also serve C2SP tlog-witness POST /add-checkpoint on this port [off].",
)
@click.option(
    "--archive",
    "archive_url",
    metavar="URL",
    help="Archive whose tiles prove consistency across a gap in the topic "
    "[env TRACEVAULT_WITNESS_ARCHIVE_URL; off].",
)
@click.option(
    "--follow/--no-follow",
    default=True,
    show_default=True,
    help="Follow <prefix>.sealed (--no-follow: only /add-checkpoint).",
)
@click.pass_context
def run(
    ctx: click.Context,
    key_file: str | None,
    store_url: str | None,
    log_vkeys: tuple[str, ...],
    metrics_port: int | None,
    group_id: str | None,
    listen_port: int | None,
    archive_url: str | None,
    follow: bool,
) -> None:
    """Follow the sealed topic and cosign its checkpoints (service).

    SIGTERM or Ctrl-C stops it within seconds; what was cosigned is stored.
    """
    from tracevault.services.runtime import Health, serve, stop_on_signals  # noqa: PLC0415
    from tracevault.services.witness._follower import WitnessFollower  # noqa: PLC0415 - Kafka
    from tracevault.witness import (  # noqa: PLC0415
        ArchiveTiles,
        Witness,
        deployment_origins,
        serve_add_checkpoint,
    )

    if not follow and listen_port is None:
        raise ConfigError("--no-follow needs --listen-port: the witness would do nothing")
    settings = settings_from(
        ctx,
        witness_key_file=key_file,
        witness_store_url=store_url,
        witness_metrics_port=metrics_port,
        witness_archive_url=archive_url,
    )
    keys = log_keys(settings, log_vkeys)
    signer = _signer(settings)
    store = open_store(store_url_of(settings), settings)
    w = Witness(
        store,
        signer,
        keys,
        retention=timedelta(days=settings.retention_days),
        origins=deployment_origins(settings.log_origin, settings.topic_prefix),
    )
    archive = None
    if settings.witness_archive_url:
        archive = ArchiveTiles(
            open_store(settings.witness_archive_url, settings), settings.topic_prefix
        )
    # Handled before /healthz answers: a supervisor that saw it healthy may stop it at once.
    serving = threading.Event()  # --no-follow: only the endpoint, no Kafka and no runtime
    follower = None
    if follow:
        follower = WitnessFollower(settings, w, group_id=group_id, archive=archive)
        health = follower.health
        undo = stop_on_signals(follower.stop, "witness")
    else:
        health = Health("witness", settings.health_stall_s)
        undo = stop_on_signals(serving.set, "witness")
    if settings.witness_metrics_port is not None:
        port = serve(settings.witness_metrics_port, w.metrics.registry, health)
        stderr.print(f"metrics on http://0.0.0.0:{port}/metrics, health on /healthz")
    if listen_port is not None:
        server = serve_add_checkpoint(w, listen_port)
        stderr.print(f"add-checkpoint on http://0.0.0.0:{server.server_port}/add-checkpoint")
    what = f"following {settings.topics.sealed}" if follow else "serving add-checkpoint"
    stderr.print(f"witness {signer.name} ({signer.verifier.vkey}) {what}, store {store.url}")
    try:
        if follower is not None:
            follower.run()
        else:
            health.state = "serving"
            while not serving.wait(1.0):
                health.progressed()
    finally:
        undo()
        store.close()
        if archive is not None:
            archive.store.close()


witness.add_command(status)
witness.add_command(push)
