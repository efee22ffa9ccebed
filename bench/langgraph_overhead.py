"""What the LangGraph / LangChain integration costs per call: ``chat_model(ChatOpenAI(...),
recorder).invoke(...)`` against the bare ``ChatOpenAI(...).invoke(...)`` to the same local
server, and a wrapped ``@tool`` against the bare tool.

Both chat models talk HTTP to the same in-process server (``tracevault.demo.provider``); the
wrapped one records each call through a real Recorder and Publisher to a live broker
(``--bootstrap``, default ``$KAFKA_BOOTSTRAP_SERVERS`` or 127.0.0.1:9092) on fresh topics that
are deleted afterwards. Calls alternate bare/wrapped so both see the same noise. A local
server answers in well under a millisecond, so the ratio is a worst case: against a real
provider (hundreds of ms per call) the same absolute overhead is a fraction of a percent. The
tool is a pure function, so its ratio only says what a recorded tool call costs in absolute
terms.

Prints one JSON line per mode (``chat``, ``tool``), then one JSON object with the per-call
medians, the overhead in µs and the ratio wrapped/bare per mode.

    .venv/bin/python bench/langgraph_overhead.py [--calls 2000]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from typing import Any

from _alternate import alternate
from _topics import bench_prefix, delete_topics
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from pydantic import SecretStr

from tracevault.config import Settings
from tracevault.demo.provider import provider_server
from tracevault.integrations import langgraph
from tracevault.kafka import ensure_topics
from tracevault.producer import Publisher, Recorder

MESSAGES = [
    ("system", "You are a support agent for a bicycle shop. " * 8),
    ("user", "My rear derailleur skips under load on the two largest cogs."),
]


@tool
def lookup_part(sku: str) -> dict[str, Any]:
    """A part in the shop's catalogue."""
    return {"sku": sku, "name": "rear derailleur", "in_stock": 3}


def bench(publisher: Publisher, url: str, calls: int, mode: str) -> dict[str, float]:
    rec = Recorder(publisher=publisher, agent_id="bench", agent_version="1", input=None)
    with rec:
        if mode == "chat":
            key = SecretStr("bench")
            bare_model = ChatOpenAI(model="gpt-4o-mini", base_url=url, api_key=key, max_retries=0)
            inner = ChatOpenAI(model="gpt-4o-mini", base_url=url, api_key=key, max_retries=0)
            model = langgraph.chat_model(inner, rec)
            out = alternate(
                lambda: bare_model.invoke(MESSAGES), lambda: model.invoke(MESSAGES), calls
            )
        else:
            wrapped = langgraph.tool(lookup_part, rec)
            args = {"sku": "RD-M8100"}
            out = alternate(lambda: lookup_part.invoke(args), lambda: wrapped.invoke(args), calls)
    publisher.flush(60)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    )
    ap.add_argument("--calls", type=int, default=2000, help="samples per mode")
    opts = ap.parse_args()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as spool:
        settings = Settings(
            bootstrap_servers=opts.bootstrap,
            topic_prefix=bench_prefix("langgraph"),
            partitions=1,
            spool_dir=spool,
        )
        ensure_topics(settings)
        try:
            publisher = Publisher(settings)
            with provider_server() as server:
                for mode in ("chat", "tool"):
                    results[mode] = bench(publisher, server.url + "/v1", opts.calls, mode)
                    print(json.dumps({"mode": mode, **results[mode]}), flush=True)
            publisher.close(timeout=30)
        finally:
            delete_topics(opts.bootstrap, settings.topics.all())
    print(json.dumps({"calls": opts.calls, **results}))


if __name__ == "__main__":
    main()
