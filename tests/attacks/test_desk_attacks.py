"""Attacks on the desk: a recorded payload written to be markup or script.

An agent's input, a tool's result or a model's answer is whatever the outside world sent; the
report and the UI show it. Here the recorded question closes the report's data block, opens a
script and an image with an onerror handler. Opened in a real Chromium, nothing of it may run
or load: the report escapes "<" in its JSON and HTML-escapes every payload, its CSP allows one
script by hash and no connection; the UI's templates are autoescaped and carry no script.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.desk.browser import Chromium
from tests.desk.server import serving
from tests.replayer import agents
from tests.replayer.archiving import write_signed_run
from tests.replayer.recording import record, seal
from tracevault.archive import open_store
from tracevault.cli import tracevault
from tracevault.config import Settings
from tracevault.desk.app import DeskConfig
from tracevault.replayer import EndRule, LogPolicy

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
        "--archive-url", hostile_archive, "--trusted-key", log_vkey,
    ])  # fmt: skip
    assert res.exit_code == 0, res.output
    browser.open(out.as_uri())
    state = "document.getElementById('tv-browser-status').dataset.state"
    assert browser.wait_for(f"{state} !== 'pending' && {state}") == "verified"
    _nothing_ran(browser)
    shown = browser.js("document.getElementById('run-0-seq-0-request').textContent")
    assert json.loads(shown) == {"input": {"question": HOSTILE}}


def test_a_hostile_payload_in_the_ui_is_text(
    hostile_archive: str, log_vkey: str, browser: Chromium
) -> None:
    settings = Settings(archive_url=hostile_archive)
    conf = DeskConfig(settings, LogPolicy.of(settings, [log_vkey]), EndRule())
    with serving(conf) as desk:
        browser.open(desk + "/runs/run-hostile")
        _nothing_ran(browser)  # the first screen may be the one shown while it is verified
        browser.wait_for(
            "document.readyState === 'complete' && "
            "document.getElementById('tv-status').dataset.state !== 'verifying'",
            what="the run's verdict",
        )
        assert browser.js("document.getElementById('tv-status').dataset.state") == "verified"
        _nothing_ran(browser)
        shown = browser.js("document.querySelector('#seq-0 details pre').textContent")
        assert json.loads(shown) == {"input": {"question": HOSTILE}}
        assert browser.js("document.querySelectorAll('script').length") == 0
