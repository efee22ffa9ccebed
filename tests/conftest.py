"""Session fixtures: a real Kafka broker, unique topics and settings per test, a log key."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.kafka_harness import LocalBroker, LocalCluster, find_or_start_kafka
from tracevault.config import Settings
from tracevault.kafka import ensure_topics
from tracevault.transparency import LOG_KEY_ENV, AgentKeys, Ed25519Signer

_VKEYS_ENV = "TRACEVAULT_LOG_VKEYS"
_AGENT_KEY_ENV = "TRACEVAULT_AGENT_KEY"
_AGENT_VKEYS_ENV = "TRACEVAULT_AGENT_VKEYS"


@contextlib.contextmanager
def _session_env(values: dict[str, str]) -> Iterator[None]:
    """``values`` in os.environ, so that every Settings and subprocess of the suite has them;
    the variables' earlier values are put back after."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(scope="session")
def log_signer() -> Ed25519Signer:
    """The session's log key: every sequencer of the suite signs its checkpoints with it."""
    return Ed25519Signer.generate("tracevault-test")


@pytest.fixture(scope="session", autouse=True)
def log_key(log_signer: Ed25519Signer) -> Iterator[str]:
    """The session's private log key, also in TRACEVAULT_LOG_KEY, so that every Settings and
    every subprocess of the suite has it (a sequencer refuses to start without one). A test
    that filters TRACEVAULT_* out of a child's environment adds it back."""
    # ... and its vkey in TRACEVAULT_LOG_VKEYS: archivers refuse to start without a trusted key
    with _session_env({LOG_KEY_ENV: log_signer.skey, _VKEYS_ENV: log_signer.verifier.vkey}):
        yield log_signer.skey


@pytest.fixture(scope="session")
def operator_signer() -> Ed25519Signer:
    """The session's operator key: ``tracevault erase`` signs its erasure records with it."""
    return Ed25519Signer.generate("tracevault-test-operator")


@pytest.fixture(scope="session", autouse=True)
def operator_key(operator_signer: Ed25519Signer) -> Iterator[str]:
    """The operator key in TRACEVAULT_OPERATOR_KEY and its vkey in TRACEVAULT_OPERATOR_VKEYS,
    as for the log key: every erase of the suite signs, every verify trusts it."""
    keys = {
        "TRACEVAULT_OPERATOR_KEY": operator_signer.skey,
        "TRACEVAULT_OPERATOR_VKEYS": operator_signer.verifier.vkey,
    }
    with _session_env(keys):
        yield operator_signer.skey


@pytest.fixture(scope="session")
def session_agent_signer() -> Ed25519Signer:
    """The session's agent key: every Recorder of the suite signs its runs with it."""
    return Ed25519Signer.generate("agents.tracevault-test")


@pytest.fixture(scope="session", autouse=True)
def session_agent_key(session_agent_signer: Ed25519Signer) -> Iterator[str]:
    """The session's agent key in TRACEVAULT_AGENT_KEY (every Recorder signs its run: a
    deployment's provenance is required, docs/identity.md) and its vkey in
    TRACEVAULT_AGENT_VKEYS for every agent id (``"*"``), so sequencers and verifiers trust it.
    Tests of identity itself name their agent keys (``--agent-key``, ``Settings``). The
    sequencer tests' hand-made raw events (``tests.services.sequencer.support.AGENT``,
    agent ``unsigned-test-agent``) are unsigned on purpose: that agent id is listed with no
    key, so the sequencer does not contest them (verify fails them as not authorised, unless
    waived)."""
    vkeys = json.dumps({"*": [session_agent_signer.verifier.vkey], "unsigned-test-agent": []})
    with _session_env({_AGENT_KEY_ENV: session_agent_signer.skey, _AGENT_VKEYS_ENV: vkeys}):
        yield session_agent_signer.skey


def trusted_agents() -> AgentKeys:
    """The agent vkeys a deployment of the suite trusts (``session_agent_key``), for
    tests that call the library's ``verify`` as a deployment's verifier would."""
    return AgentKeys.from_setting(os.environ.get(_AGENT_VKEYS_ENV, ""))


@pytest.fixture
def only_keys_given_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """For modules whose tests name their trusted keys themselves, or verify data sealed
    without the signed log: the session's vkey is not trusted there
    (``pytestmark = pytest.mark.usefixtures("only_keys_given_here")``)."""
    monkeypatch.delenv(_VKEYS_ENV, raising=False)


@pytest.fixture(scope="session")
def log_vkey(log_signer: Ed25519Signer) -> str:
    """The verifier key of the session's log key, for archivers and verifiers to trust."""
    return log_signer.verifier.vkey


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """Bootstrap servers of a real broker; the session fails (never skips) without one."""
    try:
        bootstrap, owner = find_or_start_kafka()
    except Exception as exc:
        pytest.fail(f"no Kafka broker could be found or started: {exc}", pytrace=False)
    yield bootstrap
    if isinstance(owner, LocalBroker):
        owner.stop()
    elif owner is not None:
        owner.stop()  # type: ignore[attr-defined]


