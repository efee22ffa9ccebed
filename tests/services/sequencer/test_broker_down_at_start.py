"""A sequencer started while its broker is away waits for it, says so once, and does not
flood stderr with librdkafka's raw ``%3|...|FAIL|`` lines (docs/liveness.md). About 20 s:
the first metadata request has to time out (15 s) before the sequencer knows."""

from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from tracevault.transparency import Ed25519Signer, write_private_key


def _free_port() -> int:
    """A port nobody listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_sequencer_started_while_the_broker_is_down_waits_and_does_not_flood(
    tmp_path: Path,
) -> None:
    key = tmp_path / "log.key"
    write_private_key(key, Ed25519Signer.generate("down/log"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEVAULT_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tracevault", "--bootstrap-servers",
         f"127.0.0.1:{_free_port()}", "sequencer", "--instance-id", "down",
         "--log-key-file", str(key)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(x) for x in proc.stderr or ()])
    reader.start()
    seen: list[str] = []
    try:
        deadline = time.monotonic() + 60
        # the session after the first failed one starts: the sequencer is riding it out
        while not any("starting a new one" in x for x in seen):
            assert proc.poll() is None, f"exited {proc.returncode}: {''.join(seen)}"
            assert time.monotonic() < deadline, "".join(seen)
            try:
                seen.append(lines.get(timeout=1))
            except queue.Empty:
                continue
        assert proc.poll() is None, "".join(seen)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        reader.join(timeout=30)
        if proc.stderr is not None:
            proc.stderr.close()
    text = "".join(seen)
    assert sum("does not answer yet" in x for x in seen) == 1, text
    assert "waiting for it" in text and "outage of any length is ridden out" in text
    assert "%3|" not in text, "raw librdkafka lines on stderr"
    fails = [x for x in seen if "tracevault.librdkafka" in x and "FAIL" in x]
    assert len(fails) <= 1, text  # the same refused connection, once per minute at most
