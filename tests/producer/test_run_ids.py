"""The Recorder refuses a run id outside the grammar, in the agent, naming the rule.

``.``, ``..``, 85 CJK characters and a 255-byte ASCII id were accepted and sealed, and then
stopped a partition's archive (or, on ``file://``, the archiver). Every id the project makes
itself (the default UUID, sub-agents, forks) fits (docs/design.md, "Run ids").
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.producer.conftest import read_partition
from tracevault.config import Settings
from tracevault.errors import ConfigError
from tracevault.producer import Publisher, Recorder
from tracevault.runid import MAX_RUN_ID_BYTES, RUN_ID_RULE, run_id_problem
from tracevault.schemas import EventKind

REFUSED = [".", "..", "中" * 85, "x" * 255, "", "x" * 129, "a/b", "run 1", "é" * 40, "a\x00b"]
ACCEPTED = ["run-1", "tenant:job-42", "2026-12-01T10:00:00.5", "x" * MAX_RUN_ID_BYTES, "..."]


@pytest.fixture
def publisher(settings_factory: Callable[..., Settings]) -> Iterator[Publisher]:
    pub = Publisher(settings_factory(partitions=1))
    yield pub
    assert pub.close(timeout=10).ok


def _agent(lead: Recorder) -> Callable[[Any, Recorder], Any]:
    def agent(task: Any, edges: Recorder) -> Any:
        return edges.subagent("helper", lambda i, _e: {"got": i}, {"task": task})

    return agent


@pytest.mark.parametrize("run_id", REFUSED, ids=lambda r: f"{len(r.encode())}B:{r[:6]!r}")
def test_a_run_id_outside_the_grammar_is_refused_before_anything_is_published(
    publisher: Publisher, run_id: str
) -> None:
    with pytest.raises(ConfigError) as info:
        Recorder(publisher=publisher, agent_id="a", agent_version="1", run_id=run_id)
    assert "Recorder(run_id=...)" in str(info.value) and RUN_ID_RULE in str(info.value)
    # nothing was published: a good run after it is the partition's first record
    good = Recorder(publisher=publisher, agent_id="a", agent_version="1", run_id="after")
    good.run(lambda i, _e: i, {"x": 1})
    assert publisher.flush(30)
    got = read_partition(publisher.settings, 0, 2)
    assert [(k, ev.run_id, ev.seq) for k, ev in got] == [
        (b"after", "after", 0),
        (b"after", "after", 1),
    ]


@pytest.mark.parametrize("run_id", ACCEPTED)
def test_ids_of_the_grammar_are_recorded_as_given(publisher: Publisher, run_id: str) -> None:
    rec = Recorder(publisher=publisher, agent_id="a", agent_version="1", run_id=run_id)
    rec.run(lambda i, _e: i, None)
    assert publisher.flush(30)
    [(key, ev), _] = read_partition(publisher.settings, 0, 2)
    assert key == run_id.encode() and ev.run_id == run_id and ev.kind is EventKind.RUN_STARTED


def test_every_id_the_recorder_makes_fits_the_grammar(publisher: Publisher) -> None:
    lead = Recorder(publisher=publisher, agent_id="lead", agent_version="1")
    assert run_id_problem(lead.run_id) is None
    lead.run(_agent(lead), "t")
    assert publisher.flush(30)
    runs = {ev.run_id for _, ev in read_partition(publisher.settings, 0, 4)}
    assert len(runs) == 2 and lead.run_id in runs, "the lead and its sub-agent"
    assert all(run_id_problem(r) is None for r in runs)
