"""Verifying an archive or a bundle imports no Kafka client (docs/design.md, "Layout").

An auditor checks a run from its archive or an exported bundle on a machine that has no
broker, and maybe no librdkafka; what the verify path loads is read from a fresh interpreter
that really loads, verifies and checks a bundle. Nor does it load a service: the formats it
reads (the archive, the witness's store) live beneath the services.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.replayer.archiving import write_run
from tracevault.archive import open_store
from tracevault.replayer import export_bundle
from tracevault.replayer.load.archive import load_from_archive
from tracevault.schemas import SealedEvent

_VERIFY = """
import json, sys
from pathlib import Path
from tracevault.archive import open_store
from tracevault.replayer import verify, verify_bundle
from tracevault.replayer.load.archive import load_from_archive
import tracevault.replayer.commands  # the CLI's room for `replay verify`

run = load_from_archive(open_store(sys.argv[1]), "run-a")
archived = verify(run)
bundled = verify_bundle(Path(sys.argv[2]))
kafka = sorted(m for m in sys.modules if m.split(".")[0] in ("confluent_kafka", "kafka"))
above = ("tracevault.services", "tracevault.witness", "tracevault.producer", "tracevault.heads")
services = sorted(m for m in sys.modules if m.startswith(above))
print(json.dumps({"archive": archived.count, "bundle": bundled.count, "kafka": kafka,
                  "services": services}))
"""


def test_verifying_an_archive_and_a_bundle_loads_no_kafka_client(
    tmp_path: Path, sealed: list[SealedEvent]
) -> None:
    url = f"file://{tmp_path / 'archive'}"
    store = open_store(url)
    write_run(store, sealed, per_segment=4)
    bundle = tmp_path / "bundle"
    export_bundle(load_from_archive(store, "run-a"), bundle, store=store)

    out = subprocess.run(
        [sys.executable, "-c", _VERIFY, url, str(bundle)],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.splitlines()[-1])
    assert got["archive"] == got["bundle"] == len(sealed)
    assert got["kafka"] == [], f"verifying loaded {got['kafka']}"
    # nor a service, nor the Kafka-reading heads: the witness's store layout lives in the
    # archive library (it was read through the witness service)
    assert got["services"] == [], f"verifying loaded {got['services']}"
