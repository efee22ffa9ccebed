"""``tracevault sequencer``: help that teaches, metrics served over HTTP, clean SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path

from click.testing import CliRunner

from tests.kafka_harness import free_port
from tests.services.sequencer.support import produce_raw, raw_event, sealed_count, wait_until
from tracevault.cli import tracevault
from tracevault.config import Settings


def test_help_explains_the_rules_and_gives_examples() -> None:
    result = CliRunner().invoke(tracevault, ["sequencer", "--help"])
    assert result.exit_code == 0
    for text in ("GAP", "conflict", "after_finish", "--instance-id", "Examples", "SIGTERM"):
        assert text in result.output


def test_missing_topics_exit_3(kafka_bootstrap: str) -> None:
    result = CliRunner().invoke(
        tracevault,
        ["--bootstrap-servers", kafka_bootstrap, "--prefix", "no-such-prefix-x1", "sequencer"],
    )
    assert result.exit_code == 3
    assert "tracevault topics create" in result.output


def test_service_serves_metrics_and_stops_on_sigterm(
    seq_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    settings = seq_settings(partitions=1)
    port = free_port()
    log = tmp_path / "seq.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEVAULT_")}
    env["TRACEVAULT_LOG_KEY"] = os.environ["TRACEVAULT_LOG_KEY"]  # the session's log key
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable, "-m", "tracevault", "--bootstrap-servers",
                settings.bootstrap_servers, "--prefix", settings.topic_prefix,
                "-v", "sequencer", "--instance-id", "cli", "--metrics-port", str(port),
                "--log-json",
            ],
            stdout=out, stderr=out, env=env,
        )  # fmt: skip
    try:
        produce_raw(settings, [("m", raw_event("m", 0)), ("m", raw_event("m", 1, last=1))])
        wait_until(lambda: sealed_count(settings) == 2, timeout=60, what="2 sealed")

        def scraped() -> bool:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                    body = r.read().decode()
            except OSError:
                return False
            return (
                'tracevault_sequencer_sealed_total{instance_id="cli"} 2.0' in body
                and 'tracevault_sequencer_consumer_lag{instance_id="cli",partition="0"} 0.0' in body
            )

        wait_until(scraped, timeout=30, what="metrics to show 2 sealed events and no lag")
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    assert code == 0, log.read_text()
    lines = [json.loads(x) for x in log.read_text().splitlines() if x.startswith("{")]
    assert any(x["message"].startswith("sequencer cli started") for x in lines)
    stats = [x["stats"] for x in lines if "stats" in x]
    assert stats and "tracevault_sequencer_sealed_total" in stats[0]
