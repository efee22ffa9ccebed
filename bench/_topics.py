"""The topics a bench makes on the shared broker: named under one prefix, deleted at its end.

``AdminClient.delete_topics`` only sends the request: a bench that does not wait for its
answer (or exits first) leaves its topics on the broker, run after run. So every bench names
its topics with :func:`bench_prefix` and deletes them with :func:`delete_topics`, which waits
for the broker's answer (bounded) and says on stderr what it could not delete.
``BENCH_TOPIC_PREFIX`` (default ``bench``) starts every such name: tests/test_bench_smoke.py
gives each bench a unique one and checks that no topic under it is left afterwards.
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from collections.abc import Iterable

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

__all__ = ["PREFIX_ENV", "bench_prefix", "delete_topics"]

PREFIX_ENV = "BENCH_TOPIC_PREFIX"


def bench_prefix(stem: str) -> str:
    """A fresh topic prefix for one bench round: ``<BENCH_TOPIC_PREFIX>-<stem>-<8 hex>``."""
    return f"{os.environ.get(PREFIX_ENV, 'bench')}-{stem}-{uuid.uuid4().hex[:8]}"


def delete_topics(bootstrap: str, topics: Iterable[str], timeout: float = 60.0) -> list[str]:
    """Delete ``topics`` and wait for the broker's answer, ``timeout`` seconds in all.

    A topic already gone counts as deleted. Returns the topics not deleted, each named on
    stderr with the reason (a bench's figures stand without its clean-up, so this does not
    raise: the operator deletes what is named).
    """
    names = sorted(set(topics))
    if not names:
        return []
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    deadline = time.monotonic() + timeout
    left: dict[str, str] = {}
    try:
        futures = admin.delete_topics(names, request_timeout=timeout, operation_timeout=timeout)
    except KafkaException as exc:
        futures, left = {}, dict.fromkeys(names, str(exc))
    for name, fut in futures.items():
        try:
            fut.result(timeout=max(0.0, deadline - time.monotonic()))
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            if isinstance(err, KafkaError) and err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                continue  # gone already
            left[name] = str(exc)
        except TimeoutError:
            left[name] = f"no answer from the broker within {timeout:g} s"
    if left:
        print(
            f"bench: {len(left)} of {len(names)} topics were NOT deleted; delete them by hand:",
            file=sys.stderr,
        )
        for name, why in sorted(left.items()):
            print(f"  {name}: {why}", file=sys.stderr)
    else:
        print(f"bench: deleted {len(names)} topics", file=sys.stderr)
    return sorted(left)
