"""What a wrapped SDK client costs per call: ``wrap(OpenAI(...), recorder)`` against the bare
``OpenAI(...)`` call to the same local server.

Both clients talk HTTP to the same in-process server (``tracevault.demo.provider``),
which answers Chat Completions like the real API (JSON, or SSE for ``stream=True``); the
wrapped one records each call through a real Recorder and Publisher to a live broker
(``--bootstrap``, default ``$KAFKA_BOOTSTRAP_SERVERS`` or 127.0.0.1:9092) on fresh topics that
are deleted afterwards. Calls alternate bare/wrapped so both see the same noise. A local
server answers in well under a millisecond, so the ratio is a worst case: against a real
provider (hundreds of ms per call) the same absolute overhead is a fraction of a percent.

Prints one JSON line per mode (``chat``, ``chat_stream``), then one JSON object with the
per-call medians, the overhead in µs and the ratio wrapped/bare per mode.

    .venv/bin/python bench/adapter_overhead.py [--calls 2000]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from typing import Any

import openai
from _alternate import alternate
from _topics import bench_prefix, delete_topics

from tracevault.config import Settings
from tracevault.demo.provider import provider_server
from tracevault.integrations.openai import wrap
from tracevault.kafka import ensure_topics
from tracevault.producer import Publisher, Recorder

MESSAGES = [
    {"role": "system", "content": "You are a support agent for a bicycle shop. " * 8},
    {"role": "user", "content": "My rear derailleur skips under load on the two largest cogs."},
]


def call(client: Any, stream: bool) -> None:
    if stream:
        for _ in client.chat.completions.create(
            model="gpt-4o-mini", messages=MESSAGES, seed=1, stream=True
        ):
            pass
    else:
        client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, seed=1)


def bench(publisher: Publisher, url: str, calls: int, stream: bool) -> dict[str, float]:
    bare_client = openai.OpenAI(base_url=url, api_key="bench", max_retries=0)
    sdk = openai.OpenAI(base_url=url, api_key="bench", max_retries=0)
    rec = Recorder(publisher=publisher, agent_id="bench", agent_version="1", input=None)
    with rec:
        client = wrap(sdk, rec)
        out = alternate(lambda: call(bare_client, stream), lambda: call(client, stream), calls)
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
            topic_prefix=bench_prefix("adapter"),
            partitions=1,
            spool_dir=spool,
        )
        ensure_topics(settings)
        try:
            publisher = Publisher(settings)
            with provider_server() as server:
                for mode, stream in (("chat", False), ("chat_stream", True)):
                    results[mode] = bench(publisher, server.url + "/v1", opts.calls, stream)
                    print(json.dumps({"mode": mode, **results[mode]}), flush=True)
            publisher.close(timeout=30)
        finally:
            delete_topics(opts.bootstrap, settings.topics.all())
    print(json.dumps({"calls": opts.calls, **results}))


if __name__ == "__main__":
    main()
