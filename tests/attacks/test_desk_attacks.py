"""Attacks on the desk: a recorded payload written to be markup or script, and a run its
agent did not write.

An agent's input, a tool's result or a model's answer is whatever the outside world sent; the
report and the UI show it. Here the recorded question closes the report's data block, opens a
script and an image with an onerror handler. Opened in a real Chromium, nothing of it may run
or load: the report escapes "<" in its JSON and HTML-escapes every payload, its CSP allows one
script by hash and no connection; the UI's templates are autoescaped and carry no script.

A raw writer records a run as an agent it is not (no agent note, or a key of its own); the
sequencer seals it and the archiver archives it under the signed log, so only provenance
(check I) tells it apart: the desk verifies as `replay verify` does, so the report and the
UI say FAILED naming check I, not merely "unverified".
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.desk.browser import Chromium
from tests.desk.server import desk_conf, serving
from tests.replayer import agents
from tests.replayer.archiving import write_signed_run
from tests.replayer.recording import record, seal, seal_raws, signed_raws
from tracevault.archive import open_store
from tracevault.cli import tracevault
from tracevault.config import Settings
from tracevault.desk.access import AccessLog
from tracevault.producer import Publisher
from tracevault.transparency import Ed25519Signer

HOSTILE = (
    '</script><script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'
    "<a href=https://attacker.example/>click</a>"
)


@pytest.fixture(scope="module")
def hostile_archive(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"file://{tmp_path_factory.mktemp('hostile') / 'archive'}"
    events = record(
        agents.research_agent, {"question": HOSTILE}, run_id="run-hostile",
        model_fn=agents.fake_model, tools=agents.TOOLS, states=agents.STATES,
    )  # fmt: skip
    write_signed_run(open_store(url), seal(events))
    return url


@pytest.fixture(scope="module")
def browser() -> Iterator[Chromium]:
    b = Chromium(offline=False)  # loopback reachable for the UI; no name resolves
    yield b
    b.close()


def _nothing_ran(b: Chromium) -> None:
    assert b.js("window.__pwned === undefined")
    assert b.js("document.querySelectorAll('img').length") == 0
    assert b.js("[...document.querySelectorAll('a')].every(a => !a.href.includes('attacker'))")
    assert not [u for u in b.requests if "attacker" in u or u.endswith("/x")]


def test_a_hostile_payload_in_a_report_is_text(
    hostile_archive: str, log_vkey: str, browser: Chromium, tmp_path: Path
) -> None:
    out = tmp_path / "report.html"
    res = CliRunner().invoke(tracevault, [
        "report", "run-hostile", "-o", str(out), "--reveal", "all",
        "--archive-url", hostile_archive, "--trusted-key", log_vkey, "--offline",
    ])  # fmt: skip
    assert res.exit_code == 0, res.output
    browser.open(out.as_uri())
    state = "document.getElementById('tv-browser-status').dataset.state"
    assert browser.wait_for(f"{state} !== 'pending' && {state}") == "verified"
    _nothing_ran(browser)
    shown = browser.js("document.getElementById('run-0-seq-0-request').textContent")
    assert json.loads(shown) == {"input": {"question": HOSTILE}}


def test_a_hostile_payload_in_the_ui_is_text(
    hostile_archive: str,
    log_vkey: str,
    browser: Chromium,
    settings_factory: Callable[..., Settings],
) -> None:
    with Publisher(settings_factory(partitions=1)) as publisher:  # the opening is recorded
        conf = desk_conf(hostile_archive, log_vkey, access=AccessLog(publisher))
        with serving(conf) as desk:
            _opened_as_text(desk, browser)


def _opened_as_text(desk: str, browser: Chromium) -> None:
    browser.open(desk + "/runs/run-hostile")
    _nothing_ran(browser)  # the first screen may be the one shown while it is verified
    browser.open(desk + "/runs/run-hostile?open=0")  # opened: its access recorded
    browser.wait_for(
        "document.readyState === 'complete' && !!document.getElementById('tv-status') && "
        "document.getElementById('tv-status').dataset.state !== 'verifying'",
        what="the run's verdict",
        seconds=180,
    )
    assert browser.js("document.getElementById('tv-status').dataset.state") == "verified"
    _nothing_ran(browser)
    shown = browser.js("document.querySelector('#seq-0 details pre').textContent")
    assert json.loads(shown) == {"input": {"question": HOSTILE}}
    assert browser.js("document.querySelectorAll('script').length") == 0


@pytest.fixture(scope="module")
def impostor_archive(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Two runs a raw writer recorded as the research agent, sealed and archived faithfully
    (the log key signs them): one with no agent note, one signed by a key of its own."""
    url = f"file://{tmp_path_factory.mktemp('impostor') / 'archive'}"
    store = open_store(url)
    for run_id in ("run-unsigned", "run-impostor"):
        events = record(
            agents.research_agent, agents.INPUT, run_id=run_id,
            model_fn=agents.fake_model, tools=agents.TOOLS, states=agents.STATES,
        )  # fmt: skip
        if run_id == "run-unsigned":
            write_signed_run(store, seal(events, signed=False))
        else:
            own = Ed25519Signer.generate("agents.impostor")
            write_signed_run(store, seal_raws(signed_raws(events, own), run_id))
    return url


@pytest.mark.parametrize("run_id", ["run-unsigned", "run-impostor"])
def test_a_run_its_agent_did_not_write_fails_in_the_report(
    impostor_archive: str, log_vkey: str, tmp_path: Path, run_id: str
) -> None:
    # Before the desk checked provenance, both read "unverified ... no trusted log key" with
    # the log key given: who wrote the run was never asked, so the forgery went unnamed.
    out = tmp_path / "report.html"
    res = CliRunner().invoke(tracevault, [
        "report", run_id, "-o", str(out), "--archive-url", impostor_archive,
        "--trusted-key", log_vkey, "--offline",
    ])  # fmt: skip
    assert res.exit_code == 1, res.output
    assert f"failed {run_id}: verify failed: check I identity at seq 0" in res.output, res.output
    html = out.read_text(encoding="utf-8")
    said = html.index(f"FAILED when written: {run_id}: FAILED: verify failed: check I")
    assert said < html.index(f"Run {run_id}")


@pytest.mark.parametrize("run_id", ["run-unsigned", "run-impostor"])
def test_a_run_its_agent_did_not_write_is_red_in_the_ui(
    impostor_archive: str, log_vkey: str, browser: Chromium, run_id: str
) -> None:
    conf = desk_conf(impostor_archive, log_vkey)
    with serving(conf) as desk:
        browser.open(desk + f"/runs/{run_id}")
        browser.wait_for(
            "document.readyState === 'complete' && "
            "document.getElementById('tv-status').dataset.state !== 'verifying'",
            what="the run's verdict",
        )
        assert browser.js("document.getElementById('tv-status').dataset.state") == "failed"
        text = browser.js("document.getElementById('tv-status').textContent")
        said = f"FAILED verification: {run_id}: verify failed: check I identity at seq 0"
        assert text.startswith(said), text
