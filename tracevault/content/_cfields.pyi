"""Types of the content opener in C (``_cfields.c``)."""

from collections.abc import Sequence
from typing import Protocol

class _Event(Protocol):
    seq: int
    request: bytes
    response: bytes

def open_pairs(
    key: bytes, aad_prefix: bytes, events: Sequence[_Event], /
) -> list[tuple[bytes, bytes, bool] | None]: ...
