"""The desk: the first screen of a 100,000-event run in `tracevault ui`, and the size and
in-browser verification time of a `tracevault report` of a 10,000-event run.

Setup (not timed): a run of ``--events`` events archived as the archiver writes the signed,
tiled log (``verify_throughput.archive_log``: a checkpoint every 500 events), and a run of
``--report-events`` the same way.

Timed, best of ``--reps``:

* **first_screen** (cold): a new desk app served by uvicorn on loopback; one HTTP GET of
  ``/runs/RUN`` until the whole page has arrived: the run loaded from the archive, its first
  500 rows decoded and rendered under "verifying…" while a thread verifies it. Target <= 1 s.
* **verdict_s**: from that GET until the page carries its verdict (L1-L4, checks 1-6, every
  event decoded), the page asked again every 50 ms (the page itself reloads every second).
* **next_page** (warm): ``?page=1`` of the same run, verified a moment ago (kept a minute).
* **report**: ``tracevault report``'s work for the smaller run with every payload revealed
  (gather + render), the file's size (target <= 5 MB), and the time its own verifier takes in
  Debian's headless Chromium from file://, network off (``data-ms`` of the status; target
  <= 2 s) - every check green asserted.

    .venv/bin/python bench/ui.py [--events 100000] [--report-events 10000] [--reps 3]

Last line: {"bench": "ui", "first_screen_s", "next_page_s", "report_bytes",
"report_browser_verify_s", ...}.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.desk's browser

from replay_throughput import RUN, make_run
from verify_throughput import archive_log, checkpoints

from tests.desk.browser import Chromium
from tests.desk.server import serving
from tracevault.config import Settings
from tracevault.desk import Reveal, gather, render_report
from tracevault.desk.app import DeskConfig
from tracevault.desk.evidence import RunEvidence
from tracevault.replayer import EndRule, LogPolicy
from tracevault.transparency import Ed25519Signer


def _get(url: str) -> tuple[float, int]:
    t = time.perf_counter()
    with urllib.request.urlopen(url, timeout=120) as r:
        body = r.read()
    return time.perf_counter() - t, len(body)


def _verdict(url: str) -> tuple[float, bool]:
    """Seconds until the run page carries its verdict (polled as its meta refresh would, but
    every 50 ms), and whether the first answer was the "verifying…" screen."""
    t = time.perf_counter()
    first = None
    while True:
        with urllib.request.urlopen(url, timeout=120) as r:
            body = r.read()
        early = b'data-state="verifying"' in body
        first = early if first is None else first
        if not early:
            assert b'data-state="verified"' in body
            return time.perf_counter() - t, first
        time.sleep(0.05)


def _archive(root: Path, events: int, key: Ed25519Signer) -> str:
    archive_log(root, checkpoints(make_run(events), 500, key), key, 10_000)
    return f"file://{root}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--report-events", type=int, default=10_000)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    key = Ed25519Signer.generate("bench.log")
    policy = LogPolicy((key.verifier,))
    with tempfile.TemporaryDirectory(prefix="tv-ui-bench-") as tmp:
        t = time.perf_counter()
        big = _archive(Path(tmp) / "big", args.events, key)
        small = _archive(Path(tmp) / "small", args.report_events, key)
        print(json.dumps({"phase": "setup", "seconds": round(time.perf_counter() - t, 3)}))
        best: dict[str, float] = {}
        size = 0
        for rep in range(args.reps):
            conf = DeskConfig(Settings(archive_url=big), policy, EndRule())
            with serving(conf) as desk:  # a new app each rep: nothing verified yet
                first, size = _get(f"{desk}/runs/{RUN}")
                verdict, _ = _verdict(f"{desk}/runs/{RUN}")
                nxt, _ = _get(f"{desk}/runs/{RUN}?page=1")
            line = {"first_screen_s": first, "verdict_s": first + verdict, "next_page_s": nxt}
            for k, v in line.items():
                best[k] = min(best.get(k, float("inf")), v)
            print(json.dumps({"rep": rep, **{k: round(v, 4) for k, v in line.items()}}))
        report = Path(tmp) / "report.html"
        t = time.perf_counter()
        ev = gather(
            Settings(archive_url=small),
            RUN,
            source="archive",
            policy=policy,
            end=EndRule(),
            reveal=Reveal(every=True),
            proofs=True,
        )
        report.write_text(render_report([ev], vkeys=[key.verifier.vkey]), encoding="utf-8")
        write_s = time.perf_counter() - t
        browser = Chromium(offline=True)
        try:
            ms: list[int] = []
            check_ms: list[int] = []
            opened: list[float] = []
            for _ in range(args.reps):
                t_open = time.perf_counter()
                browser.open(report.as_uri(), seconds=600)
                status = "document.getElementById('tv-browser-status').dataset"
                state = browser.wait_for(
                    f"{status}.state !== 'pending' && {status}.state", seconds=600
                )
                assert state == "verified", browser.js(f"{status}.textContent")
                ms.append(int(browser.js(f"{status}.ms")))
                check_ms.append(int(browser.js(f"{status}.checkMs")))
                opened.append(time.perf_counter() - t_open)
        finally:
            browser.close()
    result = {
        "bench": "ui",
        "events": args.events,
        "first_screen_s": round(best["first_screen_s"], 4),
        "first_screen_bytes": size,
        "verdict_s": round(best["verdict_s"], 4),
        "next_page_s": round(best["next_page_s"], 4),
        "report_events": args.report_events,
        "report_write_s": round(write_s, 3),
        "report_bytes": report_size(ev, key),
        "report_browser_verify_s": round(min(ms) / 1000, 3),
        "report_browser_checks_only_s": round(min(check_ms) / 1000, 3),
        "report_browser_open_to_verdict_s": round(min(opened), 3),
    }
    print(json.dumps(result))


def report_size(ev: RunEvidence, key: Ed25519Signer) -> int:
    """The report's size in bytes (rendered again: the file went with its temp dir)."""
    return len(render_report([ev], vkeys=[key.verifier.vkey]).encode())


if __name__ == "__main__":
    main()
