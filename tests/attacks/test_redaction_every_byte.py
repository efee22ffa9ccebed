"""Redaction has no gaps: a card number and an e-mail through every edge reach no byte.

A plaintext deployment (no key provider: nothing is encrypted, so only redaction stands
between the values and the stores). An agent recorded with ``Recorder(redact=["card",
"email"])`` hands both values to every edge: the input, a model request and its answer, tool
arguments and result, a decision (choice and options), a state read, a tool that raises with
both in its message (caught), and its own exception at the end (``error.message``, which
main recorded in clear: issue 30, item 5). Then the real sequencer seals it, a conflicting
copy of one event goes to the DLQ (a reason of its own), the archiver archives it, and the
run is exported as a bundle and as OTel spans (with and without ``--content``). Every byte of
``raw``, ``sealed``, ``heads`` and ``dlq`` (consumed, headers included), the spool
directory (the same agent recorded again while no broker answers: its events are spooled),
the archive directory (Avro blocks inflated), the bundle, both OTel exports and the
services' captured log lines is searched: neither value appears, and the redaction marks
do (the search would have found them).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import logging
from pathlib import Path
from typing import Any

import fastavro
import pytest
from click.testing import CliRunner
from pydantic import SecretStr

from tests.faults.test_outage import wait_for
from tests.kafka_harness import free_port
from tests.replayer.pipeline import fresh_settings, record_live, sequencer_running, wait_sealed
from tests.services.sequencer.support import produce_raw, read_all
from tracevault.cli import tracevault
from tracevault.producer import Publisher, Recorder
from tracevault.schemas import decode_event, encode_event
from tracevault.services.archiver import Archiver

CARD = "4111 1111 1111 1111"
EMAIL = "victim.bob@example.com"
SECRETS = (CARD, CARD.replace(" ", ""), EMAIL)
KEY = "redaction-key-of-the-grep"
RUN = "redacted-every-edge"


class Declined(Exception):
    """A tool's error whose message carries content."""


def _model(request: Any, *, model: str, seed: int | None) -> Any:
    return {"text": f"charged {CARD} and mailed {EMAIL}", "tokens": 3}


def _charge(args: Any) -> Any:
    raise Declined(f"card {args['card']} for {args['email']} declined")


def _lookup(args: Any) -> Any:
    return {"card": CARD, "owner": EMAIL}


def agent(agent_input: Any, edges: Any) -> Any:
    found = edges.tool("lookup", {"who": agent_input["email"], "card": agent_input["card"]})
    edges.model({"messages": [{"role": "user", "content": f"bill {found['card']} {EMAIL}"}]},
                model="gpt-4o-2024-08-06", seed=1)  # fmt: skip
    edges.decision(f"refund to {EMAIL}?", f"yes, card {CARD}", options=[f"no {EMAIL}", CARD])
    edges.state("profile", read=lambda: {"email": EMAIL, "card": CARD})
    with contextlib.suppress(Declined):
        edges.tool("charge", {"card": CARD, "email": EMAIL})
    raise Declined(f"card {CARD} for {EMAIL} declined", CARD, EMAIL)


def _files(root: Path) -> bytes:
    """Every file under ``root``, an Avro container's records read out too (deflated)."""
    out = []
    for p in sorted(root.rglob("*")):
        if not p.is_file():
            continue
        data = p.read_bytes()
        out.append(data)
        if data.startswith(b"Obj\x01"):
            for rec in fastavro.reader(io.BytesIO(data)):
                out.append(json.dumps(rec, default=repr).encode())
                out += [v for v in rec.values() if isinstance(v, bytes)]
    return b"\n".join(out)


def _topic(settings: Any, topic: str) -> bytes:
    out = []
    for r in read_all(settings, topic):
        out.append(r.value or b"")
        out.append(r.key or b"")
        headers = r.headers or {}
        items = headers.items() if isinstance(headers, dict) else headers
        out += [str(k).encode() + b"=" + bytes(v or b"") for k, v in items]
    return b"\n".join(out)


