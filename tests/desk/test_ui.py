"""``tracevault ui`` in a real headless Chromium: runs → run → a payload opened → diff.

The app is served by uvicorn on loopback over a real signed archive; the browser resolves no
host name (only 127.0.0.1 is reachable) and every assertion reads the DOM.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.desk.browser import Chromium
from tests.desk.server import desk_conf, serving
from tests.replayer.archiving import write_signed_run
from tests.replayer.conftest import recorded
from tests.replayer.recording import seal
from tracevault.archive import open_store
from tracevault.config import Settings
from tracevault.desk.access import AccessLog
from tracevault.producer import Publisher
from tracevault.transparency import AgentKeys

TOKEN = "a-long-random-test-token-0123456789"


_conf = desk_conf


@pytest.fixture(scope="module")
def desk(signed_archive: str, log_vkey: str) -> Iterator[str]:
    with serving(_conf(signed_archive, log_vkey)) as url:
        yield url


def _status(url: str, headers: dict[str, str] | None = None) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {})) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return e.code


def _text(b: Chromium, selector: str) -> str:
    return str(b.js(f"document.querySelector({json.dumps(selector)}).textContent"))


def _verdict(b: Chromium) -> None:
    """Wait for a run page's verdict: its first screen may come while it is verified
    ("verifying…" at the top, reloading itself until the verdict is in)."""
    b.wait_for(
        "document.readyState === 'complete' && (!document.getElementById('tv-status') || "
        "document.getElementById('tv-status').dataset.state !== 'verifying')",
        what="the run's verdict",
    )


def _follow(b: Chromium, click: str, lands_on: str) -> None:
    """Click ``click`` (a CSS selector) and check the page it loads is at ``lands_on``."""
    b.click(click)
    assert lands_on in str(b.js("location.href"))


def test_runs_then_a_run_then_a_payload_then_a_diff(
    signed_archive: str, log_vkey: str, web: Chromium, settings_factory: Callable[..., Settings]
) -> None:
    # its openings go to the broker as access events (sealed in the log: tests/desk/test_access)
    with Publisher(settings_factory(partitions=1)) as publisher:
        conf = dataclasses.replace(_conf(signed_archive, log_vkey), access=AccessLog(publisher))
        with serving(conf) as desk:
            _search_run_payload_diff(desk, web)


def test_without_an_access_log_content_stays_closed(desk: str, web: Chromium) -> None:
    web.open(desk + "/runs/run-a")
    _verdict(web)
    assert "records no access log" in _text(web, "#tv-no-access")
    assert web.js("document.querySelectorAll('a.open').length") == 0
    assert web.js("document.querySelectorAll('details.payload pre').length") == 0
    assert "93.4" not in str(web.js("document.body.innerHTML"))
    web.open(desk + "/runs/run-a?open=5")  # asked for anyway: still closed
    _verdict(web)
    assert "93.4" not in str(web.js("document.body.innerHTML"))
    web.open(desk + "/diff?a=run-a&b=run-c")
    assert "no access log records this reading" in _text(web, "#first-divergence")


def _search_run_payload_diff(desk: str, web: Chromium) -> None:
    web.open(desk + "/")
    ids = web.js("[...document.querySelectorAll('a.run')].map(a => a.textContent)")
    assert ids == ["run-a", "run-b", "run-c"]
    web.js("document.getElementById('tv-q').value = 'run-c'")
    _follow(web, "form[role=search] button", "q=run-c")
    assert web.js("[...document.querySelectorAll('a.run')].map(a => a.textContent)") == ["run-c"]
    web.screenshot("ui-runs")

    web.open(desk + "/")
    _follow(web, "a.run", "/runs/run-a")
    _verdict(web)
    status = _text(web, "#tv-status")
    assert status.startswith("VERIFIED: run-a: the signed log and the chain hold")
    assert web.js("document.querySelectorAll('tr.event').length") == 11
    # a payload opens whole, pretty-printed, once its opening is recorded (an access event)
    assert web.js("document.querySelector('#seq-5 details[data-part=response] pre')") is None
    _follow(web, "#seq-5 a.open", "open=5")
    _verdict(web)
    assert web.js("document.querySelector('#seq-5 details[data-part=response]').open") is True
    body = json.loads(_text(web, "#seq-5 details[data-part=response] pre"))
    assert body == {
        "body": "Water boils at about 93.4 °C at 2000 m.",
        "url": "https://example.org/boiling",
    }
    web.screenshot("ui-run-payload")

    web.open(desk + "/diff?a=run-a")
    web.js("document.getElementById('tv-b').value = 'run-c'")
    _follow(web, "form[action='/diff'] button", "b=run-c")
    assert _text(web, "#tv-status-a").startswith("VERIFIED: run-a")
    assert _text(web, "#tv-status-b").startswith("VERIFIED: run-c")
    verdict = _text(web, "#tv-verdict")
    assert verdict.startswith("The runs differ at") and "first at run-a seq 3" in verdict
    path = _text(web, "#tv-first-path")
    assert path and path == _text(web, "#first-divergence code")
    assert (
        web.js("getComputedStyle(document.querySelector('#first-divergence td')).backgroundColor")
        != "rgba(0, 0, 0, 0)"
    )
    web.screenshot("ui-diff")


def _record_loads(web: Chromium, name: str) -> str:
    """Have every page the browser loads from now on note, as soon as it is parsed, its
    status, rows and refresh under ``sessionStorage[name]``: the "verifying…" screen
    replaces itself within a second, so it is recorded by the page, not polled for."""
    return web.on_every_load(
        "const s = document.getElementById('tv-status'); "
        "const m = document.querySelector('meta[http-equiv=refresh]'); "
        f"const seen = JSON.parse(sessionStorage.getItem({name!r}) || '[]'); "
        "seen.push({state: s && s.dataset.state, text: s && s.textContent, "
        "rows: document.querySelectorAll('tr.event').length, "
        "opened: document.querySelectorAll('details.payload pre').length, "
        "refresh: m && m.content}); "
        f"sessionStorage.setItem({name!r}, JSON.stringify(seen))"
    )


def _loads(web: Chromium, name: str) -> list[dict[str, object]]:
    return list(web.js(f"JSON.parse(sessionStorage.getItem({name!r}) || '[]')"))


def test_the_first_screen_comes_before_the_verdict_and_says_verifying(
    signed_archive: str, log_vkey: str, web: Chromium
) -> None:
    """A new desk: the first screen is read from the run's first objects and answered
    before the run is verified (the verification starts once it is out), so the first page
    Chromium shows is "verifying…"; it reloads itself until the verdict."""
    recording = _record_loads(web, "first")
    try:
        with serving(_conf(signed_archive, log_vkey)) as desk:
            web.open(desk + "/runs/run-a")
            _verdict(web)
            loads = _loads(web, "first")
    finally:
        web.forget(recording)
    first, last = loads[0], loads[-1]
    assert first["state"] == "verifying" and first["rows"] == 11 and first["opened"] == 0
    assert str(first["text"]).startswith(
        "verifying… run-a: these rows are read from the archive but not yet proven"
    )
    assert first["refresh"] == "1; url=/runs/run-a?page=0&reload=1"
    assert last["state"] == "verified" and str(last["text"]).startswith("VERIFIED: run-a")
    assert last["refresh"] is None and last["rows"] == 11
    assert all(x["state"] == "verifying" for x in loads[:-1]), loads


def test_a_seq_has_a_deep_link(desk: str, web: Chromium) -> None:
    web.open(desk + "/runs/run-b/seq/7")
    _verdict(web)
    web.wait_for("location.hash === '#seq-7'", what="the redirect to #seq-7")
    assert web.js("document.querySelector(':target').id") == "seq-7"
    assert "DECISION" in _text(web, "#seq-7")


def test_an_unknown_run_is_a_404_page_linking_back(desk: str, web: Chromium) -> None:
    assert _status(desk + "/runs/no-such-run") == 404
    web.open(desk + "/runs/no-such-run")
    assert "no-such-run" in _text(web, "#tv-message")
    assert web.js("document.getElementById('tv-back').getAttribute('href')") == "/"
    assert "Traceback" not in str(web.js("document.body.innerText"))


def test_a_run_that_fails_verify_is_red_at_the_top(
    tmp_path: Path, log_vkey: str, web: Chromium
) -> None:
    url = f"file://{tmp_path / 'archive'}"
    write_signed_run(open_store(url), seal(recorded("run-x")))
    changed = 0
    for p in (tmp_path / "archive" / "objects" / "log").glob("*/0/data/**/*"):
        data = p.read_bytes() if p.is_file() else b""
        at = data.find(b"2000 m", max(data.find(b"run-x"), 0))
        if b"run-x" in data and at >= 0:  # a recorded tool argument, no hash recomputed
            p.chmod(0o644)
            p.write_bytes(data[:at] + b"3000 m" + data[at + 6 :])
            changed += 1
    assert changed
    recording = _record_loads(web, "tampered")
    try:
        with serving(_conf(url, log_vkey)) as desk:
            web.open(desk + "/runs/run-x")
            _verdict(web)
            assert web.js("document.getElementById('tv-status').dataset.state") == "failed"
            assert _text(web, "#tv-status").startswith("FAILED verification: run-x:")
            assert web.js("getComputedStyle(document.getElementById('tv-status')).color") == (
                "rgb(164, 14, 14)"
            )
            web.screenshot("ui-run-failed")
            loads = _loads(web, "tampered")
    finally:
        web.forget(recording)
    # first the edited rows under "verifying…", never as verified, then red at the top
    states = [x["state"] for x in loads]
    assert states[0] == "verifying" and loads[0]["rows"] == 11 and loads[0]["opened"] == 0
    assert states[-1] == "failed" and set(states[1:-1]) <= {"verifying"}, states
    assert not any("VERIFIED:" in str(x["text"]) for x in loads)


def test_a_missing_archive_is_a_message_not_a_trace(tmp_path: Path, web: Chromium) -> None:
    with serving(_conf(f"file://{tmp_path / 'nowhere'}", None)) as desk:
        web.open(desk + "/runs/run-a")
        _verdict(web)
        text = str(web.js("document.body.innerText"))
        # the page names the archive that is not there (read commands never create one)
        assert "no archive at" in text and str(tmp_path / "nowhere") in text
        assert "Traceback" not in text and 'File "' not in text


def test_without_a_key_every_run_says_unverified(signed_archive: str, web: Chromium) -> None:
    with serving(_conf(signed_archive, None)) as desk:
        web.open(desk + "/runs/run-a")
        _verdict(web)
        assert _text(web, "#tv-status").startswith("UNVERIFIED: run-a: no trusted log key")


def test_without_an_agent_vkey_every_run_says_provenance_unverified(
    signed_archive: str, log_vkey: str, web: Chromium
) -> None:
    conf = _conf(signed_archive, log_vkey)
    conf = dataclasses.replace(conf, trust=dataclasses.replace(conf.trust, agents=AgentKeys({})))
    with serving(conf) as desk:
        web.open(desk + "/runs/run-a")
        _verdict(web)
        assert web.js("document.getElementById('tv-status').dataset.state") == "unverified"
        assert _text(web, "#tv-status").startswith("UNVERIFIED: run-a: provenance unverified")


def test_with_a_token_every_request_needs_it(
    signed_archive: str, log_vkey: str, web: Chromium
) -> None:
    with serving(_conf(signed_archive, log_vkey, TOKEN)) as desk:
        assert _status(desk + "/runs/run-a") == 401
        assert _status(desk + "/runs/run-a", {"Authorization": "Bearer wrong-token"}) == 401
        assert _status(desk + "/runs/run-a", {"Authorization": f"Bearer {TOKEN}"}) == 200
        web.open(desk + "/runs/run-a")  # a browser is sent to the login form
        web.wait_for("location.pathname === '/login'", what="the login form")
        web.js(f"document.querySelector('input[name=token]').value = {json.dumps(TOKEN)}")
        _follow(web, "form[action='/login'] button", "/runs/run-a")
        _verdict(web)
        assert _text(web, "#tv-status").startswith("VERIFIED: run-a")


def test_a_non_loopback_bind_without_a_token_refuses_to_start() -> None:
    env = {k: v for k, v in os.environ.items() if k != "TRACEVAULT_UI_TOKEN"}
    res = subprocess.run(
        [sys.executable, "-m", "tracevault", "ui", "--host", "0.0.0.0", "--port", "0"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert res.returncode == 2, res.stderr
    assert "not a loopback address" in res.stderr and "--token" in res.stderr
