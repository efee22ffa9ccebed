"""The producer's public surface is pinned: changing it is a deliberate act."""

from __future__ import annotations

import inspect
import uuid
from pathlib import Path

import tracevault.producer
from tracevault.config import Settings
from tracevault.producer import Publisher, Recorder


def test_producer_exports() -> None:
    assert set(tracevault.producer.__all__) == {
        "Recorder", "Tool",
        "Publisher", "PublisherStats", "CloseReport", "producer_config", "publisher_metrics",
        "DrainReport", "SegmentReport", "drain_spool", "spool_status",
    }  # fmt: skip
    for name in tracevault.producer.__all__:
        assert getattr(tracevault.producer, name) is not None


def test_recorder_implements_the_edges_protocol(tmp_path: Path) -> None:
    """Same members, same parameters (names, kinds, defaults) as tracevault.edges.Edges."""
    from tracevault.edges import Edges

    methods = ("model", "amodel", "tool", "atool", "clock", "random", "state", "astate")
    for name in (*methods, "decision"):
        ours = inspect.signature(getattr(Recorder, name))
        theirs = inspect.signature(getattr(Edges, name))
        assert [(p.name, p.kind, p.default) for p in ours.parameters.values()] == [
            (p.name, p.kind, p.default) for p in theirs.parameters.values()
        ], name
        assert inspect.iscoroutinefunction(getattr(Recorder, name)) == name.startswith("a")
    publisher = Publisher(Settings(spool_dir=str(tmp_path)))
    rec = Recorder(publisher=publisher, agent_id="a", agent_version="1")
    assert isinstance(rec, Edges)
    assert rec.run_id == str(uuid.UUID(rec.run_id))
    assert publisher.close().ok
