"""Record an agent with the real Recorder, let the real sequencer seal it, read it back verified."""

from __future__ import annotations

import asyncio
import inspect
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tests.replayer.pipeline import wait_sealed
from tracevault.config import Settings
from tracevault.producer import Publisher, Recorder
from tracevault.replayer import load_run, verify
from tracevault.schemas import TraceEvent


@dataclass
class Recorded:
    run_id: str
    output: Any  # the agent's output, or the exception it raised
    events: list[TraceEvent]


@dataclass
class Pipeline:
    settings: Settings

    def record(
        self,
        agent: Callable[..., Any],
        agent_input: Any,
        *,
        tools: dict[str, Callable[..., Any]] | None = None,
        run_id: str | None = None,
        model_allow: list[str] | None = None,
    ) -> Recorded:
        run_id = run_id or f"sdk-{uuid.uuid4().hex[:12]}"
        publisher = Publisher(self.settings)
        try:
            rec = Recorder(
                publisher=publisher,
                agent_id="sdk-agent",
                agent_version="1.0.0",
                tools=tools,
                run_id=run_id,
                model_allow=model_allow,
            )
            output: Any
            try:
                if inspect.iscoroutinefunction(agent):
                    output = asyncio.run(rec.arun(agent, agent_input))
                else:
                    output = rec.run(agent, agent_input)
            except Exception as exc:
                output = exc
        finally:
            assert publisher.flush(30), "the publisher could not deliver to Kafka"
            publisher.close()
        wait_sealed(self.settings, run_id)
        report = verify(load_run(self.settings, run_id, source="topic"), require_finished=True)
        return Recorded(run_id, output, list(report.events))
