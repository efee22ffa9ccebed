"""``tracevault sequencer``: run the exactly-once sequencer as a long-running service."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

import click

from tracevault._clitools import settings_from, stderr
from tracevault.services.runtime import serve, stop_on_signals
from tracevault.services.sequencer._loop import Sequencer

__all__ = ["JsonLogFormatter", "sequencer"]

log = logging.getLogger(__name__)

_EXTRA_FIELDS = ("instance_id", "stats")


class JsonLogFormatter(logging.Formatter):
    """Log records as single-line JSON; the sequencer's periodic stats ride along as ``stats``."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in _EXTRA_FIELDS:
            if hasattr(record, name):
                doc[name] = getattr(record, name)
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc, sort_keys=True, default=str)


@click.command("sequencer")
@click.option(
    "--instance-id",
    help="Stable id of this instance: transactional id and static group member [host name]. "
    "Restart an instance with the same id; run others with different ids.",
)
@click.option(
    "--batch-size", type=click.IntRange(1, 100_000), help="Records per transaction [500]."
)
@click.option(
    "--batch-wait-ms", type=click.IntRange(1, 60_000), help="Longest wait for a batch to fill [50]."
)
@click.option(
    "--gap-timeout",
    "gap_timeout_s",
    type=click.FloatRange(min=0.001),
    help="Seconds a gap may stay open before its seqs are sealed as GAP markers [30].",
)
@click.option(
    "--max-gap",
    type=click.IntRange(min=1),
    help="Seqs this far past the head go to the DLQ [10000].",
)
@click.option(
    "--transaction-timeout-ms",
    type=click.IntRange(1_000, 900_000),
    help="Kafka transaction.timeout.ms [60000]; must not exceed the broker's maximum.",
)
@click.option(
    "--session-timeout-ms",
    type=click.IntRange(1_000, 1_800_000),
    help="Consumer group session timeout [10000].",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65_535),
    help="Serve Prometheus counters on http://0.0.0.0:PORT/metrics and progress on /healthz "
    "(503 when stuck) [off].",
)
@click.option(
    "--log-key-file",
    type=click.Path(dir_okay=False),
    help="File (mode 0600) with the log's private key that signs each transaction's "
    "checkpoints [TRACEVAULT_LOG_KEY_FILE, else TRACEVAULT_LOG_KEY]; create one with "
    "`tracevault keys generate`.",
)
@click.option(
    "--log-json",
    is_flag=True,
    help="One JSON object per log line (ts, level, logger, message, stats) for log shippers.",
)
@click.pass_context
def sequencer(ctx: click.Context, /, **options: Any) -> None:
    """Seal every raw event into its run's hash chain, exactly once.

    Consumes <prefix>.raw in the consumer group <prefix>.sequencer and, in one Kafka
    transaction per batch, writes <prefix>.sealed, <prefix>.heads (the run heads), <prefix>.dlq
    and the consumer offsets. Kill it at any moment: after a restart nothing is sealed twice or
    skipped. Several instances (distinct --instance-id) split the partitions.

    \b
    Per run, for an event with seq s when the run expects seq n:
      s == n      sealed (and any held events that now follow)
      s <  n      same bytes: dropped and counted;
                  different bytes: DLQ "conflict";
                  a seq sealed as a GAP marker: DLQ "late"
      s >  n      held until the gap fills; after --gap-timeout each missing seq
                  is sealed as a GAP event {"missing_from": a, "missing_to": b};
                  more than --max-gap past n: DLQ "out_of_range"
      after RUN_FINISHED: DLQ "after_finish"; unreadable: DLQ "undecodable";
      wrong key/partition, non-canonical JSON, producer-written GAP: DLQ "invalid"
      anything else one record raises: DLQ "internal" (an ALERT); it goes on
    DLQ records keep the original key and bytes; the reason and the source
    topic/partition/offset are in tracevault.* headers (docs/design.md,
    "Sequencer batch protocol").

    \b
    Examples:
      tracevault sequencer --instance-id seq-a --metrics-port 9464
      TRACEVAULT_TOPIC_PREFIX=prod tracevault -v sequencer --instance-id seq-b
      tracevault --prefix dev sequencer --gap-timeout 5 --batch-size 200

    Each transaction also signs, per sealed partition it wrote, a checkpoint of that
    partition's Merkle log with the log key (docs/log.md); without a key it does not start.

    Stops cleanly on SIGTERM or SIGINT (the current transaction finishes first). Exits 5 when
    fenced by another process with the same --instance-id, 3 when Kafka or a topic is missing,
    2 without a log key.
    """
    if options.pop("log_json"):
        for handler in logging.getLogger().handlers:
            handler.setFormatter(JsonLogFormatter())
    key_file = options.pop("log_key_file")
    # Every other option maps to the Settings field of the same name with a "sequencer_" prefix.
    settings = settings_from(
        ctx, log_key_file=key_file, **{f"sequencer_{k}": v for k, v in options.items()}
    )
    seq = Sequencer(settings)
    # Handled before /healthz answers: a supervisor that saw it healthy may stop it at once.
    # SIGTERM/SIGINT: the current transaction may finish; the process is gone within 10s.
    undo = stop_on_signals(seq.stop, f"sequencer {seq.instance_id}")
    if settings.sequencer_metrics_port is not None:
        port = serve(settings.sequencer_metrics_port, seq.metrics.registry, seq.health)
        stderr.print(f"metrics on http://0.0.0.0:{port}/metrics, health on /healthz")
    stderr.print(
        f"sequencer {seq.instance_id} on {settings.bootstrap_servers}, "
        f"topics {settings.topic_prefix}.*"
    )
    try:
        seq.run()
    finally:
        undo()
