"""Redaction before recording: matched values never reach Kafka, equal values keep equal
fingerprints, and the redacted run replays clean through the real broker and sequencer."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from click.testing import CliRunner

from tests.content import agents
from tests.content.stack import record_secret_run
from tests.replayer.pipeline import sequencer_running, wait_sealed
from tests.services.sequencer.support import read_all
from tracevault.cli import tracevault
from tracevault.config import Settings
from tracevault.content import REDACT_ATTRIBUTE, Redactor
from tracevault.errors import ConfigError
from tracevault.schemas import decode_event

KEY = "redaction-key-of-the-tests"
RULES = [
    "email",
    "card",
    "path:$.request.input.order",
    "path:$.request.args.order",
    "path:$.response.order",
]


def test_rules_replace_matches_with_keyed_fingerprints() -> None:
    r = Redactor(RULES, KEY.encode())
    note = "mail a.b@example.org, card 4111 1111 1111 1111"
    out = r.apply({"input": {"order": "o-1", "note": note}}, "request")
    note = out["input"]["note"]
    assert "a.b@example.org" not in note and "4111" not in note
    assert note.startswith("mail [redacted:email:") and "card [redacted:card:" in note
    assert out["input"]["order"].startswith("[redacted:path:")
    again = r.apply({"input": {"order": "o-1"}}, "request")["input"]["order"]
    assert again == out["input"]["order"]  # equal values stay equal
    other = Redactor(RULES, b"another key").apply({"input": {"order": "o-1"}}, "request")
    assert other["input"]["order"] != again  # the fingerprint is keyed
    assert r.apply(again, "response") == again  # a mark passed on stays the same mark
    # not a card: fails the Luhn check; the path names the request, not the response
    assert r.apply({"n": "4111 1111 1111 1112"}, "response") == {"n": "4111 1111 1111 1112"}
    assert r.apply({"input": {"order": "x"}}, "response") == {"input": {"order": "x"}}


def test_bad_rules_and_a_missing_key_are_refused() -> None:
    with pytest.raises(ConfigError, match="unknown redaction rule"):
        Redactor(["phone"], b"k")
    with pytest.raises(ConfigError, match="TRACEVAULT_REDACTION_KEY"):
        Redactor(["email"], b"")
    with pytest.raises(ConfigError, match=r"must start with \$\."):
        Redactor(["path:request.x"], b"k")


def test_a_card_number_never_reaches_kafka_and_the_run_replays_clean(
    settings_factory: Callable[..., Settings],
) -> None:
    settings = settings_factory(partitions=1, redaction_key=KEY)
    run_id = "redacted-run"
    with sequencer_running(settings):
        record_secret_run(settings, run_id, redact=RULES)
        wait_sealed(settings, run_id)
    raw = b"".join(r.value or b"" for r in read_all(settings, settings.topics.raw))
    for secret in agents.SECRETS[:3]:  # the e-mail, the order (by path), the card
        assert secret.encode() not in raw, secret
    assert b"[redacted:card:" in raw and b"[redacted:email:" in raw
    assert agents.CC.encode() not in raw
    first = decode_event(read_all(settings, settings.topics.raw)[0].value or b"")
    assert first.attributes[REDACT_ATTRIBUTE].startswith('["email"')

    env: dict[str, Any] = {
        "TRACEVAULT_BOOTSTRAP_SERVERS": settings.bootstrap_servers,
        "TRACEVAULT_TOPIC_PREFIX": settings.topic_prefix,
        "TRACEVAULT_REDACTION_KEY": KEY,
    }
    args = [
        "replay",
        "run",
        run_id,
        "--from",
        "topic",
        "--agent",
        "tests.content.agents:secret_agent",
    ]
    res = CliRunner().invoke(tracevault, args, env=env)
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(tracevault, args, env={**env, "TRACEVAULT_REDACTION_KEY": None})
    assert res.exit_code == 2 and "TRACEVAULT_REDACTION_KEY" in res.output, res.output
