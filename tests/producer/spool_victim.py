"""An agent process for the SIGKILL tests (tests/producer/test_spool_kill.py).

It records one run of ``decision`` events and, after each call returns, appends
``<run_id> <seq> <monotonic_ns>`` to a side file with one ``os.write`` (in the kernel's page
cache at once, so a SIGKILL cannot lose it; the test compares it with what reached Kafka).

    python tests/producer/spool_victim.py BOOTSTRAP PREFIX SPOOL SIDE MODE

Modes, after 100 events delivered with the broker up and ``ready`` printed:
``burst``  wait for a line on stdin, record 3000 events over about a second, print ``done``;
``flood``  wait for a line on stdin, then record as fast as possible (a long queue);
``steady`` record one event about every millisecond (the test stops the broker meanwhile);
``hang``   the same (the test SIGSTOPs the broker meanwhile).

``adopt`` prints ``ready`` at once, then records as fast as possible: its Publisher adopts the
dead agent's segments the test left in SPOOL and drains them meanwhile (the broker is up).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time

from tracevault.config import Settings
from tracevault.producer import Publisher, Recorder


def main() -> None:
    bootstrap, prefix, spool, side_path, mode = sys.argv[1:6]
    # librdkafka's "connection refused" every few ms while the broker is away: not news here
    logging.getLogger("tracevault.producer.librdkafka").setLevel(logging.CRITICAL)
    settings = Settings(
        bootstrap_servers=bootstrap, topic_prefix=prefix, spool_dir=spool, partitions=3
    )
    publisher = Publisher(settings)
    rec = Recorder(publisher=publisher, agent_id="victim", agent_version="1", input=None)
    rec.__enter__()
    side = os.open(side_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    pause = threading.Event()

    def step(i: int) -> None:
        rec.decision("step", i)
        # run_started is seq 0, so decision i is seq i + 1
        os.write(side, f"{rec.run_id} {i + 1} {time.monotonic_ns()}\n".encode())

    if mode == "adopt":
        print("ready", flush=True)
        i = 0
        while True:
            step(i)
            i += 1
    for i in range(100):
        step(i)
    if not publisher.flush(60):
        raise SystemExit("the first events were not delivered")
    print("ready", flush=True)
    i = 100
    if mode in ("steady", "hang"):
        while True:
            step(i)
            i += 1
            pause.wait(0.001)
    sys.stdin.readline()
    if mode == "burst":
        for i in range(100, 3100):
            step(i)
            if i % 3 == 0:
                pause.wait(0.001)
        print("done", flush=True)
        pause.wait()
    while True:
        step(i)
        i += 1


if __name__ == "__main__":
    main()
