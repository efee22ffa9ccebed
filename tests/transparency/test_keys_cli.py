"""``tracevault keys generate|show``: the files it writes, what it prints, what it refuses."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from tracevault.cli import tracevault
from tracevault.config import Settings
from tracevault.errors import ConfigError
from tracevault.replayer.erase import operator_signer
from tracevault.transparency import (
    CosignatureSigner,
    Ed25519Signer,
    load_signer,
    load_witness_signer,
    load_witness_verifiers,
    parse_vkey,
    parse_witness_vkey,
)


def _run(*args: str, stdin: str | None = None) -> tuple[int, str]:
    res = CliRunner().invoke(tracevault, list(args), input=stdin)
    return res.exit_code, res.stdout


def test_generate_writes_an_owner_only_key_and_prints_its_vkey(tmp_path: Path) -> None:
    out = tmp_path / "log.key"
    code, printed = _run("keys", "generate", "--name", "tv.example/log", "--out", str(out))
    assert code == 0, printed
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    signer = load_signer(out)
    assert printed.strip() == signer.verifier.vkey
    assert parse_vkey(printed) == signer.verifier
    # never overwritten: the first key stays
    before = out.read_text()
    code, _ = _run("keys", "generate", "--name", "other", "--out", str(out))
    assert code == 2 and out.read_text() == before
    code, _ = _run("keys", "generate", "--name", "tv", "--out", str(tmp_path / "no" / "k"))
    assert code == 2  # a clear error, not a traceback


def test_show_prints_the_vkey_of_a_file_or_stdin_and_json(tmp_path: Path) -> None:
    out = tmp_path / "log.key"
    _run("keys", "generate", "--name", "tv", "--out", str(out))
    signer = Ed25519Signer.from_skey(out.read_text())
    code, printed = _run("keys", "show", str(out))
    assert code == 0 and printed.strip() == signer.verifier.vkey
    code, printed = _run("keys", "show", "-", "--json", stdin=out.read_text())
    assert code == 0
    assert json.loads(printed) == {
        "name": "tv",
        "key_id": signer.key_id.hex(),
        "type": "ed25519",  # a log key's bytes are an agent key's: the role is not in them
        "vkey": signer.verifier.vkey,
    }
    # a vkey shows as itself
    code, printed = _run("keys", "show", "-", stdin=signer.verifier.vkey)
    assert code == 0 and printed.strip() == signer.verifier.vkey
    code, _ = _run("keys", "show", str(tmp_path / "missing.key"))
    assert code == 2
    code, _ = _run("keys", "show", "-", stdin="PRIVATE+KEY+tv+00000000+AAAA")
    assert code == 2


def test_witness_keys_have_type_0x04_and_their_own_id(tmp_path: Path) -> None:
    out = tmp_path / "w.key"
    code, printed = _run(
        "keys", "generate", "--type", "witness", "--name", "w1.example", "--out", str(out)
    )
    assert code == 0
    assert os.stat(out).st_mode & 0o077 == 0
    signer = load_witness_signer(out)
    assert isinstance(signer, CosignatureSigner)
    assert parse_witness_vkey(printed) == signer.verifier
    assert load_witness_verifiers([printed.strip()]) == [signer.verifier]
    code, printed = _run("keys", "show", str(out), "--json")
    doc = json.loads(printed)
    assert doc["type"] == "witness" and doc["key_id"] == signer.key_id.hex()


def test_show_never_calls_an_agent_key_a_log_key(tmp_path: Path) -> None:
    out = tmp_path / "agent.key"
    code, _ = _run("keys", "generate", "--type", "agent", "--name", "pay-bot", "--out", str(out))
    assert code == 0
    res = CliRunner().invoke(tracevault, ["keys", "show", str(out)])
    assert res.exit_code == 0, res.output
    assert "log key" not in res.stderr
    assert "Ed25519 key (a log, agent or operator key)" in res.stderr


def test_an_operator_key_signs_erasure_records_from_its_file(tmp_path: Path) -> None:
    out = tmp_path / "operator.key"
    code, printed = _run(
        "keys", "generate", "--type", "operator", "--name", "dpo.example", "--out", str(out)
    )
    assert code == 0 and stat.S_IMODE(out.stat().st_mode) == 0o600
    signer = operator_signer(Settings(operator_key_file=str(out), operator_key=None))
    assert signer.verifier.vkey == printed.strip()
    out.chmod(0o644)
    with pytest.raises(ConfigError, match="chmod 600"):
        operator_signer(Settings(operator_key_file=str(out), operator_key=None))
    with pytest.raises(ConfigError, match="TRACEVAULT_OPERATOR_KEY_FILE"):
        operator_signer(Settings(operator_key_file=None, operator_key=None))


def test_rotate_keeps_the_old_key_beside_and_trusts_both(tmp_path: Path) -> None:
    key, vkeys = tmp_path / "log.key", tmp_path / "log.vkey"
    _run("keys", "generate", "--name", "tv.example/log", "--out", str(key))
    old = load_signer(key).verifier
    vkeys.write_text(f"# trusted\n{old.vkey}\nother.example+00000000+AQ==\n")
    code, printed = _run("keys", "rotate", str(key), "--vkeys", str(vkeys), "--json")
    assert code == 0, printed
    out = json.loads(printed)
    new = load_signer(key).verifier
    assert out["new"]["vkey"] == new.vkey != old.vkey and new.name == old.name
    retired = Path(out["retired_file"])
    assert retired.name == f"log.key.retired-{old.key_id.hex()}"
    assert load_signer(retired).verifier == old
    assert stat.S_IMODE(key.stat().st_mode) == stat.S_IMODE(retired.stat().st_mode) == 0o600
    # the new vkey first, every line kept (an operator's comments too)
    lines = [new.vkey, "# trusted", old.vkey, "other.example+00000000+AQ=="]
    assert vkeys.read_text().splitlines() == lines
    assert not list(tmp_path.glob("*.new")) and not list(tmp_path.glob("*.tmp"))


def test_rotate_a_witness_key_stays_a_witness_key_and_a_vkey_is_refused(tmp_path: Path) -> None:
    key = tmp_path / "w.key"
    _run("keys", "generate", "--type", "witness", "--name", "w1.example", "--out", str(key))
    old = load_witness_signer(key).verifier
    code, printed = _run("keys", "rotate", str(key))
    assert code == 0, printed
    new = load_witness_signer(key).verifier
    assert printed.strip() == new.vkey and new.key_id != old.key_id and new.name == "w1.example"
    public = tmp_path / "w.vkey"
    public.write_text(new.vkey + "\n")
    code, _ = _run("keys", "rotate", str(public))
    assert code == 2 and public.read_text() == new.vkey + "\n"
    code, _ = _run("keys", "rotate", str(tmp_path / "missing.key"))
    assert code == 2
