"""``tracevault report``: one HTML file that re-verifies itself in a real, offline Chromium.

Each tampering test changes ONE character of the written file (an event's raw bytes, a proof
hash, the checkpoint's signature), opens it from file:// with the network off, and reads the
verdict the page's own verifier wrote into the DOM.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.desk.browser import Chromium
from tests.replayer.archiving import write_signed_run
from tests.replayer.conftest import recorded
from tests.replayer.recording import seal
from tracevault.archive import open_store
from tracevault.cli import tracevault
from tracevault.transparency import Ed25519Signer

STATUS = "document.getElementById('tv-browser-status')"
DONE = f"{STATUS}.dataset.state !== 'pending' && {STATUS}.dataset.state"


def _report(archive: str, out: Path, *args: str, vkey: str | None) -> tuple[int, str]:
    """``report`` of a hand-written archive: no sealed topic proves it current (--offline)."""
    keys = [] if vkey is None else ["--trusted-key", vkey]
    res = CliRunner().invoke(
        tracevault,
        ["report", *args, "-o", str(out), "--archive-url", archive, *keys, "--offline"],
    )
    return res.exit_code, res.output


def _open(browser: Chromium, path: Path) -> str:
    browser.open(path.as_uri())
    return str(browser.wait_for(DONE, what="the report's verifier to finish"))


def _failed(browser: Chromium) -> list[str]:
    return list(
        browser.js("[...document.querySelectorAll('li.check.bad')].map(x => x.textContent)")
    )


def _evidence(html: str) -> dict:
    blob = re.search(r'<script type="application/json" id="tv-evidence">(.*?)</script>', html, re.S)
    assert blob is not None
    return json.loads(blob.group(1))


def _flip(html: str, needle: str, at: int, *, count: int = 1) -> str:
    """``html`` with the character ``at`` of the first of ``count`` occurrences of ``needle``
    changed to another base64 character (so the value still decodes, to different bytes)."""
    assert html.count(needle) == count, needle
    i = html.index(needle) + at
    return html[:i] + ("B" if html[i] != "B" else "C") + html[i + 1 :]


@pytest.fixture(scope="module")
def written(signed_archive: str, log_vkey: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """run-a and run-c, every payload revealed, with the session's log key trusted."""
    out = tmp_path_factory.mktemp("report") / "report.html"
    code, output = _report(signed_archive, out, "run-a", "run-c", "--reveal", "all", vkey=log_vkey)
    assert code == 0, output
    return out


def test_report_is_self_contained_and_every_check_is_green(
    written: Path, browser: Chromium
) -> None:
    html = written.read_text(encoding="utf-8")
    # no external URL the page could load: no src/href/url() to a network address
    assert not re.search(r"""(src|href|action)\s*=\s*["']?\s*(https?:|//)""", html, re.I)
    assert "url(" not in html.split("<style>")[1].split("</style>")[0]
    assert _open(browser, written) == "verified"
    text = browser.js(f"{STATUS}.textContent")
    total = browser.js("document.querySelectorAll('li.check').length")
    assert text == f"Verified in this browser: {total} of {total} checks" and total > 40
    assert _failed(browser) == []
    assert browser.js("document.getElementById('tv-python-status').dataset.state") == "verified"
    # every event of both runs carries its own mark, in words
    marks = browser.js("[...document.querySelectorAll('td.mark')].map(x => x.textContent)")
    counts = [len(r["events"]) for r in _evidence(html)["runs"]]
    assert (
        len(marks) == sum(counts)
        and counts[0] == 11
        and all(m.startswith("verified: chain, log inclusion") for m in marks)
    )
    # the payload is shown whole, from the bytes the page checked
    tool = browser.js("document.getElementById('run-0-seq-4-request').textContent")
    assert json.loads(tool) == {"args": {"q": "boiling point altitude 2000 m"}, "tool": "search"}
    assert browser.requests == [written.as_uri()]  # nothing but the file itself was fetched
    browser.screenshot("report-verified")


