"""docker-compose.yml, read by Compose's own parser, and each tracevault service in it started.

There is no Docker engine on the CI machine, but Compose's parser needs none: ``config``
validates the file against Compose's schema and prints the model it would run, anchors and
merges resolved. The tests read that model, not the YAML text. Then they do what the
containers would: run the ``keys`` one-shot and ``topics`` with each service's environment and
its volumes as folders, and start the sequencer, the archiver and the witness against a real
broker until each answers ``/healthz`` (the archive is a folder instead of MinIO). Before the
``keys`` service, the sequencer exited 2 for want of a log key and the archiver for want of a
vkey, and ``restart: unless-stopped`` looped them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from confluent_kafka.admin import AdminClient

from tests.conftest import unique_name
from tests.kafka_harness import free_port
from tracevault.cli import tracevault
from tracevault.config import Settings
from tracevault.transparency import AgentKeys, load_signer, load_verifiers

ROOT = Path(__file__).resolve().parents[2]
# Official images the stack is built from (docs/design.md: Apache Kafka's official image, MinIO).
KNOWN_IMAGES = {"apache/kafka", "minio/minio", "minio/mc"}
SERVICES = ("sequencer", "archiver", "witness")


def _compose_command() -> list[str]:
    """Compose v2 (`docker compose`) where Docker is installed, else Debian's docker-compose."""
    docker = shutil.which("docker")
    if (
        docker
        and subprocess.run(
            [docker, "compose", "version"], capture_output=True, check=False
        ).returncode
        == 0
    ):
        return [docker, "compose"]
    legacy = shutil.which("docker-compose")
    if legacy is None:
        pytest.fail(
            "no Compose to parse docker-compose.yml with: dev/system-deps installs Debian's "
            "docker-compose package",
            pytrace=False,
        )
    return [legacy]


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    """The model Compose itself reads from docker-compose.yml (it refuses an invalid file)."""
    proc = subprocess.run(
        [*_compose_command(), "-f", str(ROOT / "docker-compose.yml"), "config"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, f"Compose refuses docker-compose.yml:\n{proc.stderr}"
    doc = yaml.safe_load(proc.stdout)
    assert isinstance(doc, dict)
    return doc


def test_services_reference_only_pinned_known_images_and_existing_build_contexts(
    compose: dict[str, Any],
) -> None:
    services = compose["services"]
    assert {"kafka", "minio", "keys", "topics", *SERVICES} <= set(services)
    for name, svc in services.items():
        if "image" in svc:
            repo, _, tag = svc["image"].partition(":")
            assert repo in KNOWN_IMAGES, f"{name} uses unknown image {svc['image']}"
            assert tag and tag != "latest", f"{name}: image {svc['image']} is not pinned"
        else:
            ctx = Path(svc["build"]["context"])
            assert (ctx / "Dockerfile").is_file(), f"{name} builds from {ctx} without a Dockerfile"


def test_services_start_after_the_keys_and_mount_only_what_they_need(
    compose: dict[str, Any],
) -> None:
    services = compose["services"]
    for name in SERVICES:
        after = services[name]["depends_on"]
        assert after["keys"]["condition"] == "service_completed_successfully", name
        assert after["topics"]["condition"] == "service_completed_successfully", name
    # The private log key is mounted by the one-shot that makes it and the sequencer alone.
    holders = {
        name
        for name, svc in services.items()
        for vol in svc.get("volumes", [])
        if _source(vol) == "log-key"
    }
    assert holders == {"keys", "sequencer"}


def test_tracevault_services_run_commands_that_exist(compose: dict[str, Any]) -> None:
    runner = CliRunner()
    built = [s for s in compose["services"].values() if "build" in s and "entrypoint" not in s]
    assert built
    for svc in built:
        argv = list(svc["command"])
        res = runner.invoke(tracevault, [*argv, "--help"])
        assert res.exit_code == 0, f"tracevault {' '.join(argv)}: {res.output}"


def test_dockerfile_copies_paths_that_exist_and_makes_the_volume_folders(
    compose: dict[str, Any],
) -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    for line in dockerfile.splitlines():
        if line.startswith("COPY "):
            for src in line.split()[1:-1]:
                assert (ROOT / src).exists(), f"Dockerfile copies missing {src}"
    # A named volume takes its owner from the image's folder: without it the image's user
    # could not write the keys.
    for name in ("keys", *SERVICES):
        for vol in compose["services"][name].get("volumes", []):
            assert f" {_target(vol)}" in dockerfile, f"Dockerfile does not make {_target(vol)}"


def test_long_running_services_are_health_checked_on_their_healthz(
    compose: dict[str, Any],
) -> None:
    for name in SERVICES:
        svc = compose["services"][name]
        port = svc["command"][svc["command"].index("--metrics-port") + 1]
        test = " ".join(svc["healthcheck"]["test"])
        assert f"localhost:{port}/healthz" in test, f"{name} healthcheck: {test}"


# --- what the containers do, run here ------------------------------------------------------


def _source(vol: Any) -> str:
    return str(vol["source"] if isinstance(vol, dict) else vol.split(":")[0])


def _target(vol: Any) -> str:
    return str(vol["target"] if isinstance(vol, dict) else vol.split(":")[1])


class _Host:
    """The compose project on this machine: volumes are folders, the broker is the test's."""

    def __init__(self, compose: dict[str, Any], tmp: Path, bootstrap: str) -> None:
        self.services = compose["services"]
        self.tmp = tmp
        self.bootstrap = bootstrap
        self.prefix = unique_name("compose")
        for name in compose["volumes"]:
            (tmp / name).mkdir(mode=0o700)

    def _paths(self, name: str, text: str) -> str:
        for vol in self.services[name].get("volumes", []):
            text = text.replace(_target(vol), str(self.tmp / _source(vol)))
        return text

    def env(self, name: str) -> dict[str, str]:
        """The service's environment as Compose gives it, its paths mapped to the folders;
        none of the test session's TRACEVAULT_* (its log key) leaks in."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEVAULT_")}
        given = self.services[name].get("environment") or {}
        env.update({k: self._paths(name, str(v)) for k, v in given.items()})
        env["TRACEVAULT_BOOTSTRAP_SERVERS"] = self.bootstrap
        env["TRACEVAULT_TOPIC_PREFIX"] = self.prefix
        if "TRACEVAULT_ARCHIVE_URL" in env:  # a folder for MinIO's bucket
            env["TRACEVAULT_ARCHIVE_URL"] = f"file://{self.tmp / 'archive'}"
            env.pop("TRACEVAULT_S3_ENDPOINT_URL", None)
        return env

    def argv(self, name: str, port: int | None = None) -> list[str]:
        svc = self.services[name]
        entry = svc.get("entrypoint") or [sys.executable, "-m", "tracevault"]
        argv = [self._paths(name, a) for a in [*entry, *svc["command"]]]
        if port is not None:
            argv[argv.index("--metrics-port") + 1] = str(port)
        # The image's PATH has tracevault; here it is this interpreter's.
        return argv

    def run_once(self, name: str) -> None:
        env = self.env(name)
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
        proc = subprocess.run(
            self.argv(name), env=env, capture_output=True, text=True, timeout=120, check=False
        )
        assert proc.returncode == 0, f"{name} exited {proc.returncode}: {proc.stderr[-2000:]}"


@pytest.fixture(scope="module")
def host(
    compose: dict[str, Any], kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[_Host]:
    h = _Host(compose, tmp_path_factory.mktemp("compose"), kafka_bootstrap)
    h.run_once("keys")
    h.run_once("topics")
    yield h
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for fut in admin.delete_topics(list(Settings(topic_prefix=h.prefix).topics.all())).values():
        fut.result(timeout=30)


def test_the_keys_one_shot_makes_a_private_log_key_and_shares_its_vkey(host: _Host) -> None:
    key = host.tmp / "log-key" / "log.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert stat.S_IMODE((host.tmp / "witness-key" / "witness.key").stat().st_mode) == 0o600
    [verifier] = load_verifiers([f"@{host.tmp / 'vkeys' / 'log.vkey'}"])
    assert verifier.name == "tracevault.local/log"
    # ... and the agents' key, whose vkey the sequencer and verify trust (provenance required)
    agent = host.tmp / "agent-key" / "agent.key"
    assert stat.S_IMODE(agent.stat().st_mode) == 0o600
    allowed = AgentKeys.from_setting(f"@{host.tmp / 'vkeys' / 'agent_vkeys.json'}")
    assert allowed.allows("any-agent", load_signer(agent).verifier)
    # Run again (a `docker compose up` after the first), it keeps the keys it made.
    before = key.read_text()
    host.run_once("keys")
    assert key.read_text() == before


def _healthy(url: str, proc: subprocess.Popen[bytes], log: Path, deadline: float) -> None:
    pause = threading.Event()
    while True:
        assert proc.poll() is None, f"exited {proc.returncode}: {log.read_text()[-2000:]}"
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError):
            pass
        assert time.monotonic() < deadline, f"{url} not healthy in time"
        pause.wait(0.2)  # a deadline-bounded poll of a condition


def _native_stacks(pid: int) -> str:
    """Every thread's C stack (gdb, where installed): which call holds the GIL or a lock
    when Python's own stacks show every thread waiting."""
    gdb = shutil.which("gdb")
    if gdb is None:
        return "(no gdb here)"
    got = subprocess.run(
        [gdb, "-batch", "-p", str(pid), "-ex", "thread apply all bt 12"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    lines = [ln[:160] for ln in got.stdout.splitlines() if ln.startswith(("Thread ", "#"))]
    return "\n".join(lines)[:30000] or got.stderr[-2000:]


@pytest.mark.parametrize("name", SERVICES)
def test_each_service_starts_with_the_shared_keys(host: _Host, name: str) -> None:
    port = free_port()
    log = host.tmp / f"{name}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            host.argv(name, port), env=host.env(name), cwd=host.tmp,
            stdout=subprocess.DEVNULL, stderr=out,
        )  # fmt: skip
    try:
        _healthy(f"http://127.0.0.1:{port}/healthz", proc, log, time.monotonic() + 90)
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            native = _native_stacks(proc.pid)
            proc.send_signal(signal.SIGUSR1)  # every thread's stack into the log (cli.main)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=3)
            pytest.fail(
                f"{name} still running 30 s after SIGTERM:\n{log.read_text()[-6000:]}\n"
                f"native stacks:\n{native}"
            )
        assert code == 0, log.read_text()[-2000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
