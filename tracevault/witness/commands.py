"""``tracevault witness``: the witness service, and a look at what it cosigned and refused."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta
from urllib.parse import unquote

import click
from rich.table import Table

from tracevault._clitools import echo_json, settings_from, stderr, stdout
from tracevault.archive import open_store
from tracevault.config import Settings
from tracevault.errors import ConfigError
from tracevault.transparency import (
    CosignatureSigner,
    Ed25519Verifier,
    load_verifiers,
    load_witness_signer,
    load_witness_verifiers,
)

__all__ = ["witness"]

_STORE_HELP = (
    "The witness's own store: file:///DIR or s3://BUCKET/PREFIX, not the archive "
    "[env TRACEVAULT_WITNESS_STORE_URL]."
)


_LOG_VKEYS = click.option(
    "--log-vkey",
    "log_vkeys",
    metavar="VKEY",
    multiple=True,
    help="Trusted log vkey (repeat, or @FILE) [default TRACEVAULT_LOG_VKEYS].",
)


def _log_keys(settings: Settings, log_vkeys: tuple[str, ...]) -> list[Ed25519Verifier]:
    keys = load_verifiers(log_vkeys or [k for k in settings.log_vkeys.split(",") if k.strip()])
    if not keys:
        raise ConfigError(
            "no trusted log key: pass --log-vkey or set TRACEVAULT_LOG_VKEYS to the "
            "sequencer's vkey (tracevault keys show <log key file>)"
        )
    return keys


def _signer(settings: Settings) -> CosignatureSigner:
    if settings.witness_key_file:
        return load_witness_signer(settings.witness_key_file)
    if settings.witness_key is not None:
        return CosignatureSigner.from_skey(settings.witness_key.get_secret_value())
    raise ConfigError(
        "no witness key: pass --key-file (or set TRACEVAULT_WITNESS_KEY_FILE or "
        "TRACEVAULT_WITNESS_KEY); make one with `tracevault keys generate --type witness`"
    )


def _store_url(settings: Settings) -> str:
    if not settings.witness_store_url:
        raise ConfigError("no witness store: pass --store or set TRACEVAULT_WITNESS_STORE_URL")
    return settings.witness_store_url


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
@click.option("--store", "store_url", metavar="URL", help=_STORE_HELP)
@_LOG_VKEYS
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
    from tracevault.runtime.liveness import Health, serve, stop_on_signals  # noqa: PLC0415
    from tracevault.witness._archive import ArchiveTiles  # noqa: PLC0415
    from tracevault.witness._core import Witness, deployment_origins  # noqa: PLC0415
    from tracevault.witness._follow import WitnessFollower  # noqa: PLC0415 - Kafka import
    from tracevault.witness._http import serve_add_checkpoint  # noqa: PLC0415

    if not follow and listen_port is None:
        raise ConfigError("--no-follow needs --listen-port: the witness would do nothing")
    settings = settings_from(
        ctx,
        witness_key_file=key_file,
        witness_store_url=store_url,
        witness_metrics_port=metrics_port,
        witness_archive_url=archive_url,
    )
    keys = _log_keys(settings, log_vkeys)
    signer = _signer(settings)
    store = open_store(_store_url(settings), settings)
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
    follower = WitnessFollower(settings, w, group_id=group_id, archive=archive)
    health = Health("witness", settings.health_stall_s)
    # Handled before /healthz answers: a supervisor that saw it healthy may stop it at once.
    stop = threading.Event()
    undo = stop_on_signals(stop.set, "witness")
    if settings.witness_metrics_port is not None:
        port = serve(settings.witness_metrics_port, w.metrics.registry, health)
        stderr.print(f"metrics on http://0.0.0.0:{port}/metrics, health on /healthz")
    if listen_port is not None:
        server = serve_add_checkpoint(w, listen_port)
        stderr.print(f"add-checkpoint on http://0.0.0.0:{server.server_port}/add-checkpoint")
    what = f"following {settings.topics.sealed}" if follow else "serving add-checkpoint"
    stderr.print(f"witness {signer.name} ({signer.verifier.vkey}) {what}, store {store.url}")
    try:
        if follow:
            follower.run(stop, health)
        else:
            health.state = "serving"
            while not stop.wait(1.0):
                health.progressed()
    finally:
        undo()
        store.close()
        if archive is not None:
            archive.store.close()


@witness.command()
@click.option("--store", "store_url", metavar="URL", help=_STORE_HELP)
@click.option("--json", "as_json", is_flag=True, help="One JSON document for scripts.")
@click.pass_context
def status(ctx: click.Context, store_url: str | None, as_json: bool) -> None:
    """Each log's last cosigned size and its refusals, from the store."""
    settings = settings_from(ctx, witness_store_url=store_url)
    store_url = _store_url(settings)
    store = open_store(store_url, settings)
    logs: dict[str, dict[str, object]] = {}
    for obj in store.list("witness/"):
        _, quoted, kind, name = obj.key.split("/", 3)
        row = logs.setdefault(unquote(quoted), {"size": None, "refusals": []})
        if kind == "checkpoint":
            row["size"] = int(name)
        elif kind == "refusal":
            doc = json.loads(store.get(obj.key))
            refusals = row["refusals"]
            assert isinstance(refusals, list)
            refusals.append({"kind": doc["kind"], "time": doc["time"], "key": obj.key})
    store.close()
    if as_json:
        echo_json(logs)
        return
    table = Table(title=f"witness store {store_url}")
    table.add_column("log (origin)")
    table.add_column("cosigned size", justify="right")
    table.add_column("refusals")
    for origin, row in sorted(logs.items()):
        refusals = row["refusals"]
        assert isinstance(refusals, list)
        kinds = ", ".join(sorted({str(r["kind"]) for r in refusals})) or "-"
        table.add_row(origin, str(row["size"] or "-"), f"{len(refusals)} ({kinds})")
    stdout.print(table)


