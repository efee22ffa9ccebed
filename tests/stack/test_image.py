"""The Dockerfile and docker-compose.yml run what the demo runs, as far as can be checked
without a Docker engine (the CI machine has none): the image installs what the C paths need
(the packages dev/system-deps installs for the demo) and refuses to build without them;
Compose's broker is the Kafka version dev/kafka runs; each service is given the log keys the
demo gives it; and the ``keys`` one-shot keeps a rotated log.vkey (docs/operations.md, "Key
rotation"). Compose's own parser reads the file (tests/stack/test_compose.py).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.stack.test_compose import ROOT, _Host, compose  # noqa: F401 - the fixture
from tracevault.config import Settings
from tracevault.demo.run import _services
from tracevault.transparency import load_signer

DOCKERFILE = (ROOT / "Dockerfile").read_text()


def _run_lines() -> list[str]:
    """The Dockerfile's RUN instructions, continuation lines joined."""
    joined = re.sub(r"\\\n\s*", " ", DOCKERFILE)
    return [line[4:] for line in joined.splitlines() if line.startswith("RUN ")]


def _installed() -> set[str]:
    out: set[str] = set()
    for run in _run_lines():
        for part in run.split("&&"):
            words = part.split()
            if words[:2] == ["apt-get", "install"]:
                out |= {w for w in words[2:] if not w.startswith("-")}
    return out


def test_the_image_installs_what_the_c_paths_need_as_dev_system_deps_does() -> None:
    demo = set(re.findall(r"need\+=\(([\w.+-]+)\)", (ROOT / "dev" / "system-deps").read_text()))
    c_paths = {"gcc", "libssl-dev"}  # a compiler and OpenSSL's headers (libcrypto's SHA-256)
    assert c_paths <= demo
    assert c_paths | {"libc6-dev"} <= _installed(), _installed()


def test_the_image_build_fails_without_its_c_paths() -> None:
    """The image's own check, run here: it passes where the C paths are built (this tree)
    and fails where they are not loaded (TRACEVAULT_NO_C stands in for a missing build)."""
    [check] = [m for run in _run_lines() for m in re.findall(r'python -c "([^"]+)"', run)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-c", check]
    ok = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    assert ok.returncode == 0, ok.stderr
    env["TRACEVAULT_NO_C"] = "1"
    off = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    assert off.returncode != 0 and "C paths not built" in off.stderr, off.stderr


def test_compose_runs_the_kafka_dev_kafka_runs(compose: dict[str, Any]) -> None:  # noqa: F811
    pom = (ROOT / "dev" / "kafka-broker" / "pom.xml").read_text()
    [version] = re.findall(r"<kafka.version>(.+)</kafka.version>", pom)
    assert compose["services"]["kafka"]["image"] == f"apache/kafka:{version}"


def test_compose_gives_each_service_the_log_keys_the_demo_gives_it(
    compose: dict[str, Any],  # noqa: F811
    tmp_path: Path,
) -> None:
    demo = {
        s.name: s for s in _services(Settings(), tmp_path, tmp_path / "log.key", "vkey-a,vkey-b")
    }
    services = compose["services"]
    trusted = set()
    for name, svc in demo.items():
        given = {k for k in svc.env or {} if k.startswith("TRACEVAULT_LOG_")}
        if "--log-key-file" in svc.argv:
            given.add("TRACEVAULT_LOG_KEY_FILE")
        env = services[name]["environment"]
        assert given == {k for k in env if k.startswith("TRACEVAULT_LOG_")}, name
        trusted.add(env["TRACEVAULT_LOG_VKEYS"])
    trusted.add(services["witness"]["environment"]["TRACEVAULT_LOG_VKEYS"])
    assert trusted == {"@/vkeys/log.vkey"}  # one file, written by the keys one-shot


def test_the_keys_one_shot_keeps_a_rotated_log_vkey(
    compose: dict[str, Any],  # noqa: F811
    kafka_bootstrap: str,
    tmp_path: Path,
) -> None:
    host = _Host(compose, tmp_path, kafka_bootstrap)
    host.run_once("keys")
    key, vkeys = tmp_path / "log-key" / "log.key", tmp_path / "vkeys" / "log.vkey"
    old = load_signer(key).verifier.vkey
    assert vkeys.read_text().split() == [old]
    rotated = subprocess.run(
        [sys.executable, "-m", "tracevault", "keys", "rotate", str(key), "--vkeys", str(vkeys)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert rotated.returncode == 0, rotated.stderr
    new = load_signer(key).verifier.vkey
    host.run_once("keys")  # the next `docker compose up`
    assert vkeys.read_text().split() == [new, old]
    assert not list((tmp_path / "vkeys").glob("*.new"))
