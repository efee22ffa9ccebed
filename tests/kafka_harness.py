"""Real Kafka for the tests: find one, or start the project's own broker with dev/kafka.

Order (docs/design.md): ``KAFKA_BOOTSTRAP_SERVERS`` when set; else testcontainers' Kafka when a
Docker engine answers; else ``dev/kafka start``. When none can be had the tests fail: a test
that needs Kafka never skips.
"""

from __future__ import annotations

import contextlib
import os
import re
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


def dev_kafka(args: tuple[str, ...], env: dict[str, str], log: list[str], timeout: float) -> str:
    """Run ``dev/kafka args`` and return its stdout (stripped); its stderr goes to ``log``."""
    proc = subprocess.run(
        [str(DEV_KAFKA), *args], env=env, capture_output=True, text=True, timeout=timeout,
        check=False,
    )  # fmt: skip
    log.append(proc.stderr)
    if proc.returncode != 0:
        raise RuntimeError(f"dev/kafka {' '.join(args)} failed:\n{proc.stderr}{proc.stdout}")
    return proc.stdout.strip()


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
        out = dev_kafka(args, self._env(), self.log, timeout)
        return out.splitlines()[-1] if out else ""

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


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode`` (a signed 32-bit int over UTF-16 code units): how Kafka
    places a transactional id on a ``__transaction_state`` partition."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i : i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def transaction_state_partition(transactional_id: str, partitions: int) -> int:
    """The ``__transaction_state`` partition of a transactional id (Kafka's
    ``TransactionStateManager.partitionFor``: ``Utils.abs(hashCode) % partitions``, where
    ``Utils.abs(Integer.MIN_VALUE)`` is 0)."""
    h = java_string_hash(transactional_id)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


