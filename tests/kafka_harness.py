"""Real Kafka for the tests: find one, or start the project's own broker with dev/kafka.

Order (docs/design.md): ``KAFKA_BOOTSTRAP_SERVERS`` when set; else testcontainers' Kafka when a
Docker engine answers; else ``dev/kafka start``. When none can be had the tests fail: a test
that needs Kafka never skips.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka.admin import AdminClient

ROOT = Path(__file__).resolve().parents[1]
DEV_KAFKA = ROOT / "dev" / "kafka"


def broker_answers(bootstrap: str, timeout: float = 5.0) -> bool:
    try:
        md = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0}).list_topics(
            timeout=timeout
        )
    except Exception:
        return False
    return bool(md.brokers)


def docker_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        out = subprocess.run(
            ["docker", "info", "--format", "{{.ServerVersion}}"],
            capture_output=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class LocalBroker:
    """One dev/kafka broker on its own port, for tests that stop, kill or restart a broker.

    Fault tests use their own broker so they never take the shared one away from others.
    """

    port: int
    log: list[str] = field(default_factory=list)
    extra: dict[str, str] = field(default_factory=dict)  # broker settings beyond dev/kafka's

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["KAFKA_PORT"] = str(self.port)
        env["KAFKA_CONTROLLER_PORT"] = str(free_port())
        env["PYTHON"] = sys.executable
        if self.extra:
            env["KAFKA_EXTRA_PROPERTIES"] = "\n".join(f"{k}={v}" for k, v in self.extra.items())
        return env

    def _run(self, *args: str, timeout: float = 300) -> str:
        proc = subprocess.run(
            [str(DEV_KAFKA), *args],
            env=self._env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        self.log.append(proc.stderr)
        if proc.returncode != 0:
            raise RuntimeError(f"dev/kafka {' '.join(args)} failed:\n{proc.stderr}{proc.stdout}")
        return proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""

    def start(self, keep_data: bool = False) -> str:
        return self._run("start", *(["--keep-data"] if keep_data else []))

    def stop(self) -> None:
        self._run("stop")

    def kill(self) -> None:
        self._run("kill")

    def ensure_running(self) -> None:
        """Answering, whatever a test that failed half way left it as (stopped, or SIGSTOPped):
        a broker several tests share is brought back before each (a running one is left
        alone)."""
        with contextlib.suppress(Exception):
            os.kill(self.pid(), signal.SIGCONT)
        self.start(keep_data=True)

    def pid(self) -> int:
        """The broker's pid, from dev/kafka's pid file beside its log (to SIGSTOP it: a broker
        that hangs, and comes back at once, unlike a restarted JVM)."""
        log_file = Path(self._run("logs"))
        return int((log_file.parent / "broker.pid").read_text().strip())


def find_or_start_kafka() -> tuple[str, object | None]:
    """A bootstrap address of a real broker, and what to stop at the end (or None)."""
    env = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if env:
        if not broker_answers(env, timeout=20):
            raise RuntimeError(
                f"KAFKA_BOOTSTRAP_SERVERS={env} is set but no broker answers there; start it "
                "or unset the variable to let the tests start dev/kafka"
            )
        return env, None
    if docker_answers():
        from testcontainers.kafka import KafkaContainer

        container = KafkaContainer().with_kraft()
        container.start()
        return container.get_bootstrap_server(), container
    port = int(os.environ.get("KAFKA_PORT", "9092"))
    broker = LocalBroker(port)
    if broker_answers(broker.bootstrap, timeout=2):
        return broker.bootstrap, None  # started by .ci/run or by hand: not ours to stop
    bootstrap = broker.start()
    if not broker_answers(bootstrap, timeout=20):
        raise RuntimeError(f"dev/kafka started but {bootstrap} does not answer")
    return bootstrap, broker


def set_topic_config(bootstrap: str, topic: str, **conf: str) -> None:
    """Set topic configs (``retention_ms="1000"`` for ``retention.ms``), as an admin would."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    entries = [
        ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET)
        for k, v in conf.items()
    ]
    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.incremental_alter_configs([res]).values():
        f.result(30)
