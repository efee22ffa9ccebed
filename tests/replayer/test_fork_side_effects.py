"""Issue 23: a fork does not send the email again unless told to.

A run of an agent that sends mail through a side-effecting tool is recorded by the real
Recorder and sealed by the real Sequencer; ``replay run --until 1 --then live`` forks it
after its search. Every real call of ``send_email`` is counted. Before, the fork ran
``send_email`` live, with a new idempotency key.
"""

from __future__ import annotations

import json
from typing import Any

from tests.replayer import cancel_agents as ca
from tests.replayer.pipeline import replay_cli, sequencer_running, wait_sealed
from tracevault.config import Settings
from tracevault.producer import Publisher, Recorder
from tracevault.replayer import load_run, verify
from tracevault.replayer.investigate.fork import SERVED_FROM
from tracevault.schemas import EventKind

AGENT = "tests.replayer.cancel_agents:mail_agent"
TASK = {"q": "order 1234", "to": "customer@example.org"}


def _cli(settings: Settings, *args: str) -> Any:
    return replay_cli(settings, *args, width=200)


def _fork(settings: Settings, edges: str, *extra: str) -> Any:
    return _cli(settings, "run", "mail-1", "--from", "topic", "--until", "1", "--then", "live",
                "--agent", AGENT, "--live-edges", f"tests.replayer.cancel_agents:{edges}",
                *extra)  # fmt: skip


def _events(settings: Settings, run_id: str) -> Any:
    wait_sealed(settings, run_id)
    return verify(load_run(settings, run_id, source="topic"), require_finished=True).events


def test_a_fork_serves_or_refuses_side_effects_unless_named_live(settings_factory) -> None:
    settings = settings_factory(partitions=2)
    ca.SENT.clear()
    with sequencer_running(settings):
        publisher = Publisher(settings)
        try:
            rec = Recorder(publisher=publisher, agent_id="mailer", agent_version="1",
                           model=ca.mail_model, tools=ca.MAIL_TOOLS, run_id="mail-1")  # fmt: skip
            live_output = rec.run(ca.mail_agent, TASK)
        finally:
            assert publisher.flush(30)
            publisher.close()
        assert len(ca.SENT) == 1  # the one real mail, sent live
        original = _events(settings, "mail-1")
        (send,) = [ev for ev in original if ev.kind is EventKind.TOOL_CALL and ev.seq > 1
                   and json.loads(ev.request)["tool"] == "send_email"]  # fmt: skip
        assert send.idempotency_key == f"mail-1:{send.seq}"

        # 1. the same request after the fork point: the recorded result, nothing sent
        res = _fork(settings, "mail_live_edges", "--json")
        assert res.exit_code == 0, res.output
        assert len(ca.SENT) == 1, "the fork sent the email again"
        out = json.loads(res.output)
        assert out["refused"] == [] and out["error"] is None
        assert out["output"] == live_output
        fork = _events(settings, out["run_id"])
        assert fork[send.seq].response == send.response
        assert fork[send.seq].attributes[SERVED_FROM] == f"mail-1:{send.seq}"
        assert fork[2].attributes.get(SERVED_FROM) is None  # the model went live

        # 2. named live: sent for real, once, with the new run's key
        res = _fork(settings, "mail_live_edges", "--live-tools", "send_email", "--json")
        assert res.exit_code == 0, res.output
        fork_id = json.loads(res.output)["run_id"]
        assert len(ca.SENT) == 2
        assert ca.SENT[-1][1] == f"{fork_id}:{send.seq}"

        # 3. a changed request (the model wrote another mail): refused, by name, nothing sent
        res = _fork(settings, "mail_changed_live_edges")
        assert res.exit_code == 2, res.output
        assert len(ca.SENT) == 2, "the fork sent a mail the record never sent"
        said = " ".join(res.output.split())
        assert "tool 'send_email' has side effects and was not run" in said, said
        assert f"differs from the recorded call at seq {send.seq}" in said
        assert "$.request.args.body" in said and "--live-tools send_email" in said
        res = _fork(settings, "mail_changed_live_edges", "--json")
        assert res.exit_code == 2
        out = json.loads(res.output)
        assert len(out["refused"]) == 1 and "--live-tools send_email" in out["refused"][0]
        refused = _events(settings, out["run_id"])[send.seq]
        assert refused.error is not None and refused.error.type.endswith("ForkRefusalError")
        assert len(ca.SENT) == 2

        # 4. a misspelt name runs nothing and says which names there are
        res = _fork(settings, "mail_live_edges", "--live-tools", "search,send_emial")
        assert res.exit_code == 2, res.output
        assert "--live-tools names 'send_emial'" in res.output and "send_email" in res.output
        assert len(ca.SENT) == 2


def test_live_tools_names_only_tools_the_fork_knows(settings_factory) -> None:
    settings = settings_factory(partitions=1)
    res = _cli(settings, "run", "nobody", "--agent", AGENT, "--live-tools", "send_email")
    assert res.exit_code == 2 and "needs both --until N and --then live" in res.output
