"""Bare vs wrapped call timing shared by the adapter benches: calls alternate so both sides
see the same noise on this shared 2-core machine, and only ratios are compared."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def quantile(xs: list[int], q: float) -> float:
    """The ``q`` quantile of nanosecond samples, in µs."""
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] / 1000.0


def alternate(bare: Callable[[], Any], wrapped: Callable[[], Any], calls: int) -> dict[str, float]:
    """Medians, p99s, the median overhead in µs and the ratio wrapped/bare of ``calls``
    alternating pairs, after 200 warm-up pairs (connections open, caches hot)."""
    clock = time.perf_counter_ns
    b: list[int] = []
    w: list[int] = []
    for _ in range(200):
        bare()
        wrapped()
    for _ in range(calls):
        t0 = clock()
        bare()
        t1 = clock()
        wrapped()
        t2 = clock()
        b.append(t1 - t0)
        w.append(t2 - t1)
    return summary(b, w)


def summary(b: list[int], w: list[int], side: str = "wrapped") -> dict[str, float]:
    """Medians and p99s in µs of bare (``b``) and ``side`` (``w``) nanosecond samples, the
    median overhead and the ratio ``side``/bare."""
    b50, w50 = quantile(b, 0.5), quantile(w, 0.5)
    return {
        "bare_median_us": b50,
        f"{side}_median_us": w50,
        "bare_p99_us": quantile(b, 0.99),
        f"{side}_p99_us": quantile(w, 0.99),
        "median_overhead_us": round(w50 - b50, 1),
        "ratio": round(w50 / b50, 3),
    }
