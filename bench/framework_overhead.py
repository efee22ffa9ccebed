"""What recording costs a whole agent run in each agent framework: Pydantic AI's
``agent.run``, Google ADK's ``Runner.run_async`` and the OpenAI Agents SDK's ``Runner.run``,
each bare against the same agent through tracevault's one-line door.

One run is one agent turn as the frameworks' docs write it: the model asks for a tool, the
tool runs, the model answers (two model requests, one tool call). Every side talks HTTP to the
same in-process server (``tracevault.demo.provider``); a recorded run is one Recorder (its
RUN_STARTED, the crossings, RUN_FINISHED) through a real Publisher to a live broker
(``--bootstrap``, default ``$KAFKA_BOOTSTRAP_SERVERS`` or 127.0.0.1:9092) on fresh topics that
are deleted afterwards. Bare and recorded runs alternate so both see the same noise on this
shared machine; only ratios are compared. A local server answers in well under a millisecond,
so the ratio is a worst case: against a real provider (hundreds of ms per request) the same
absolute overhead is a fraction of a percent.

The bare ADK agent calls the model through ADK's own ``LiteLlm``; the recorded one through the
plugin's ``AsyncOpenAI`` (docs/integrations.md): the ratio is what a user moving to the plugin
pays, stack included.

Prints one JSON line per framework, then one JSON object with the per-run medians, the
overhead in µs and the ratio recorded/bare per framework.

    .venv/bin/python bench/framework_overhead.py [--runs 300] [--only pydantic_ai,adk,...]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Any

import openai
from _alternate import summary
from _topics import bench_prefix, delete_topics

from tracevault.config import Settings
from tracevault.demo.provider import provider_server
from tracevault.edges import Edges
from tracevault.kafka import ensure_topics
from tracevault.producer import Publisher, Recorder

QUESTION = "What is the weather in Paris?"
Run = Callable[[Edges | None], Awaitable[str]]
#: a framework's run and what closes its clients (on the loop the runs used)
Setup = tuple[Run, Callable[[], Awaitable[None]]]


def get_weather(city: str) -> str:
    """The sky over a city."""
    return f"clear over {city}, 21C"


def pydantic_ai_runs(url: str) -> Setup:
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    from tracevault.integrations import pydantic_ai

    agent = Agent("openai:gpt-4o-mini", defer_model_check=True, instructions="Use the tool.")
    agent.tool_plain(get_weather)
    client = openai.AsyncOpenAI(base_url=url, api_key="bench", max_retries=0)
    model = OpenAIChatModel("gpt-4o-mini", provider=OpenAIProvider(openai_client=client))

    async def one(edges: Edges | None) -> str:
        if edges is None:
            return str((await agent.run(QUESTION, model=model)).output)
        return str((await pydantic_ai.run(agent, QUESTION, edges, client=client)).output)

    return one, client.close


def adk_runs(url: str) -> Setup:
    from google.adk.agents import Agent
    from google.adk.apps import App
    from google.adk.models.lite_llm import LiteLlm
    from google.adk.plugins import BasePlugin
    from google.adk.runners import InMemoryRunner
    from google.genai import types

    from tracevault.integrations.adk import recorded

    client = openai.AsyncOpenAI(base_url=url, api_key="bench", max_retries=0)
    model = LiteLlm(model="openai/gpt-4o-mini", api_base=url, api_key="bench")
    message = types.Content(role="user", parts=[types.Part(text=QUESTION)])

    async def one(edges: Edges | None) -> str:
        root = Agent(name="weather", model=model, instruction="Use the tool.", tools=[get_weather])
        plugins: list[BasePlugin] = [] if edges is None else [recorded(edges, client=client)]
        runner = InMemoryRunner(app=App(name="bench", root_agent=root, plugins=plugins))
        session = await runner.session_service.create_session(app_name="bench", user_id="u")
        final = ""
        async for event in runner.run_async(user_id="u", session_id=session.id,
                                            new_message=message):  # fmt: skip
            if event.is_final_response() and event.content and event.content.parts:
                final = "".join(p.text or "" for p in event.content.parts)
        await runner.close()
        return final

    return one, client.close


def openai_agents_runs(url: str) -> Setup:
    from agents import Agent, OpenAIProvider, RunConfig, Runner, function_tool

    from tracevault.integrations import openai_agents

    client = openai.AsyncOpenAI(base_url=url, api_key="bench", max_retries=0)
    agent = Agent(name="weather", instructions="Use the tool.", model="gpt-4o-mini",
                  tools=[function_tool(get_weather)])  # fmt: skip
    bare = RunConfig(
        model_provider=OpenAIProvider(openai_client=client, use_responses=False),
        tracing_disabled=True,
    )

    async def one(edges: Edges | None) -> str:
        if edges is None:
            return str((await Runner.run(agent, QUESTION, run_config=bare)).final_output)
        result = await openai_agents.run(
            agent, QUESTION, edges, client=client, run_config=RunConfig(tracing_disabled=True)
        )
        return str(result.final_output)

    return one, client.close


FRAMEWORKS: dict[str, Callable[[str], Setup]] = {
    "pydantic_ai": pydantic_ai_runs,
    "adk": adk_runs,
    "openai_agents": openai_agents_runs,
}


def bench(publisher: Publisher, setup: Setup, runs: int, warmup: int) -> dict[str, float]:
    """Alternating bare/recorded runs on one event loop, after ``warmup`` pairs."""
    one, close = setup
    loop = asyncio.new_event_loop()
    clock = time.perf_counter_ns

    def recorded() -> None:
        rec = Recorder(publisher=publisher, agent_id="bench", agent_version="1", input=None)
        with rec:
            loop.run_until_complete(one(rec))

    b: list[int] = []
    w: list[int] = []
    try:
        for i in range(warmup + runs):
            t0 = clock()
            loop.run_until_complete(one(None))
            t1 = clock()
            recorded()
            t2 = clock()
            if i >= warmup:
                b.append(t1 - t0)
                w.append(t2 - t1)
    finally:
        loop.run_until_complete(close())
        loop.close()
    publisher.flush(60)
    return summary(b, w, "recorded")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=300, help="measured pairs per framework")
    ap.add_argument("--warmup", type=int, default=20, help="pairs before measuring")
    ap.add_argument("--only", default=",".join(FRAMEWORKS), help="frameworks, comma-separated")
    ap.add_argument(
        "--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    )
    args = ap.parse_args()
    names = [n for n in args.only.split(",") if n]
    unknown = sorted(set(names) - set(FRAMEWORKS))
    if unknown:
        ap.error(f"--only: unknown {unknown}; choose from {sorted(FRAMEWORKS)}")
    os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")  # no export to OpenAI's servers
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(
            bootstrap_servers=args.bootstrap,
            topic_prefix=bench_prefix("frameworks"),
            spool_dir=f"{tmp}/spool",
            archive_url=f"file://{tmp}/archive",
        )
        ensure_topics(settings)
        publisher = Publisher(settings)
        results: dict[str, Any] = {"runs": args.runs}
        try:
            with provider_server() as server:
                for name in names:
                    setup = FRAMEWORKS[name](server.url + "/v1")
                    out = bench(publisher, setup, args.runs, args.warmup)
                    print(json.dumps({"framework": name, **out}), flush=True)
                    results[name] = out
        finally:
            publisher.close(timeout=30)
            delete_topics(args.bootstrap, settings.topics.all())
    print(json.dumps(results))


if __name__ == "__main__":
    main()
