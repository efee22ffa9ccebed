"""What sealing an event costs the Publisher's thread: µs per event, in C and in Python.

In process, no broker: one run cipher seals the request and response of ``producer_overhead``'s
TOOL_CALL events (its ``ARGS`` and ``RESULTS``, 1.5 KB of canonical JSON each) the way
``ContentHook.wrap`` does, through ``RunCipher.event_sealer``: the C ``Sealer`` where it is
built, and the Python path (two ``AESGCM.encrypt`` calls, pybase64, joins) of a cipher pinned
to Python. Rounds alternate; prints one JSON object with the median and best µs of each and
their ratio.

    .venv/bin/python bench/seal_event.py [--events 20000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

from producer_overhead import ARGS, RESULTS, VARIANTS

from tracevault.content import RunCipher
from tracevault.schemas import canonical_json


def _round(native: bool, events: int, reqs: list[bytes], resps: list[bytes]) -> float:
    cipher = RunCipher.pinned("run-bench", os.urandom(32), os.urandom(4), 0, native=native)
    if native and cipher._sealer is None:
        raise SystemExit("the C sealer is not built: reinstall with a C compiler and libssl-dev")
    seal_event = cipher.event_sealer
    t = time.perf_counter_ns()
    for i in range(events):
        j = i % VARIANTS
        seal_event(i, True, reqs[j], resps[j])
    return (time.perf_counter_ns() - t) / events / 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--events", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=7)
    a = ap.parse_args()
    reqs = [canonical_json({"args": x, "tool": "t"}) for x in ARGS]
    resps = [canonical_json(RESULTS[id(x)]) for x in ARGS]
    c: list[float] = []
    py: list[float] = []
    for _ in range(a.rounds):
        c.append(_round(True, a.events, reqs, resps))
        py.append(_round(False, a.events, reqs, resps))
    out = {
        "request_bytes": len(reqs[0]),
        "response_bytes": len(resps[0]),
        "c_median_us": round(statistics.median(c), 3),
        "c_best_us": round(min(c), 3),
        "python_median_us": round(statistics.median(py), 3),
        "python_best_us": round(min(py), 3),
        "python_over_c": round(statistics.median(py) / statistics.median(c), 2),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
