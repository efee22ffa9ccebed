"""deploy/: the Prometheus alert rules pass ``promtool check rules`` and their unit tests
(``promtool test rules``), and every metric the rules and the Grafana dashboard query is one a
live stack exposes (sequencer, archiver and witness against the real broker, scraped over
HTTP, and a Recorder's Publisher through ``publisher_metrics``): no query names a metric that
does not exist.

promtool comes from Debian's ``prometheus`` package (dev/system-deps); without it this
fails, never skips.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.stack.live_stack import Stack, live_stack
from tracevault.producer import Publisher, publisher_metrics

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "alerts.yml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "alerts_test.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "tracevault.json"
#: what the dashboard shows and the rules alert on (issue: the operator's kit)
WATCHED = {
    "archiver lag": "tracevault_archiver_consumer_lag",
    "hole": "tracevault_archiver_holes_total",
    "contested run": "tracevault_sequencer_contested_total",
    "witness refusal": "tracevault_witness_refused_total",
    "DLQ growth": "tracevault_sequencer_dlq_total",
    "spool growth": "tracevault_recorder_spool_backlog_events",
    "healthz": "tracevault_archiver_healthy",
}
_METRIC = re.compile(r"\btracevault_[a-z0-9_]+")


def _promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.fail(
            "no promtool: dev/system-deps installs Debian's prometheus package", pytrace=False
        )
    return found


def _rule_exprs() -> list[str]:
    doc = yaml.safe_load(RULES.read_text())
    return [r["expr"] for g in doc["groups"] for r in g["rules"]]


def _dashboard_exprs() -> list[str]:
    doc: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in doc["panels"] for t in p["targets"]]


def test_promtool_checks_the_rules_and_runs_their_unit_tests() -> None:
    tool = _promtool()
    for argv in (["check", "rules", str(RULES)], ["test", "rules", str(RULE_TESTS)]):
        proc = subprocess.run(
            [tool, *argv], capture_output=True, text=True, timeout=120, check=False
        )
        assert proc.returncode == 0, f"promtool {' '.join(argv)}:\n{proc.stdout}{proc.stderr}"
        assert "SUCCESS" in proc.stdout, proc.stdout


def test_the_rules_and_the_dashboard_watch_what_an_operator_must_see() -> None:
    rules, dashboard = " ".join(_rule_exprs()), " ".join(_dashboard_exprs())
    for what, metric in WATCHED.items():
        assert metric in rules, f"no alert rule on {what} ({metric})"
        assert metric in dashboard, f"no dashboard panel on {what} ({metric})"
    assert "tracevault_sequencer_produce_to_sealed_seconds_bucket" in dashboard


_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "gauge": ("",)}


def _names(text: str) -> set[str]:
    """The series names an exposition declares: each family's by its TYPE (a labelled
    counter such as the witness's refusals has no sample until the first one), and every
    sample's."""
    out: set[str] = set()
    for fam in text_string_to_metric_families(text):
        out |= {fam.name + sfx for sfx in _SUFFIXES.get(fam.type, ())}
        out |= {s.name for s in fam.samples}
    return out


@pytest.fixture(scope="module")
def exposed(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory, log_key: str, log_vkey: str
) -> Iterator[set[str]]:
    """Every sample name a live stack and a Publisher expose (``_total``, ``_bucket``...)."""
    tmp = tmp_path_factory.mktemp("deploy")
    stack: Stack
    with live_stack(kafka_bootstrap, tmp, log_key, log_vkey) as stack:
        names: set[str] = set()
        for svc in stack.services.values():
            code, body = svc.get("/metrics")
            assert code == 200, svc.tail()
            names |= _names(body)
        publisher = Publisher(stack.settings.model_copy(update={"spool_dir": str(tmp / "spool")}))
        try:
            text = generate_latest(publisher_metrics(publisher)).decode()
        finally:
            publisher.close()
        names |= _names(text)
        yield names


def test_every_metric_the_rules_and_the_dashboard_query_is_exposed(exposed: set[str]) -> None:
    for source, exprs in (("alerts.yml", _rule_exprs()), ("tracevault.json", _dashboard_exprs())):
        for expr in exprs:
            used = set(_METRIC.findall(expr))
            # the one other metric a rule may name is Prometheus' own `up` of the scrape
            assert used or expr.startswith("up{"), f"{source}: {expr} names no metric of ours"
            missing = used - exposed
            assert not missing, f"{source}: {expr} queries {missing}, which nothing exposes"
