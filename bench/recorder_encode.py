"""What the Publisher's thread spends per event making its bytes: Python against C.

In-process only (no broker): the Recorder's ``EventEncoder.encode_fields`` (the C of
``tracevault/producer/_cwire.c``) against ``encode_fields_python``, the chain link
(``_cwire.link`` against hashlib in pieces, ``_attest.link_python``), the attestor's whole
step without a note, and both together, on events shaped like ``producer_overhead.py``'s (its
1.5 KB request and response texts, a duration, every other event with an interleave). Each
figure is the best of ``--rounds`` passes over ``--events`` events, in µs per event: that
thread holds the GIL for all of it, beside the agent's thread (docs/design.md, "The
Recorder's encoder").

Prints one JSON object of ``python_us`` and ``c_us`` per step.

    .venv/bin/python bench/recorder_encode.py [--events 50000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from producer_overhead import ARGS, RESULTS

from tracevault.producer import _attest
from tracevault.producer._attest import Attestor, link_python
from tracevault.producer._wire import EventEncoder, EventFields
from tracevault.schemas import AgentInfo, EventKind, canonical_json
from tracevault.transparency import Ed25519Signer


def best_us(fn: Callable[[Any], object], items: Sequence[Any], rounds: int) -> float:
    """µs per item of the quickest of ``rounds`` passes (the least disturbed by the others)."""
    best = float("inf")
    for _ in range(rounds):
        t = time.perf_counter()
        for x in items:
            fn(x)
        best = min(best, time.perf_counter() - t)
    return round(best / len(items) * 1e6, 2)


def events(n: int) -> list[EventFields]:
    reqs = [canonical_json(a) for a in ARGS]
    resps = [canonical_json(RESULTS[id(a)]) for a in ARGS]
    return [
        (i, EventKind.TOOL_CALL, 1_795_950_873_272_582 + i, reqs[i % len(reqs)],
         resps[i % len(resps)], None, None, None, None, None, 37,
         None if i % 2 else (i - 1, i, 3))
        for i in range(1, n + 1)
    ]  # fmt: skip


def attest_us(
    encode: Callable[[EventFields], bytes],
    link: Callable[[bytes, bytes], bytes],
    fields: list[EventFields],
    rounds: int,
) -> float:
    """The attestor's step per event with ``link``, no note due (a note is one in 64)."""
    _attest._link = link
    signer = Ed25519Signer("bench", hashlib.sha256(b"bench").digest())
    att = Attestor("run", encode, signer, every=1 << 40, interval_s=1e9)
    att._last_note = 0
    return best_us(att.encode_fields, fields, rounds)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=50_000)
    p.add_argument("--rounds", type=int, default=7)
    a = p.parse_args()
    enc = EventEncoder(str(uuid.uuid4()), AgentInfo("bench", "1.0.0", "host-1", "bench", "0.1"))
    c_link = _attest._link
    if not isinstance(enc.encode_fields, functools.partial) or c_link is link_python:
        raise SystemExit("the C path is not loaded (not built, or TRACEVAULT_NO_C is set)")
    fields = events(a.events)
    raws: dict[int, bytes] = {f[0]: enc.encode_fields(f) for f in fields}
    assert all(raws[f[0]] == enc.encode_fields_python(f) for f in fields)
    values = list(raws.values())
    prev = hashlib.sha256(b"prev").digest()

    def stub(f: EventFields) -> bytes:  # the attestor's step alone: bytes already made
        return raws[f[0]]

    res = {
        "value_bytes": len(values[0]),
        "encode": {
            "python_us": best_us(enc.encode_fields_python, fields, a.rounds),
            "c_us": best_us(enc.encode_fields, fields, a.rounds),
        },
        "link": {
            "python_us": best_us(lambda r: link_python(prev, r), values, a.rounds),
            "c_us": best_us(lambda r: c_link(prev, r), values, a.rounds),
        },
        "attestor_step": {
            "python_us": attest_us(stub, link_python, fields, a.rounds),
            "c_us": attest_us(stub, c_link, fields, a.rounds),
            "stub_encoder_us": best_us(stub, fields, a.rounds),
        },
        "encode_and_attest": {
            "python_us": attest_us(enc.encode_fields_python, link_python, fields, a.rounds),
            "c_us": attest_us(enc.encode_fields, c_link, fields, a.rounds),
        },
    }
    _attest._link = c_link
    print(json.dumps(res))


if __name__ == "__main__":
    main()
