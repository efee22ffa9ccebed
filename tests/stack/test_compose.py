"""docker-compose.yml cannot run here (no Docker engine), so check everything it references."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner

from tracevault.cli import tracevault

ROOT = Path(__file__).resolve().parents[2]
# Official images the stack is built from (docs/design.md: Apache Kafka's official image, MinIO).
KNOWN_IMAGES = {"apache/kafka", "minio/minio", "minio/mc"}


def _compose() -> dict[str, Any]:
    doc = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    assert isinstance(doc, dict)
    return doc


def test_services_reference_only_known_images_and_existing_build_contexts() -> None:
    services = _compose()["services"]
    assert {"kafka", "minio", "sequencer", "archiver"} <= set(services)
    for name, svc in services.items():
        if "image" in svc:
            repo = svc["image"].split(":")[0]
            assert repo in KNOWN_IMAGES, f"{name} uses unknown image {svc['image']}"
        else:
            ctx = ROOT / svc["build"]
            assert (ctx / "Dockerfile").is_file(), f"{name} builds from {ctx} without a Dockerfile"


def test_depends_on_and_volumes_resolve() -> None:
    doc = _compose()
    services = doc["services"]
    volumes = set(doc.get("volumes") or {})
    for name, svc in services.items():
        for dep in svc.get("depends_on", {}):
            assert dep in services, f"{name} depends on missing service {dep}"
        for vol in svc.get("volumes", []):
            source = vol.split(":")[0]
            assert source in volumes, f"{name} mounts undeclared volume {source}"


def test_tracevault_services_run_commands_that_exist() -> None:
    services = _compose()["services"]
    runner = CliRunner()
    built = [s for s in services.values() if "build" in s]
    assert built
    for svc in built:
        argv = list(svc["command"])
        # Each service's command must at least parse: `<command> ... --help` exits 0.
        res = runner.invoke(tracevault, [*argv, "--help"])
        assert res.exit_code == 0, f"tracevault {' '.join(argv)}: {res.output}"


def test_dockerfile_copies_paths_that_exist() -> None:
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        if line.startswith("COPY "):
            for src in line.split()[1:-1]:
                assert (ROOT / src).exists(), f"Dockerfile copies missing {src}"


def test_sequencer_and_archiver_are_health_checked_on_their_healthz() -> None:
    services = _compose()["services"]
    for name in ("sequencer", "archiver"):
        svc = services[name]
        port = svc["command"][svc["command"].index("--metrics-port") + 1]
        test = " ".join(svc["healthcheck"]["test"])
        assert f"localhost:{port}/healthz" in test, f"{name} healthcheck: {test}"
