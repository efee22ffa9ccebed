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

class Sealer:
    """A run's content sealed with its one nonce counter (``RunCipher``'s, when loaded)."""

    def __init__(self, key: bytes, aad_prefix: bytes, salt: bytes, start: int = 0) -> None: ...
    def seal(self, seq: int, field: str, plaintext: bytes, /) -> bytes: ...
    def seal_tool_request(self, seq: int, request: bytes, /) -> bytes: ...
    def seal_event(
        self, seq: int, is_tool: bool, request: bytes, response: bytes, /
    ) -> tuple[bytes, bytes]: ...

def _base64_simd(on: bool, /) -> bool: ...
