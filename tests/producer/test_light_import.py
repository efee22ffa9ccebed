"""``import tracevault.producer`` is light (docs/design.md, "Layout"): an agent that records in
clear loads no object-store client, no transparency log, no key provider and no Prometheus
client; identity and encryption load theirs when a Recorder is built with them.

Each case runs in a fresh interpreter (a module, once imported, stays in ``sys.modules``) and
records a whole run into a real broker, so what is asserted is what recording needs, not only
what the import line pulls in.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from tracevault.config import Settings

#: What an agent recording in clear must not pay for at import or per run.
HEAVY = ("boto3", "botocore", "tracevault.transparency", "tracevault.content", "prometheus_client")

_PROBE = """
import json, sys
HEAVY = {heavy!r}
loaded = lambda: sorted(m for m in HEAVY if m in sys.modules)
import tracevault.producer as producer
out = {{"on_import": loaded()}}
if sys.argv[1] == "record":
    from tracevault.config import Settings
    publisher = producer.Publisher(Settings())
    rec = producer.Recorder(publisher=publisher, agent_id="light", agent_version="1",
                            tools={{"echo": lambda args: args}})
    answer = rec.run(lambda task, edges: edges.tool("echo", task), {{"n": 1}})
    out.update(answer=answer, attested=rec.attestor is not None,
               delivered=publisher.close(timeout=60).ok, after_run=loaded())
else:
    assert producer.publisher_metrics is not None
    out["after_metrics"] = loaded()
print(json.dumps(out))
"""


def _probe(mode: str, env: dict[str, str]) -> dict[str, object]:
    """The probe's report, run in a fresh interpreter with ``env`` over a clean environment."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("TRACEVAULT_")}
    out = subprocess.run(
        [sys.executable, "-c", _PROBE.format(heavy=HEAVY), mode],
        env={**base, **env},
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    report: dict[str, object] = json.loads(out.stdout.splitlines()[-1])
    return report


def _env(settings: Settings, **extra: str) -> dict[str, str]:
    return {
        "TRACEVAULT_BOOTSTRAP_SERVERS": settings.bootstrap_servers,
        "TRACEVAULT_TOPIC_PREFIX": settings.topic_prefix,
        "TRACEVAULT_SPOOL_DIR": settings.spool_dir,
        **extra,
    }


def test_import_loads_none_of_the_heavy_parts_and_metrics_load_prometheus_on_demand() -> None:
    report = _probe("metrics", {})
    assert report["on_import"] == []
    assert report["after_metrics"] == ["prometheus_client"]


def test_a_run_recorded_in_clear_loads_none_of_them(
    settings_factory: Callable[..., Settings],
) -> None:
    report = _probe("record", _env(settings_factory(partitions=1)))
    assert report["answer"] == {"n": 1}
    assert report["delivered"] is True
    assert report["attested"] is False
    assert report["on_import"] == report["after_run"] == []


def test_an_agent_key_loads_the_transparency_log_only(
    settings_factory: Callable[..., Settings], session_agent_key: str
) -> None:
    env = _env(settings_factory(partitions=1), TRACEVAULT_AGENT_KEY=session_agent_key)
    report = _probe("record", env)
    assert report["on_import"] == []
    assert report["attested"] is True
    assert report["delivered"] is True
    assert report["after_run"] == ["tracevault.transparency"]


def test_a_key_provider_loads_the_content_package(
    settings_factory: Callable[..., Settings], tmp_path: Path
) -> None:
    env = _env(
        settings_factory(partitions=1),
        TRACEVAULT_KEY_PROVIDER="keyring",
        TRACEVAULT_KEYRING_PATH=str(tmp_path / "keys" / "keyring.json"),
        TRACEVAULT_RUN_KEY_STORE=str(tmp_path / "keys" / "run-keys"),
    )
    report = _probe("record", env)
    assert report["on_import"] == []
    assert report["delivered"] is True
    after = report["after_run"]
    assert isinstance(after, list)
    assert "tracevault.content" in after
    assert "tracevault.transparency" not in after
    assert (tmp_path / "keys" / "run-keys").is_dir()  # the run's key was kept
