"""What ``import tracevault.producer`` costs an agent process: time and modules loaded.

Each sample is a fresh interpreter running ``python -X importtime -c "import
tracevault.producer"``; the figure is the cumulative time CPython reports for the
``tracevault.producer`` line (its own import and everything it pulled in, the interpreter's
start not included), and how many modules, ``tracevault`` ones among them, the import left in
``sys.modules``. Given several source trees (``--tree``, e.g. a checkout of main and this one),
samples alternate between them, so both see the same load.

Prints one JSON object per tree: median and quartiles of the import time in ms, the module
counts, and which of the heavy dependencies (boto3, botocore, the transparency log, content
encryption, prometheus_client) were loaded.

    .venv/bin/python bench/sdk_import.py [--samples 15] [--tree /path/to/main --tree .]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

HEAVY = ("boto3", "botocore", "tracevault.transparency", "tracevault.content", "prometheus_client")
_PROBE = (
    "import sys, json, tracevault.producer; "
    "print(json.dumps([len(sys.modules), sum(m.split('.')[0] == 'tracevault' for m in sys.modules),"
    f" [m for m in {HEAVY!r} if m in sys.modules]]))"
)
_LINE = re.compile(r"import time:\s+\d+ \|\s+(\d+) \| tracevault\.producer$")


def sample(tree: Path) -> tuple[float, int, int, list[str]]:
    """ms of ``import tracevault.producer`` from ``tree``, modules, tracevault modules, heavy."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", _PROBE],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=tree,
    )
    cumulative = next(
        int(m.group(1)) for m in map(_LINE.match, out.stderr.splitlines()) if m is not None
    )
    modules, ours, heavy = json.loads(out.stdout)
    return cumulative / 1000, modules, ours, heavy


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--samples", type=int, default=15, help="fresh interpreters per tree")
    ap.add_argument(
        "--tree", action="append", type=Path, help="source tree to import from (default: .)"
    )
    opts = ap.parse_args()
    trees = [t.resolve() for t in (opts.tree or [Path()])]
    times: dict[Path, list[float]] = {t: [] for t in trees}
    shape: dict[Path, tuple[int, int, list[str]]] = {}
    for _ in range(opts.samples):
        for tree in trees:  # alternate: both trees see the same minutes of load
            ms, modules, ours, heavy = sample(tree)
            times[tree].append(ms)
            shape[tree] = (modules, ours, heavy)
    for tree in trees:
        q1, med, q3 = statistics.quantiles(times[tree], n=4)
        modules, ours, heavy = shape[tree]
        print(
            json.dumps(
                {
                    "tree": str(tree),
                    "import_ms_median": round(med, 1),
                    "import_ms_quartiles": [round(q1, 1), round(q3, 1)],
                    "samples": len(times[tree]),
                    "modules": modules,
                    "tracevault_modules": ours,
                    "heavy_loaded": heavy,
                }
            )
        )


if __name__ == "__main__":
    main()
