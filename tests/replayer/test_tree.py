"""Sub-agent trees from records: links followed only when both runs agree, bad input named."""

from __future__ import annotations

import dataclasses

import pytest

from tests.replayer.conftest import recorded
from tracevault.errors import ConfigError
from tracevault.links import PARENT_RUN, PARENT_SEQ, SUBAGENT_RUN
from tracevault.replayer import run_tree
from tracevault.replayer.investigate.fork import live_edges_from


def _linked(parent_seq_in_child: str):
    parent = recorded("parent")
    parent[4] = dataclasses.replace(parent[4], attributes={SUBAGENT_RUN: "child"})
    child = recorded("child")
    child[0] = dataclasses.replace(
        child[0], attributes={PARENT_RUN: "parent", PARENT_SEQ: parent_seq_in_child}
    )
    runs = {"parent": parent, "child": child}
    return parent, runs.__getitem__


def test_a_child_that_points_back_is_in_the_tree() -> None:
    parent, load = _linked("4")
    node = run_tree(load, "parent", parent)
    ((child, sub),) = node.children
    assert (child.seq, child.name, child.run_id) == (4, "search", "child")
    assert not isinstance(sub, str) and sub.parent == ("parent", 4) and sub.count == 11


def test_a_forged_link_is_reported_not_followed() -> None:
    parent, load = _linked("7")  # the child says another crossing started it
    ((_, sub),) = run_tree(load, "parent", parent).children
    assert isinstance(sub, str) and "not followed" in sub


def test_a_missing_child_is_reported_and_the_tree_still_drawn() -> None:
    parent, _ = _linked("4")

    def load(run_id: str):
        raise ConfigError(f"no run {run_id}")

    node = run_tree(load, "parent", parent)
    assert node.to_json()["children"][0]["error"] == "ConfigError: no run child"


def test_live_edges_factories_must_return_what_a_recorder_takes() -> None:
    model, tools = live_edges_from({"model": len, "tools": {"t": len}}, "m:f")
    assert model is len and tools == {"t": len}
    for bad in (None, {"modle": len}, {"model": 3}, {"tools": ["t"]}):
        with pytest.raises(ConfigError, match="--live-edges m:f"):
            live_edges_from(bad, "m:f")
