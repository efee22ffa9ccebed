"""The messages a newcomer's mistakes get: each names what went wrong and the fix, with the
exit code of its kind (tracevault/errors.py)."""

from __future__ import annotations

import logging
from pathlib import Path

from click.testing import CliRunner, Result

from tests.conftest import unique_name
from tracevault.archive import open_store
from tracevault.cli import tracevault
from tracevault.config import KAFKA_LOG, KafkaLogDedup
from tracevault.demo.commands import path_hint
from tracevault.runid import RUN_ID_RULE
from tracevault.transparency import Ed25519Signer


def _cli(*args: str) -> Result:
    return CliRunner().invoke(tracevault, list(args))


def _flat(res: Result) -> str:
    return " ".join(res.output.split())


def test_a_private_key_given_as_a_trusted_key_is_named_with_the_way_to_the_public_one(
    tmp_path: Path,
) -> None:
    url = f"file://{tmp_path / 'archive'}"
    open_store(url).close()
    skey = Ed25519Signer.generate("me/log").skey
    res = _cli("replay", "--archive-url", url, "verify", "run-a", "--trusted-key", skey)
    assert res.exit_code == 2, res.output
    out = _flat(res)
    assert "private (signer) key" in out and "tracevault keys show" in out
    # a secret is never echoed: its key material is the fifth field (its base64 may itself
    # hold a "+", so the field is cut by position, never by the last "+")
    secret = skey.split("+", 4)[4]
    assert len(secret) > 40 and secret not in res.output


def test_a_run_id_outside_the_grammar_is_refused_with_the_grammar(tmp_path: Path) -> None:
    url = f"file://{tmp_path / 'archive'}"
    open_store(url).close()
    for command in (
        ["verify", "run 42!", "--from", "archive"],
        ["show", "run 42!"],
        ["export", "run 42!", "-o", str(tmp_path / "out")],
    ):
        res = _cli("replay", "--archive-url", url, *command)
        assert res.exit_code == 2, res.output
        out = _flat(res)
        assert RUN_ID_RULE in out and "'run 42!'" in out
        assert "not in the archive" not in out
    # an id that fits the grammar and is absent is still "not found"
    res = _cli("replay", "--archive-url", url, "show", "run-42")
    assert res.exit_code == 3 and "not in the archive" in _flat(res)


def test_a_subcommand_typed_at_the_top_level_names_its_group() -> None:
    res = _cli("export", "run-42", "-o", "out")
    assert res.exit_code == 2
    assert "'tracevault replay export'" in res.output
    res = _cli("replai")
    assert res.exit_code == 2 and "Did you mean replay?" in res.output


def test_a_missing_topic_names_the_bootstrap_servers_asked(kafka_bootstrap: str) -> None:
    # a forgotten bootstrap setting reaching another broker: the topics are not there
    prefix = unique_name("absent")
    res = _cli(
        "--bootstrap-servers", kafka_bootstrap, "--prefix", prefix,
        "replay", "show", "run-42", "--from", "topic",
    )  # fmt: skip
    assert res.exit_code == 3, res.output
    out = _flat(res)
    assert f"topic {prefix}.heads does not exist on the Kafka cluster at {kafka_bootstrap}" in out
    assert "--bootstrap-servers" in out and "tracevault topics create" in out


def test_the_demo_says_how_to_get_on_path_for_the_install_it_runs_from(tmp_path: Path) -> None:
    # a checkout dev/demo set up: its .venv
    venv_bin = tmp_path / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    (venv_bin / "activate").write_text("")
    assert "`. .venv/bin/activate`" in path_hint(venv_bin, tmp_path)
    # a wheel installed elsewhere (pipx, --user, a system Python): no .venv here to activate
    user_bin = tmp_path / "home" / ".local" / "bin"
    user_bin.mkdir(parents=True)
    hint = path_hint(user_bin, tmp_path / "work")
    assert ".venv" not in hint and f"export PATH={user_bin}:$PATH" in hint


def test_librdkafka_lines_pass_once_per_kind_and_window() -> None:
    def line(n: int, fac: str = "FAIL") -> logging.LogRecord:
        text = f"127.0.0.1:9/bootstrap: Connect failed (after {n}ms in state CONNECT)"
        return logging.LogRecord("x", logging.ERROR, __file__, 1, "%s [%s] %s",
                                 (fac, "tracevault#consumer-1", text), None)  # fmt: skip

    dedup = KafkaLogDedup(window_s=3600)
    passed = [dedup.filter(line(n)) for n in range(50)]
    assert passed == [True] + [False] * 49  # the same refusal, numbers aside: once
    assert dedup.filter(line(0, fac="BROKERFAIL"))  # another kind passes
    again = KafkaLogDedup(window_s=0)
    assert all(again.filter(line(n)) for n in range(3))
    assert any(isinstance(f, KafkaLogDedup) for f in KAFKA_LOG.filters)
