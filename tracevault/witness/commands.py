"""``tracevault witness status/push``: a look at what a witness cosigned and refused, and
cosignatures from a C2SP tlog-witness we did not write (litewitness).

No Kafka consumer here: the service itself (``tracevault witness run``) runs on the service
runtime and mounts these beside it (:mod:`tracevault.services.witness.commands`).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from urllib.parse import unquote

import click
from rich.table import Table

from tracevault._clitools import echo_json, settings_from, stderr, stdout
from tracevault.archive import open_store
from tracevault.config import Settings
from tracevault.errors import ConfigError
from tracevault.transparency import (
    Ed25519Verifier,
    load_verifiers,
    load_witness_verifiers,
)

__all__ = ["LOG_VKEYS", "STORE_HELP", "log_keys", "push", "status", "store_url_of"]

STORE_HELP = (
    "The witness's own store: file:///DIR or s3://BUCKET/PREFIX, not the archive "
    "[env TRACEVAULT_WITNESS_STORE_URL]."
)


LOG_VKEYS = click.option(
    "--log-vkey",
    "log_vkeys",
    metavar="VKEY",
    multiple=True,
    help="Trusted log vkey (repeat, or @FILE) [default TRACEVAULT_LOG_VKEYS].",
)


def log_keys(settings: Settings, log_vkeys: tuple[str, ...]) -> list[Ed25519Verifier]:
    """The trusted log vkeys (option, else settings); ``ConfigError`` when there are none."""
    keys = load_verifiers(log_vkeys or [k for k in settings.log_vkeys.split(",") if k.strip()])
    if not keys:
        raise ConfigError(
            "no trusted log key: pass --log-vkey or set TRACEVAULT_LOG_VKEYS to the "
            "sequencer's vkey (tracevault keys show <log key file>)"
        )
    return keys


def store_url_of(settings: Settings) -> str:
    """The witness's store URL; ``ConfigError`` when none is given."""
    if not settings.witness_store_url:
        raise ConfigError("no witness store: pass --store or set TRACEVAULT_WITNESS_STORE_URL")
    return settings.witness_store_url


@click.command()
@click.option("--store", "store_url", metavar="URL", help=STORE_HELP)
@click.option("--json", "as_json", is_flag=True, help="One JSON document for scripts.")
@click.pass_context
def status(ctx: click.Context, store_url: str | None, as_json: bool) -> None:
    """Each log's last cosigned size and its refusals, from the store."""
    settings = settings_from(ctx, witness_store_url=store_url)
    store_url = store_url_of(settings)
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


@click.command()
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
@LOG_VKEYS
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
    keys = log_keys(settings, log_vkeys)
    wkey = load_witness_verifiers([witness_key])[0]
    gen = sealed_generation(settings) if generation is None else generation
    tiles = ArchiveTiles(open_store(archive_url, settings), settings.topic_prefix)
    store = open_store(store_url_of(settings), settings)
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
