"""Model-id policy: the Recorder records exact builds, never moving aliases, unless the
deployment allows an id (TRACEVAULT_MODEL_ALLOW or Recorder(model_allow=...))."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.producer.conftest import read_partition
from tests.replayer.recording import record
from tracevault.config import Settings, load_settings
from tracevault.edges import JSON
from tracevault.errors import ConfigError, PayloadError
from tracevault.model_ids import MOVING_ALIASES, check_model_id, is_exact_build
from tracevault.producer import Publisher, Recorder
from tracevault.replayer import replay

# The aliases the issue names; each must be in the maintained list.
NAMED_ALIASES = [
    "gpt-4o", "gpt-4o-mini", "gpt-4.1", "gpt-4.1-mini", "o1", "o3", "o3-mini", "o4-mini",
    "gpt-5", "claude-3-5-sonnet", "claude-3-7-sonnet", "claude-sonnet-4", "claude-sonnet-4-5",
    "claude-opus-4", "gemini-2.5-pro", "gemini-2.5-flash",
]  # fmt: skip
EXACT_BUILDS = [
    "gpt-4o-2024-08-06", "gpt-4o-mini-2024-07-18", "o3-2025-04-16", "gpt-4-0613",
    "claude-3-5-sonnet-20241022", "claude-sonnet-4-5-20250929", "gemini-2.5-pro-001",
    "gemini-1.5-pro-002", "gemini-2.5-pro-preview-05-06", "mistral-large-2411",
    "anthropic.claude-3-5-sonnet-20241022-v2:0", "claude-3-5-sonnet-v2@20241022",
    "ft:gpt-4o-mini-2024-07-18:acme::abc123", "openai/gpt-4o-2024-11-20",
    "support-model-2026-01-15", "llama3@sha256:0123456789abcdef",
]  # fmt: skip


def test_the_maintained_list_has_every_alias_the_issue_names() -> None:
    listed = {alias for aliases in MOVING_ALIASES.values() for alias in aliases}
    assert set(NAMED_ALIASES) <= listed
    for aliases in MOVING_ALIASES.values():
        for alias, dated in aliases.items():
            assert not is_exact_build(alias)
            assert dated is None or is_exact_build(dated), dated


@pytest.mark.parametrize("alias", NAMED_ALIASES)
def test_a_moving_alias_is_refused_with_what_to_record_instead(alias: str) -> None:
    with pytest.raises(PayloadError, match="is a moving alias") as info:
        check_model_id(alias)
    assert info.value.path == "$.model"
    message = str(info.value)
    assert "Record the dated build" in message
    assert f"TRACEVAULT_MODEL_ALLOW={alias}" in message
    assert f"Recorder(model_allow=[{alias!r}])" in message


@pytest.mark.parametrize(
    ("alias", "example"),
    [("gpt-4o", "gpt-4o-2024-08-06"), ("claude-3-5-sonnet", "claude-3-5-sonnet-20241022"),
     ("openai/gpt-4o", "gpt-4o-2024-08-06"), ("us.anthropic.claude-sonnet-4-5",
     "claude-sonnet-4-5-20250929"), ("models/gemini-2.5-pro", "modelVersion")],
)  # fmt: skip
def test_the_refusal_names_a_dated_example(alias: str, example: str) -> None:
    with pytest.raises(PayloadError, match=example):
        check_model_id(alias)


@pytest.mark.parametrize("model", ["gpt-4o-latest", "claude-3-5-sonnet-latest", "latest",
                                   "my-model:default", "gemini-pro-stable"])  # fmt: skip
def test_latest_style_suffixes_are_refused(model: str) -> None:
    with pytest.raises(PayloadError, match="alias"):
        check_model_id(model)


@pytest.mark.parametrize("model", ["my-model", "llama3.1", "qwen2.5-72b", "gpt-4-32k"])
def test_an_id_without_date_or_version_is_refused(model: str) -> None:
    with pytest.raises(PayloadError, match="names no dated or versioned build") as info:
        check_model_id(model)
    assert f"TRACEVAULT_MODEL_ALLOW={model}" in str(info.value)


@pytest.mark.parametrize("model", EXACT_BUILDS)
def test_dated_and_versioned_builds_are_accepted(model: str) -> None:
    assert check_model_id(model) == model


def test_an_allowed_id_is_accepted_exactly() -> None:
    assert check_model_id("gpt-4o", {"gpt-4o"}) == "gpt-4o"
    assert check_model_id("local-llama", frozenset({"local-llama"})) == "local-llama"
    with pytest.raises(PayloadError):
        check_model_id("gpt-4o-mini", {"gpt-4o"})


def test_the_setting_reads_a_comma_separated_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACEVAULT_MODEL_ALLOW", "gpt-4o, local-llama ,")
    assert load_settings().allowed_models == {"gpt-4o", "local-llama"}
    monkeypatch.setenv("TRACEVAULT_MODEL_ALLOW", "gpt 4o")
    with pytest.raises(ConfigError, match="model_allow"):
        load_settings()


# -- through the Recorder, on the real broker ---------------------------------------------


@pytest.fixture
def settings(settings_factory: Callable[..., Settings]) -> Settings:
    return settings_factory(partitions=1)


@pytest.fixture
def publisher(settings: Settings) -> Iterator[Publisher]:
    pub = Publisher(settings)
    yield pub
    assert pub.close(timeout=10).ok


def _model(request: JSON, *, model: str, seed: int | None) -> JSON:
    return {"answer": 42, "model": model}


def _agent(model: str) -> Callable[[JSON, Any], JSON]:
    def agent(task: JSON, edges: Any) -> JSON:
        return edges.model({"q": task}, model=model)

    return agent


def test_the_recorder_refuses_an_alias_and_calls_nothing(publisher: Publisher) -> None:
    called: list[str] = []

    def model(request: JSON, *, model: str, seed: int | None) -> JSON:
        called.append(model)
        return 1

    rec = Recorder(publisher=publisher, agent_id="a", agent_version="1", model=model, input=1)
    with rec as edges, pytest.raises(PayloadError, match="'gpt-4o' is a moving alias") as info:
        edges.model({"q": 1}, model="gpt-4o")
    assert info.value.path == "$.model" and called == []


def test_the_recorder_records_an_alias_the_deployment_allows(
    settings_factory: Callable[..., Settings],
) -> None:
    settings = settings_factory(partitions=1, model_allow="claude-3-5-sonnet")
    with Publisher(settings) as pub:
        out = Recorder(publisher=pub, agent_id="a", agent_version="1", model=_model).run(
            _agent("claude-3-5-sonnet"), "t"
        )
        assert out == {"answer": 42, "model": "claude-3-5-sonnet"}
        out = Recorder(
            publisher=pub, agent_id="a", agent_version="1", model=_model, model_allow=["gpt-4o"]
        ).run(_agent("gpt-4o"), "t")
        assert pub.flush(30)
    models = [ev.model for _, ev in read_partition(settings, 0, 6) if ev.model]
    assert models == ["claude-3-5-sonnet", "gpt-4o"]


@pytest.mark.parametrize("bad", [[""], ["gpt 4o"], ["gpt\t4o"], [3], ["ok", None]])
def test_a_bad_allow_list_is_a_config_error(publisher: Publisher, bad: Any) -> None:
    with pytest.raises(ConfigError, match="model_allow"):
        Recorder(publisher=publisher, agent_id="a", agent_version="1", model_allow=bad)


def test_a_run_recorded_under_an_alias_still_replays() -> None:
    # Recording policy only: a record (an older SDK's, or an allowed id) replays as it is.
    events = record(_agent("gpt-4o"), "t", run_id="alias-run", model_fn=_model, tools={})
    assert events[1].model == "gpt-4o"
    assert replay(events, _agent("gpt-4o")).matched