@witness.command()
@click.option("--archive", "archive_url", metavar="URL", required=True, help="The archive.")
@click.option(
    "--witness-url",
    metavar="URL",
    required=True,
    help="The witness's submission prefix (POST <URL>/add-checkpoint, C2SP tlog-witness).",
)
@click.option(
    "--witness-key", metavar="VKEY", required=True, help="The witness's vkey (cosignature/v1)."
)
@click.option(
    "--store",
    "store_url",
    metavar="URL",
    help="Where to keep its cosignatures for `replay verify --witness-store` "
    "[env TRACEVAULT_WITNESS_STORE_URL].",
)
@_LOG_VKEYS
@click.option(
    "--partition",
    "partitions",
    type=int,
    multiple=True,
    help="Partition to push (repeat) [all of the topic's].",
)
@click.option("--generation", help="The log's generation (docs/log.md) [the topic's now].")
@click.pass_context
def push(
    ctx: click.Context,
    archive_url: str,
    witness_url: str,
    witness_key: str,
    store_url: str | None,
    log_vkeys: tuple[str, ...],
    partitions: tuple[int, ...],
    generation: str | None,
) -> None:
    """Have a C2SP tlog-witness cosign each partition's newest archived checkpoint.

    \b
    For a witness that does not read the sealed topic (litewitness, any
    tlog-witness): the checkpoint goes to POST /add-checkpoint with a
    consistency proof from the witness's size, built from the archive's
    tiles; the cosigned checkpoint is written to --store, where
      tracevault replay verify RUN --witness-key VKEY --witness-store URL
    finds it. 403/404 from the witness: it does not know the log (exit 3).
    """
    from tracevault.archive.tlog import checkpoint_prefix, log_prefix  # noqa: PLC0415
    from tracevault.kafka import sealed_generation  # noqa: PLC0415 - Kafka import
    from tracevault.witness._archive import ArchiveTiles  # noqa: PLC0415
    from tracevault.witness._client import WitnessClient, push_archived  # noqa: PLC0415

    settings = settings_from(ctx, witness_store_url=store_url)
    keys = _log_keys(settings, log_vkeys)
    wkey = load_witness_verifiers([witness_key])[0]
    gen = sealed_generation(settings) if generation is None else generation
    tiles = ArchiveTiles(open_store(archive_url, settings), settings.topic_prefix)
    store = open_store(_store_url(settings), settings)
    client = WitnessClient(witness_url)
    until = datetime.now(UTC) + timedelta(days=settings.retention_days)
    try:
        for p in partitions or range(settings.partitions):
            log = log_prefix(settings.topic_prefix, p, gen)
            if not tiles.store.list(checkpoint_prefix(log)):
                stderr.print(f"partition {p}: nothing archived yet under {log}")
                continue
            note = push_archived(
                tiles, p, gen, client=client, witness_key=wkey, store=store,
                log_keys=keys, retain_until=until,
            )  # fmt: skip
            first = note.split("\n", 2)
            stderr.print(f"cosigned {first[0]}@{first[1]} by {wkey.name}")
    finally:
        store.close()
        tiles.store.close()
