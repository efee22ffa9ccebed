"""Reads of evidence are evidence: a payload opened in the desk is an access event, sealed in
the signed log by the real sequencer, and spooled (never dropped) while Kafka is away.

The desk is served by uvicorn over a real signed archive, its access log publishing with a
real ``Publisher`` to the shared broker; a real ``Sequencer`` seals what it publishes, read
back with the sequencer tests' independent reader and checked against the signed log.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable

from tests.desk.browser import Chromium
from tests.desk.server import desk_conf, serving
from tests.kafka_harness import free_port
from tests.services.sequencer.support import (
    assert_signed_log,
    running,
    sealed_by_run,
    wait_until,
)
from tracevault.config import Settings
from tracevault.desk.access import ACCESS_AGENT, ACCESS_RUN_ATTR, AccessLog
from tracevault.producer import Publisher, drain_spool, spool_status
from tracevault.schemas import EventKind, TraceEvent, decode_event
from tracevault.transparency import parse_vkey

BOILING = {"body": "Water boils at about 93.4 °C at 2000 m.", "url": "https://example.org/boiling"}


def _accesses(settings: Settings) -> dict[str, list[TraceEvent]]:
    """The sealed access runs on ``settings``' topics: run id -> its decoded events."""
    out: dict[str, list[TraceEvent]] = {}
    for run_id, sealed in sealed_by_run(settings).items():
        events = [decode_event(ev.raw) for _, ev in sorted(sealed, key=lambda x: x[1].seq)]
        if events and events[0].agent.agent_id == ACCESS_AGENT:
            out[run_id] = events
    return out


def _entry(events: list[TraceEvent]) -> dict[str, object]:
    """What an access run's RUN_STARTED says: who opened which seqs of which run."""
    started = events[0]
    assert started.kind is EventKind.RUN_STARTED
    entry = json.loads(started.request)["input"]
    assert isinstance(entry, dict)
    return entry


def test_opening_a_payload_seals_an_access_event_in_the_signed_log(
    signed_archive: str,
    log_vkey: str,
    web: Chromium,
    settings_factory: Callable[..., Settings],
) -> None:
    settings = settings_factory(partitions=1, sequencer_batch_wait_ms=20)
    with (
        running(settings, "desk-access") as (_, errors),
        Publisher(settings) as publisher,
        serving(desk_conf(signed_archive, log_vkey, access=AccessLog(publisher))) as desk,
    ):
        web.open(desk + "/runs/run-a")
        web.wait_for(
            "document.readyState === 'complete' && "
            "document.getElementById('tv-status').dataset.state !== 'verifying'",
            what="the run's verdict",
        )
        row = "#seq-5 details[data-part=response]"
        # closed: its hash only, no content in the page until it is opened
        assert web.js(f"document.querySelector('{row} pre')") is None
        assert "SHA-256" in str(web.js(f"document.querySelector('{row}').textContent"))
        assert "93.4" not in str(web.js("document.body.innerHTML"))
        assert not _accesses(settings), "nothing was opened yet"
        web.click("#seq-5 a.open")
        web.wait_for(f"document.querySelector('{row} pre') !== null", what="the opened payload")
        assert web.js(f"document.querySelector('{row}').open") is True
        assert json.loads(str(web.js(f"document.querySelector('{row} pre').textContent"))) == (
            BOILING
        )
        web.screenshot("ui-run-payload-opened")
        web.js("window.scrollTo(0, 0)")  # the page's top: the verdict and the access note
        web.screenshot("ui-run-top")
        said = str(web.js("document.querySelector('#tv-access code').textContent"))

        wait_until(lambda: bool(_accesses(settings)), timeout=60, what="the access sealed")
        assert not errors
    [(access_run, events)] = _accesses(settings).items()
    entry = _entry(events)
    assert entry["run_id"] == "run-a" and entry["seqs"] == [5] and entry["access"] == "payload"
    assert entry["via"] == "loopback" and entry["address"] == "127.0.0.1" and entry["reader"]
    assert events[0].attributes[ACCESS_RUN_ATTR] == "run-a"
    assert [e.kind for e in events] == [EventKind.RUN_STARTED, EventKind.RUN_FINISHED]
    # sealed means in the signed log: every sealed record is under a checkpoint the log key
    # signs, the access run's leaves among them (read back independently of the sequencer)
    cps = assert_signed_log(settings, [parse_vkey(log_vkey)])
    assert sum(len(vc.leaves) for part in cps.values() for vc in part) == len(events)
    assert access_run == said and said.startswith("access.")  # the page names its access run


def test_an_access_while_kafka_is_away_is_spooled_then_sealed(
    signed_archive: str, log_vkey: str, settings_factory: Callable[..., Settings]
) -> None:
    settings = settings_factory(partitions=1, sequencer_batch_wait_ms=20)
    away = settings.model_copy(update={"bootstrap_servers": f"127.0.0.1:{free_port()}"})
    publisher = Publisher(away)  # no broker listens there
    try:
        with serving(desk_conf(signed_archive, log_vkey, access=AccessLog(publisher))) as desk:
            req = urllib.request.Request(
                desk + "/runs/run-a?open=5", headers={"X-Forwarded-Email": "ana@example.org"}
            )
            with urllib.request.urlopen(req, timeout=120) as r:
                page = r.read().decode()
        assert "93.4" in page, "the content opens: its access is on its way (spool)"
    finally:
        report = publisher.close(timeout=2.0)
    waiting = spool_status(away)
    assert waiting.remaining == 2, (report, waiting)
    assert not _accesses(settings), "nothing reached Kafka while it was away"

    with running(settings, "desk-spool") as (_, errors):
        drained = drain_spool(settings)
        assert drained.delivered == 2, drained
        wait_until(lambda: bool(_accesses(settings)), timeout=60, what="the spooled access sealed")
        assert not errors
    [events] = _accesses(settings).values()
    entry = _entry(events)
    assert entry["reader"] == "ana@example.org"
    assert entry["via"] == "proxy-header x-forwarded-email"
    assert entry["run_id"] == "run-a" and entry["seqs"] == [5]
    assert_signed_log(settings, [parse_vkey(log_vkey)])
