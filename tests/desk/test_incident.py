"""``tracevault incident``: a package of reports and bundles under a manifest the operator key
signs, its crosswalk, and its check failing closed on any changed, missing or added byte.

Real recorded runs in a signed archive; the session's operator key signs (as for erase), and
the package's report is opened in headless Chromium from file:// with the network off.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from tests.desk.browser import Chromium
from tracevault.archive import open_store
from tracevault.cli import tracevault
from tracevault.index import rebuild
from tracevault.transparency import Ed25519Signer

OBLIGATIONS = ["EU AI Act Art. 12", "EU AI Act Art. 19", "EU AI Act Art. 26(6)",
               "EU AI Act Art. 72", "EU AI Act Art. 73",
               "ISO/IEC 24970 (AI system logging)"]  # fmt: skip


def _cli(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(tracevault, list(args), env=env)


@pytest.fixture(scope="module")
def package(signed_archive: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("incident") / "pkg"
    res = _cli("incident", "create", "--offline", "run-a", "run-c", "-o", str(out),
               "--archive-url", signed_archive, "--json")  # fmt: skip
    assert res.exit_code == 0, res.output
    said = json.loads(res.output)
    assert [r["status"] for r in said["runs"]] == ["verified", "verified"]
    return out


def _verify(pkg: Path, *extra: str, env: dict[str, str] | None = None) -> tuple[int, dict]:  # type: ignore[type-arg]
    res = _cli("incident", "verify", str(pkg), "--json", *extra, env=env)
    return res.exit_code, json.loads(res.output)


def test_a_package_holds_reports_bundles_crosswalk_and_verifies(
    package: Path, log_vkey: str, browser: Chromium
) -> None:
    manifest = json.loads((package / "manifest.json").read_text())
    assert {r["run_id"]: r["bundle"] for r in manifest["runs"]} == {
        "run-a": "bundles/run-a", "run-c": "bundles/run-c"}  # fmt: skip
    assert "reports/run-a.html" in manifest["files"] and "crosswalk.md" in manifest["files"]
    assert any(f.startswith("bundles/run-c/") for f in manifest["files"])
    rows = json.loads((package / "crosswalk.json").read_text())["obligations"]
    assert [r["source"] for r in rows] == OBLIGATIONS
    assert all(r["requires"] and r["shown_by"] for r in rows)
    assert "## EU AI Act Art. 73: Reporting of serious incidents" in (
        package / "crosswalk.md").read_text()  # fmt: skip
    code, check = _verify(package)
    assert (code, check["status"], check["problems"]) == (0, "verified", [])
    assert check["signer"].startswith("tracevault-test-operator+")
    # each bundle checks on its own, and each report in the browser
    res = _cli("replay", "verify", "--bundle", str(package / "bundles/run-a"),
               "--trusted-key", log_vkey)  # fmt: skip
    assert res.exit_code == 0, res.output
    browser.open((package / "reports/run-a.html").as_uri())
    state = "document.getElementById('tv-browser-status').dataset.state"
    assert browser.wait_for(f"{state} !== 'pending' && {state}") == "verified"


def test_without_a_trusted_operator_vkey_it_is_unverified(package: Path) -> None:
    code, check = _verify(package, env={"TRACEVAULT_OPERATOR_VKEYS": ""})
    assert (code, check["status"]) == (1, "unverified")
    assert "no trusted operator vkey" in check["problems"][0]
    other = Ed25519Signer.generate("someone-else").verifier.vkey
    code, check = _verify(package, "--operator-vkey", other,
                          env={"TRACEVAULT_OPERATOR_VKEYS": ""})  # fmt: skip
    assert (code, check["status"]) == (1, "failed")
    assert "signed by unknown key" in check["problems"][0]


def _flip(path: Path, at: int = -40) -> Callable[[], None]:
    """Change one byte of ``path``; returns what puts it back."""
    data = path.read_bytes()
    path.write_bytes(data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1 :] if at != -1 else
                     data[:-1] + bytes([data[-1] ^ 0x01]))  # fmt: skip
    return lambda: path.write_bytes(data)


@pytest.mark.parametrize("rel", ["reports/run-a.html", "crosswalk.json", "manifest.json",
                                 "manifest.sig", "BUNDLE"])  # fmt: skip
def test_one_changed_byte_fails_naming_the_file(package: Path, rel: str) -> None:
    if rel == "BUNDLE":  # an event's bytes as sealed, in a bundle
        rel = "bundles/run-a/raw/000000000005.bin"
    at = -40 if rel != "manifest.sig" else -10  # the signature's base64
    restore = _flip(package / rel, at)
    try:
        code, check = _verify(package)
    finally:
        restore()
    assert (code, check["status"]) == (1, "failed"), check
    assert any(p.startswith((rel, "manifest.sig")) for p in check["problems"]), check
    if rel not in ("manifest.json", "manifest.sig"):
        assert check["problems"] == [f"{rel}: changed (its SHA-256 is not the manifest's)"]
    assert _verify(package)[0] == 0  # put back: verified again


def test_an_added_or_a_missing_file_fails(package: Path) -> None:
    extra = package / "reports" / "run-z.html"
    extra.write_text("<p>slipped in</p>")
    try:
        code, check = _verify(package)
    finally:
        extra.unlink()
    assert (code, check["problems"]) == (1, ["reports/run-z.html: not in the manifest (added)"])
    gone = package / "crosswalk.md"
    kept = gone.read_bytes()
    gone.unlink()
    try:
        code, check = _verify(package)
    finally:
        gone.write_bytes(kept)
    assert (code, check["problems"]) == (1, ["crosswalk.md: missing"])


def test_runs_chosen_by_the_index_and_no_operator_key_no_package(
    signed_archive: str, tmp_path: Path
) -> None:
    rebuild(open_store(signed_archive))
    out = tmp_path / "by-search"
    res = _cli("incident", "create", "--offline", "--status", "errored", "-o", str(out),
               "--archive-url", signed_archive, "--json")  # fmt: skip
    assert res.exit_code == 0, res.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert [r["run_id"] for r in manifest["runs"]] == ["run-c"]
    assert manifest["selection"]["search"]["status"] == "errored"
    assert manifest["selection"]["search"]["found"] == ["run-c"]
    nokey = tmp_path / "nokey"
    res = _cli("incident", "create", "--offline", "run-a", "-o", str(nokey),
               "--archive-url", signed_archive,
               env={"TRACEVAULT_OPERATOR_KEY": "", "TRACEVAULT_OPERATOR_KEY_FILE": ""})  # fmt: skip
    assert res.exit_code == 2 and "operator key" in res.output
    assert not nokey.exists()