#: The session's clock, fixed once: events the tests make are stamped now, as a Recorder's
#: are (the sequencer refuses an unknown run's event older than its horizon, docs/fleet.md),
#: and the same event made twice is the same bytes. Taken at import on purpose: nothing
#: compares it with the wall clock but the sequencer's horizon (2 days + skew by default; the
#: one test with a short horizon stamps its own events) and the future-skew check, so an hour
#: of CI under load does not move it past either. Gap and idle timers run on arrival time.
NOW_US = time.time_ns() // 1000


def unique_name(stem: str = "t") -> str:
    return f"{stem}-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def topic_factory(kafka_bootstrap: str) -> Iterator[Callable[..., str]]:
    """Create uniquely named topics for one test; they are deleted afterwards."""
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap, "log_level": 0})
    made: list[str] = []

    def make(stem: str = "t", partitions: int = 1, config: dict[str, str] | None = None) -> str:
        name = unique_name(stem)
        fut = admin.create_topics([NewTopic(name, partitions, 1, config=config or {})])[name]
        fut.result(timeout=30)
        made.append(name)
        return name

    yield make
    if made:
        for fut in admin.delete_topics(made, request_timeout=30).values():
            with contextlib.suppress(Exception):  # a test may have deleted it already
                fut.result(timeout=30)


@pytest.fixture
def settings_factory(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory, log_key: str
) -> Callable[..., Settings]:
    """Settings with a unique topic prefix (topics created) and private archive/spool dirs."""

    def make(partitions: int = 3, create: bool = True, **overrides: object) -> Settings:
        base = tmp_path_factory.mktemp("tv")
        values: dict[str, object] = {
            "bootstrap_servers": kafka_bootstrap,
            "topic_prefix": unique_name("tv"),
            "partitions": partitions,
            "archive_url": f"file://{base / 'archive'}",
            "spool_dir": str(base / "spool"),
            "log_key": log_key,
        }
        values.update(overrides)
        settings = Settings(**values)  # type: ignore[arg-type]
        if create:
            ensure_topics(settings)
        return settings

    return make


@pytest.fixture
def local_broker_factory(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Callable[..., LocalBroker]]:
    """Private brokers on free ports, for tests that stop or kill a broker; stopped at the end."""
    from tests.kafka_harness import free_port

    started: list[LocalBroker] = []

    def make(**extra: str) -> LocalBroker:
        """``extra``: broker settings beyond dev/kafka's (``log_retention_check_interval_ms``
        for ``log.retention.check.interval.ms``)."""
        broker = LocalBroker(free_port(), extra={k.replace("_", "."): v for k, v in extra.items()})
        broker.start()
        started.append(broker)
        return broker

    yield make
    for b in started:
        with contextlib.suppress(Exception):
            b.stop()


@pytest.fixture(scope="module")
def module_broker() -> Iterator[LocalBroker]:
    """One private broker for a module's tests that stop, kill or hang it: a fresh broker's
    start is 7-16 s on this machine. Each test has topics of its own, leaves the broker
    running and calls ``ensure_running`` first; stopped at the module's end."""
    from tests.kafka_harness import free_port

    broker = LocalBroker(free_port())
    broker.start()
    try:
        yield broker
    finally:
        with contextlib.suppress(Exception):
            broker.ensure_running()  # a SIGSTOPped one does not stop
        with contextlib.suppress(Exception):
            broker.stop()


@pytest.fixture(scope="module")
def module_cluster() -> Iterator[LocalCluster]:
    """dev/kafka's three-node cluster on free ports for a module's fault tests (its start is
    20-40 s here). Each test has topics of its own, restarts the node it killed and calls
    ``start(keep_data=True)`` first (it starts any node a failed test left down); stopped at
    the module's end."""
    cluster = LocalCluster.on_free_ports()
    cluster.start()
    try:
        yield cluster
    finally:
        with contextlib.suppress(Exception):
            cluster.stop()


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """``http://127.0.0.1:<port>``: a real S3 endpoint over HTTP (moto's server mode).

    Started by the tests themselves on a free loopback port; S3 tests talk to it through
    boto3 exactly as they would to AWS or MinIO.
    """
    from moto.server import ThreadedMotoServer

    for k, v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                 "AWS_DEFAULT_REGION": "us-east-1"}.items():  # fmt: skip
        os.environ.setdefault(k, v)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@contextlib.contextmanager
def burning_cpus(count: int = 2, *, nice: int | None = None) -> Iterator[None]:
    """``count`` processes spinning ``while True: pass`` beside the test (a saturated CPU);
    killed on exit, however the test ends.

    ``nice``: the burners' niceness (``0``: ahead of a suite run under ``nice -n 19``, as
    other work on a busy machine is; lowering it needs root, so where it cannot be set they
    keep the suite's). ``None``: the suite's own.
    """
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    if nice is not None:
        for proc in burners:
            with contextlib.suppress(OSError):
                os.setpriority(os.PRIO_PROCESS, proc.pid, nice)
    try:
        yield
    finally:
        for proc in burners:
            proc.kill()
        for proc in burners:
            proc.wait(timeout=30)
