"""The Publisher's librdkafka lines are deduplicated as the services' are: a broker that is
away makes librdkafka retry and log the refused connection many times a second, and the
agent's log gets that line once per minute (``tracevault.config.KafkaLogDedup``).

In a fresh interpreter, as an agent process is: the deduplication remembers the kinds of line
it passed for a minute, and librdkafka's lines of earlier tests must not count here.

librdkafka holds back an identical error from the same broker itself ("N identical error(s)
suppressed"), so one refused address logs once in minutes. The probe names several closed
ports as its bootstrap: each is a broker of its own that librdkafka tries and reports, and
the lines differ only in their numbers, so they are one kind of line to the deduplication.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

_CLOSED_PORTS = 8  # dead bootstrap brokers, each reported by librdkafka once at least
_RETRIES_SEEN = 5  # refused connections librdkafka reported before the probe looks

_PROBE = """
import json, logging, sys, threading
from tracevault.config import KafkaLogDedup, Settings
from tracevault.producer import Publisher

class Lines(logging.Filter):  # the lines librdkafka hands over, before the deduplication
    count = 0
    enough = threading.Event()
    def filter(self, record):
        if "Connection refused" in record.getMessage():
            Lines.count += 1
            if Lines.count >= {retries}:
                Lines.enough.set()
        return True

kept = []
class Kept(logging.Handler):
    def emit(self, record):
        kept.append(record.getMessage())

log = logging.getLogger("tracevault.producer.librdkafka")
dedups = [f for f in log.filters if isinstance(f, KafkaLogDedup)]
for f in dedups:  # the counter goes in front; the deduplication stays the logger's own
    log.removeFilter(f)
log.addFilter(Lines())
for f in dedups:
    log.addFilter(f)
log.addHandler(Kept())
publisher = Publisher(Settings(bootstrap_servers="{bootstrap}", spool_dir=sys.argv[1]))
publisher.publish(b"run", b"event")  # starts the producer, which starts retrying
seen = Lines.enough.wait(120)
report = publisher.close(timeout=5)
print(json.dumps({{"seen": Lines.count, "enough": seen, "delivered": report.delivered,
                  "lost": report.lost, "undelivered": report.undelivered,
                  "passed": [k for k in kept if "Connection refused" in k]}}))
"""


def _closed_ports(n: int) -> list[int]:
    """``n`` ports that refuse connections: bound together (so distinct), then released."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def test_a_broker_that_refuses_connections_is_logged_once(tmp_path: Path) -> None:
    bootstrap = ",".join(f"127.0.0.1:{p}" for p in _closed_ports(_CLOSED_PORTS))
    code = _PROBE.format(retries=_RETRIES_SEEN, bootstrap=bootstrap)
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout.splitlines()[-1])
    assert report["enough"], f"librdkafka logged {report['seen']} refused connections"
    # kept on disk, as a broker that is away wants
    assert (report["delivered"], report["lost"], report["undelivered"]) == (0, 0, 1), report
    assert len(report["passed"]) == 1, report["passed"]