def test_no_byte_anywhere_holds_the_redacted_values(
    kafka_bootstrap: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="tracevault")
    settings = fresh_settings(kafka_bootstrap, tmp_path, "tvredgrep").model_copy(
        update={"redaction_key": SecretStr(KEY)}
    )
    rules = ["card", "email"]
    with sequencer_running(settings):
        out = record_live(settings, agent, {"email": EMAIL, "card": CARD}, RUN, model=_model,
                          tools={"lookup": _lookup, "charge": _charge}, redact=rules)  # fmt: skip
        assert isinstance(out, Declined), out  # the agent's own exception, recorded
        wait_sealed(settings, RUN)
        # a conflicting copy of seq 2 (another timestamp): the DLQ gets it, with its reason
        raw = [decode_event(r.value) for r in read_all(settings, settings.topics.raw) if r.value]
        clash = dataclasses.replace(raw[2], at=raw[2].at + 1)
        produce_raw(settings, [(RUN, encode_event(clash))])
        wait_for_dlq(settings)
    Archiver(settings).run(until_idle=1.0)
    _spool_a_run(settings, rules)
    env = {
        "TRACEVAULT_BOOTSTRAP_SERVERS": settings.bootstrap_servers,
        "TRACEVAULT_TOPIC_PREFIX": settings.topic_prefix,
        "TRACEVAULT_ARCHIVE_URL": settings.archive_url,
        "TRACEVAULT_REDACTION_KEY": KEY,
    }
    outputs = []
    bundle, otel, otel_all = tmp_path / "bundle", tmp_path / "otel.json", tmp_path / "all.json"
    for args in (["export", RUN, "-o", str(bundle)],
                 ["export", RUN, "--otel", "-o", str(otel)],
                 ["export", RUN, "--otel", "--content", "-o", str(otel_all)],
                 ["show", RUN, "--json"], ["verify", RUN],
                 # the re-run's own exception is redacted as the Recorder redacted it: no
                 # divergence on error.message
                 ["run", RUN, "--agent", f"{__name__}:agent"]):  # fmt: skip
        res = CliRunner().invoke(tracevault, ["replay", *args], env=env)
        assert res.exit_code == 0, (args, res.output)
        outputs.append(res.output.encode())
    t = settings.topics
    everything = {
        "raw": _topic(settings, t.raw),
        "sealed": _topic(settings, t.sealed),
        "heads": _topic(settings, t.heads),
        "dlq": _topic(settings, t.dlq),
        "spool": _files(Path(settings.spool_dir)) if Path(settings.spool_dir).exists() else b"",
        "archive": _files(Path(settings.archive_url.removeprefix("file://"))),
        "bundle": _files(bundle),
        "otel": otel.read_bytes(),
        "otel --content": otel_all.read_bytes(),
        "cli output": b"\n".join(outputs),
        "logs": "\n".join(r.getMessage() for r in caplog.records).encode(),
    }
    for where, data in everything.items():
        for secret in SECRETS:
            assert secret.encode() not in data, (where, secret)
    # the search would have found them: the marks are where the values were
    for where in ("raw", "sealed", "archive", "bundle", "otel --content", "spool"):
        assert b"[redacted:card:" in everything[where], where
        assert b"[redacted:email:" in everything[where], where
    assert everything["dlq"], "the DLQ holds the conflicting copy"
    error = [e for e in (decode_event(v) for v in _values(settings, t.raw)) if e.error]
    assert any(e.error.message.startswith("card [redacted:card:") for e in error), error  # type: ignore[union-attr]
    # the OTel span status of the ERROR carries the redacted message, never the value
    assert b"[redacted:card:" in everything["otel"] or b"declined" not in everything["otel"]


def _spool_a_run(settings: Any, rules: list[str]) -> None:
    """The same agent recorded while no broker answers: its events wait in the spool."""
    away = settings.model_copy(update={"bootstrap_servers": f"127.0.0.1:{free_port()}"})
    publisher = Publisher(away)
    try:
        rec = Recorder(publisher=publisher, agent_id="replayer-golden", agent_version="1.0.0",
                       model=_model, tools={"lookup": _lookup, "charge": _charge},
                       run_id=f"{RUN}-spooled", redact=rules)  # fmt: skip
        with pytest.raises(Declined):
            rec.run(agent, {"email": EMAIL, "card": CARD})
    finally:
        report = publisher.close(timeout=2)
    assert report.spooled and report.spool_files, report


def _values(settings: Any, topic: str) -> list[bytes]:
    return [r.value for r in read_all(settings, topic) if r.value]


def wait_for_dlq(settings: Any) -> None:
    wait_for(lambda: bool(read_all(settings, settings.topics.dlq)), 30, "the DLQ copy")