@dataclass
class LocalCluster:
    """dev/kafka's three-node KRaft cluster (``dev/kafka cluster``) on free ports, for fault
    tests that SIGKILL one node: RF 3, ``min.insync.replicas=2``, the transaction state log
    RF 3 / min ISR 2 (dev/kafka-broker/cluster.properties.in). Node ids are 1, 2 and 3."""

    ports: tuple[int, int, int]
    controller_ports: tuple[int, int, int]
    log: list[str] = field(default_factory=list)

    @classmethod
    def on_free_ports(cls) -> LocalCluster:
        ports = [free_port() for _ in range(6)]
        while len(set(ports)) < 6:  # the OS may hand the same free port out twice
            ports = [free_port() for _ in range(6)]
        return cls((ports[0], ports[1], ports[2]), (ports[3], ports[4], ports[5]))

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.ports)

    def address(self, node: int) -> str:
        return f"127.0.0.1:{self.ports[node - 1]}"

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["KAFKA_CLUSTER_PORTS"] = " ".join(map(str, self.ports))
        env["KAFKA_CLUSTER_CONTROLLER_PORTS"] = " ".join(map(str, self.controller_ports))
        env["PYTHON"] = sys.executable
        return env

    def _run(self, *args: str, timeout: float = 300) -> str:
        return dev_kafka(("cluster", *args), self._env(), self.log, timeout)

    def start(self, keep_data: bool = False) -> str:
        self._run("start", *(["--keep-data"] if keep_data else []))
        return self.bootstrap

    def stop(self) -> None:
        self._run("stop")

    def kill(self, node: int) -> None:
        """SIGKILL node ``node``: a crash, its leaderships and coordinators move once the
        controller fences it (``broker.session.timeout.ms``)."""
        self._run("kill", str(node))

    def restart(self, node: int) -> None:
        """Start a killed node again on its data; returns once it is registered."""
        self._run("start-node", str(node))

    def status(self) -> str:
        """One line per node (for a failed test's diagnostics: not raised on a down node)."""
        proc = subprocess.run(
            [str(DEV_KAFKA), "cluster", "status"],
            env=self._env(), capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
        return proc.stdout

    def _admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})

    def leader(self, topic: str, partition: int, timeout: float = 10.0) -> int:
        """The node leading ``topic``'s ``partition`` now (-1 while it has none)."""
        md = self._admin().list_topics(topic, timeout=timeout)
        t = md.topics[topic]
        if t.error is not None:
            raise RuntimeError(f"no metadata for topic {topic}: {t.error}")
        return int(t.partitions[partition].leader)

    def isr(self, topic: str, partition: int, timeout: float = 10.0) -> list[int]:
        md = self._admin().list_topics(topic, timeout=timeout)
        return [int(n) for n in md.topics[topic].partitions[partition].isrs]

    def coordinator(self, transactional_id: str, timeout: float = 10.0) -> int:
        """The transaction coordinator of ``transactional_id``: the leader of its
        ``__transaction_state`` partition (the Python client has no FindCoordinator for
        transactions; :meth:`coordinator_by_tool` asks Kafka's own tool, to check this)."""
        md = self._admin().list_topics("__transaction_state", timeout=timeout)
        t = md.topics["__transaction_state"]
        if t.error is not None or not t.partitions:
            raise RuntimeError(f"no __transaction_state yet ({t.error}): no transaction ran")
        part = transaction_state_partition(transactional_id, len(t.partitions))
        return int(t.partitions[part].leader)

    def coordinator_by_tool(self, transactional_id: str) -> int:
        """The coordinator as Kafka's ``kafka-transactions.sh describe`` names it (a JVM
        start: seconds; for checking :meth:`coordinator`)."""
        libs = next(Path(self._run("logs", "1")).parents[2].glob("libs-*"))
        proc = subprocess.run(
            ["java", "-cp", f"{libs}/*", "-Dlog4j2.configurationFile="
             f"{ROOT / 'dev' / 'kafka-broker' / 'log4j2.properties'}",
             "org.apache.kafka.tools.TransactionsCommand", "--bootstrap-server", self.bootstrap,
             "describe", "--transactional-id", transactional_id],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        # the client's INFO log shares stdout: the table is the header line and the next
        lines = [ln.split() for ln in proc.stdout.splitlines()]
        head = next((i for i, ln in enumerate(lines) if ln[:1] == ["CoordinatorId"]), None)
        if proc.returncode != 0 or head is None or head + 1 >= len(lines):
            raise RuntimeError(f"kafka-transactions describe failed:\n{proc.stdout}{proc.stderr}")
        return int(lines[head + 1][0])

    def active_controller(self) -> int | None:
        """The KRaft quorum's leader as the running nodes' logs last named it ("Recorded new
        KRaft controller ... (id: N"), or None. The Python client has no DescribeQuorum and
        Kafka's own tool is a JVM start; this is for timings and diagnostics: a node that
        is also the active controller takes the quorum's failover with it."""
        pat = re.compile(r"^\[([^\]]+)\] .*Recorded new KRaft controller.*\(id: (\d+)")
        latest: tuple[str, int] | None = None
        status = self.status()
        for node in (1, 2, 3):
            log_file = Path(self._run("logs", str(node)).strip())
            if f"node {node} running" not in status or not log_file.exists():
                continue
            with log_file.open("rb") as f:
                f.seek(max(0, log_file.stat().st_size - 256_000))
                lines = f.read().decode(errors="replace").splitlines()
            for line in reversed(lines):
                m = pat.match(line)
                if m:
                    if latest is None or m.group(1) > latest[0]:
                        latest = (m.group(1), int(m.group(2)))
                    break
        return None if latest is None else latest[1]

    def group_coordinator(self, group: str, timeout: float = 10.0) -> int:
        """The node coordinating consumer group ``group``."""
        admin = self._admin()  # held until the answer: a dropped client never completes it
        fut = admin.describe_consumer_groups([group], request_timeout=timeout)[group]
        return int(fut.result(timeout + 5).coordinator.id)
