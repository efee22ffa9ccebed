"""An agent process whose spool rolls over several segments while it lives, for
tests/producer/test_spool_owner.py (a ``tracevault spool drain`` runs beside it).

    python tests/producer/spool_owner.py BOOTSTRAP PREFIX SPOOL SEGMENT_BYTES

BOOTSTRAP is a port no broker listens on: every broker is down, so every event is spooled at
once and stays spooled while the process lives. It starts one run and answers ``ready
<run_id>``; then one line on stdout for each command line on stdin:

``record N``  record N more events: ``recorded``
``stats``     the Publisher's stats, one JSON object
``close``     close the Publisher (2 s: Kafka is away): its close report, one JSON object; exit

Segments roll at SEGMENT_BYTES instead of 64 MiB, so a few thousand events make several.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import sys

import tracevault.producer._spool as spool_module
from tracevault.config import Settings
from tracevault.producer import Publisher, Recorder


def main() -> None:
    bootstrap, prefix, spool, segment_bytes = sys.argv[1:5]
    spool_module.SEGMENT_BYTES = int(segment_bytes)  # read at each append (``full``)
    # librdkafka's "connection refused" while the broker is away: not news here
    logging.getLogger("tracevault.producer.librdkafka").setLevel(logging.CRITICAL)
    settings = Settings(
        bootstrap_servers=bootstrap,
        topic_prefix=prefix,
        spool_dir=spool,
        partitions=1,
    )
    publisher = Publisher(settings)
    rec = Recorder(publisher=publisher, agent_id="owner", agent_version="1", input=None)
    rec.__enter__()
    step = 0
    print("ready", rec.run_id, flush=True)
    for line in sys.stdin:
        cmd = line.split()
        if cmd[:1] == ["record"]:
            for _ in range(int(cmd[1])):
                rec.decision("step", step)
                step += 1
            print("recorded", flush=True)
        elif cmd == ["stats"]:
            print(json.dumps(dataclasses.asdict(publisher.stats())), flush=True)
        elif cmd == ["close"]:
            report = publisher.close(timeout=2)
            print(json.dumps(dataclasses.asdict(report)), flush=True)
            return


if __name__ == "__main__":
    main()
