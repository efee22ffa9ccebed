"""The processes the demo starts: a local broker (when none answers) and the two services.

The sequencer and archiver run as real subprocesses (``python -m tracevault ...``), exactly
as an operator would run them, so the demo exercises the same code paths as production and
shuts them down the same way: SIGTERM, then a bounded wait.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from confluent_kafka.admin import AdminClient

import tracevault
from tracevault.config import Settings
from tracevault.errors import ServiceUnavailableError

__all__ = ["LocalBroker", "Service", "broker_answers", "find_dev_kafka"]

log = logging.getLogger(__name__)
_LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")


def broker_answers(settings: Settings, timeout: float = 3.0) -> bool:
    try:
        md = AdminClient(settings.kafka_config(log_level=0)).list_topics(timeout=timeout)
    except Exception:
        return False
    return bool(md.brokers)


def find_dev_kafka() -> Path | None:
    """``dev/kafka`` of the checkout this package runs from (None when installed elsewhere)."""
    candidate = Path(tracevault.__file__).resolve().parents[1] / "dev" / "kafka"
    return candidate if candidate.is_file() else None


@dataclass
class LocalBroker:
    """The project's own broker, started by the demo and stopped by it again."""

    script: Path
    port: int

    @classmethod
    def for_settings(cls, settings: Settings) -> LocalBroker:
        host, _, port = settings.bootstrap_servers.split(",")[0].rpartition(":")
        if host not in _LOOPBACK or not port.isdigit():
            raise ServiceUnavailableError(
                f"no Kafka broker answers at {settings.bootstrap_servers}, and the demo only "
                "starts a local one on loopback; start your broker or point "
                "--bootstrap-servers at one that runs"
            )
        script = find_dev_kafka()
        if script is None:
            raise ServiceUnavailableError(
                f"no Kafka broker answers at {settings.bootstrap_servers} and dev/kafka is not "
                "here to start one (run the demo from a clone of the repository)"
            )
        return cls(script, int(port))

    def _run(self, *args: str) -> None:
        env = {**os.environ, "KAFKA_PORT": str(self.port), "PYTHON": sys.executable}
        proc = subprocess.run(
            [str(self.script), *args], env=env, capture_output=True, text=True, check=False
        )
        if proc.returncode != 0:
            raise ServiceUnavailableError(
                f"dev/kafka {' '.join(args)} failed (exit {proc.returncode}):\n{proc.stderr}"
            )

    def start(self) -> None:
        self._run("start")

    def stop(self) -> None:
        self._run("stop")


class Service:
    """One long-running tracevault command as a subprocess, its output in a log file."""

    def __init__(
        self, name: str, argv: list[str], log_path: Path, env: dict[str, str] | None = None
    ) -> None:
        self.name = name
        self.argv = argv
        self.log_path = log_path
        self.env = env  # added to this process's environment
        self._log: IO[bytes] | None = None
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tracevault", *self.argv],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **self.env} if self.env else None,
        )
        log.info("started %s (pid %s), log %s", self.name, self.proc.pid, self.log_path)

    def check_alive(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise ServiceUnavailableError(
                f"the {self.name} exited with code {self.proc.returncode}; see {self.log_path}"
                f"{self._tail()}"
            )

    def _tail(self, lines: int = 12) -> str:
        """The end of the service's log, so the error says why without opening the file."""
        try:
            text = self.log_path.read_text(errors="replace").rstrip().splitlines()
        except OSError:
            return ""
        return "".join(f"\n  | {line}" for line in text[-lines:])

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM (clean shutdown: the current transaction or segment finishes), then wait."""
        proc = self.proc
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                log.warning("%s ignored SIGTERM for %.0fs; killing it", self.name, timeout)
                proc.kill()
                proc.wait()
        if self._log is not None:
            self._log.close()
        return proc.returncode