def test_one_changed_byte_of_an_event_turns_it_red_naming_the_seq(
    written: Path, browser: Chromium, tmp_path: Path
) -> None:
    html = written.read_text(encoding="utf-8")
    raw = _evidence(html)["runs"][0]["events"][3]["raw"]
    bad = tmp_path / "event.html"
    bad.write_text(_flip(html, raw, len(raw) // 2), encoding="utf-8")
    assert _open(browser, bad) == "failed"
    status = browser.js(f"{STATUS}.textContent")
    assert status.startswith("FAILED in this browser") and "run-a seq 3 chain" in status
    failed = _failed(browser)
    assert any("run-a seq 3 chain" in f for f in failed)
    assert any("run-a seq 3 log inclusion" in f for f in failed)
    assert all(" seq 3 " in f for f in failed), failed  # only the changed event is red
    mark = browser.js("document.getElementById('run-0-seq-3-mark').textContent")
    assert mark.startswith("FAILED: chain, log inclusion")
    browser.screenshot("report-event-changed")


def _once(html: str, values: list[str]) -> str:
    """The first of ``values`` that occurs exactly once in ``html`` (runs of one log may
    share a subtree hash)."""
    return next(v for v in values if html.count(v) == 1)


def test_the_proof_is_one_per_run_not_one_per_leaf(written: Path) -> None:
    """run-c's 11 leaves and the subtrees beside them lead to the root: the report carries
    those few hashes, and no event carries a proof of its own."""
    runs = _evidence(written.read_text(encoding="utf-8"))["runs"]
    for run in runs:
        assert 0 < len(run["proof"]) <= 8, len(run["proof"])  # log2 of the tree, at most
        assert not any("proof" in e or "u" in e for e in run["events"])
    assert "nodes" not in runs[0]


def test_one_changed_byte_of_the_proof_turns_the_run_red_naming_each_seq(
    written: Path, browser: Chromium, tmp_path: Path
) -> None:
    """The proof is the run's: a changed hash of it leaves no leaf of that run proven, and
    the page names every one (it cannot tell which hash changed); the other run still holds."""
    html = written.read_text(encoding="utf-8")
    run_c = _evidence(html)["runs"][1]
    bad = tmp_path / "proof.html"
    bad.write_text(_flip(html, _once(html, run_c["proof"]), 10), encoding="utf-8")
    assert _open(browser, bad) == "failed"
    assert "run-c seq 0 log inclusion: the run's leaves do not lead to the checkpoint's root" in (
        browser.js(f"{STATUS}.textContent")
    )
    failed = _failed(browser)
    assert [f.split(":")[0] for f in failed] == [
        f"FAIL run-c seq {e['seq']} log inclusion" for e in run_c["events"]
    ], failed
    mark = browser.js("document.getElementById('run-1-seq-5-mark').textContent")
    assert mark.startswith("FAILED: log inclusion")
    browser.screenshot("report-proof-changed")


def test_a_proof_with_a_hash_too_many_is_red(
    written: Path, browser: Chromium, tmp_path: Path
) -> None:
    html = written.read_text(encoding="utf-8")
    first = _once(html, _evidence(html)["runs"][1]["proof"])
    bad = tmp_path / "longer.html"
    bad.write_text(html.replace(f'"{first}"', f'"{first}","{first}"'), encoding="utf-8")
    assert _open(browser, bad) == "failed"
    failed = _failed(browser)
    assert failed and all(re.match(r"FAIL run-c seq \d+ log inclusion: ", f) for f in failed)
    assert "its leaves need" in failed[0], failed[0]


def test_one_changed_byte_of_the_signature_turns_it_red(
    written: Path, browser: Chromium, tmp_path: Path
) -> None:
    html = written.read_text(encoding="utf-8")
    note = _evidence(html)["runs"][0]["checkpoint"]
    sig = note.rstrip("\n").rsplit(" ", 1)[1]
    bad = tmp_path / "signature.html"
    # both runs are in the same partition log, so both carry its checkpoint: run-a's changes
    bad.write_text(_flip(html, sig, 30, count=2), encoding="utf-8")  # past the 4-byte key id
    assert _open(browser, bad) == "failed"
    status = browser.js(f"{STATUS}.textContent")
    assert "run-a checkpoint signature: signature of tracevault-test does not verify" in status
    # nothing of run-a is proven against an unsigned root; run-c's own checkpoint still holds
    failed = _failed(browser)
    assert any("run-a seq 0 log inclusion: no verified checkpoint" in f for f in failed)
    assert not any(f.startswith("FAIL run-c") for f in failed)
    browser.screenshot("report-signature-changed")


def test_without_a_trusted_key_it_says_unverified_and_exits_1(
    signed_archive: str, browser: Chromium, out: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TRACEVAULT_LOG_VKEYS", raising=False)
    code, output = _report(signed_archive, out, "run-b", vkey=None)
    assert code == 1 and "unverified run-b" in output and "no trusted log key" in output
    html = out.read_text(encoding="utf-8")
    top = html.index('id="tv-python-status"')
    assert top < html.index("Run run-b") and "UNVERIFIED when written" in html
    assert _open(browser, out) == "unverified"
    status = browser.js(f"{STATUS}.textContent")
    assert status.startswith("UNVERIFIED in this browser: this report holds no trusted log key")
    browser.screenshot("report-unverified")


def test_without_a_trusted_agent_vkey_it_says_provenance_unverified_and_exits_1(
    signed_archive: str, log_vkey: str, session_agent_signer: Ed25519Signer, out: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """Provenance is required as the log key is: with the log key but no agent vkey the
    report says why it is UNVERIFIED (not "no trusted log key"); --agent-key proves it."""
    monkeypatch.delenv("TRACEVAULT_AGENT_VKEYS", raising=False)
    code, output = _report(signed_archive, out, "run-b", vkey=log_vkey)
    assert code == 1 and "unverified run-b: provenance unverified" in output, output
    assert "no trusted log key" not in output and "--agent-key" in output
    html = out.read_text(encoding="utf-8")
    assert "UNVERIFIED when written: run-b: UNVERIFIED: provenance unverified" in html
    agent = f"test-agent={session_agent_signer.verifier.vkey}"
    code, output = _report(signed_archive, out, "run-b", "--agent-key", agent, vkey=log_vkey)
    assert code == 0 and "verified run-b" in output, output


def test_payloads_not_revealed_are_hashes_only(
    signed_archive: str, log_vkey: str, browser: Chromium, out: Path
) -> None:
    code, output = _report(signed_archive, out, "run-b", "--reveal", "4", vkey=log_vkey)
    assert code == 0, output
    html = out.read_text(encoding="utf-8")
    runs = _evidence(html)["runs"][0]["events"]
    assert [e["seq"] for e in runs if e["raw"] is not None] == [4]
    # the final answer (seq 10) is neither shown nor in any raw bytes of the file
    assert "About 93" not in html and "pages_cached" not in html
    assert "not revealed, SHA-256" in html
    assert _open(browser, out) == "verified"
    marks = browser.js("[...document.querySelectorAll('td.mark')].map(x => x.textContent)")
    assert marks[4].startswith("verified: chain,") and marks[5].startswith("verified: link,")


def test_a_changed_hash_of_a_withheld_event_turns_its_run_red(
    signed_archive: str, log_vkey: str, browser: Chromium, out: Path, tmp_path: Path
) -> None:
    """A withheld event's hash cannot be recomputed in the page, and the run's one proof
    cannot say which leaf changed: every leaf of the run fails, that seq among them."""
    code, output = _report(signed_archive, out, "run-b", "--reveal", "4", vkey=log_vkey)
    assert code == 0, output
    html = out.read_text(encoding="utf-8")
    withheld = _evidence(html)["runs"][0]["events"][6]
    assert withheld["raw"] is None
    bad = tmp_path / "withheld.html"
    bad.write_text(_flip(html, withheld["h"], 10), encoding="utf-8")
    assert _open(browser, bad) == "failed"
    failed = _failed(browser)
    assert len(failed) == 11 and all(
        re.match(r"FAIL run-b seq \d+ log inclusion: ", f) for f in failed
    )
    assert any(f.startswith("FAIL run-b seq 6 log inclusion") for f in failed)


def test_bad_reveal_is_a_usage_error(signed_archive: str, log_vkey: str, out: Path) -> None:
    code, output = _report(signed_archive, out, "run-a", "--reveal", "3-x", vkey=log_vkey)
    assert code == 2 and "'3-x'" in output and not out.exists()


def test_unknown_run_is_not_found(signed_archive: str, log_vkey: str, out: Path) -> None:
    code, output = _report(signed_archive, out, "no-such-run", vkey=log_vkey)
    assert code == 3 and "no-such-run" in output and not out.exists()


def test_a_run_that_fails_verify_is_written_failed_at_the_top(
    tmp_path: Path, log_vkey: str, browser: Chromium, out: Path
) -> None:
    url = f"file://{tmp_path / 'archive'}"
    write_signed_run(open_store(url), seal(recorded("run-x")))
    changed = 0
    for p in (tmp_path / "archive" / "objects" / "log").glob("*/0/data/**/*"):
        data = p.read_bytes() if p.is_file() else b""
        at = data.find(b"2000 m", max(data.find(b"run-x"), 0))
        if b"run-x" in data and at >= 0:  # a recorded argument edited, no hash recomputed
            p.chmod(0o644)
            p.write_bytes(data[:at] + b"3000 m" + data[at + 6 :])
            changed += 1
    assert changed
    code, output = _report(url, out, "run-x", "--reveal", "all", vkey=log_vkey)
    assert code == 1 and "failed run-x" in output and "seq 0" in output
    html = out.read_text(encoding="utf-8")
    assert html.index("FAILED when written: run-x: FAILED: ") < html.index("Run run-x")
    assert _open(browser, out) == "failed"  # the page's own checks find the edited bytes
    assert "run-x seq 0 chain" in browser.js(f"{STATUS}.textContent")
    browser.screenshot("report-failed-verify")
