"""What a bundle's writer and its checker agree on: the format name, file names, and the
byte-exact JSON lines of ``chain.jsonl`` and ``events.jsonl``.

Its own module so that exporting (``bundle``) and checking (``_check``) share one definition
of each without importing each other.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from tracevault.schemas import EventModel, TraceEvent

__all__ = ["BUNDLE_FORMAT", "REVEAL_FILE"]

BUNDLE_FORMAT = "tracevault-bundle/1"
#: the file of a bundle that holds its data key revealed to one recipient (``reveal``)
REVEAL_FILE = "reveal.json"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _raw_name(seq: int) -> str:
    return f"raw/{seq:012d}.bin"


def _proof_name(seq: int) -> str:
    return f"log/{seq:012d}.tlog-proof"


def _json_line(obj: dict[str, Any]) -> bytes:
    return (
        json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"
    )


def _event_line(ev: TraceEvent) -> bytes:
    return _json_line(EventModel.from_event(ev).model_dump(mode="json"))
