"""Types of the sequencer's C path (``_cseal.c``)."""

from collections.abc import Callable
from typing import Any

from confluent_kafka import Message

sha256_impl: str

def take(msgs: list[Message], start: int, ctx: tuple[object, ...], /) -> int: ...
def values(
    sealed: list[Any],
    at: bytes,
    sid: bytes,
    run_enc: Callable[[Any], tuple[bytes, bytes]],
    leaf_prefix: Callable[[Any], bytes],
    /,
) -> tuple[list[bytes], dict[int, list[bytes]]]: ...
def heads(
    runs: list[Any], suffix: bytes, run_enc: Callable[[Any], tuple[bytes, bytes]], /
) -> list[bytes | None]: ...
def peek(
    value: bytes, header: bytes, nkinds: int, /
) -> tuple[str, int, int, bytes, bytes] | None: ...
def canonical(data: bytes, /) -> bool: ...
def link(prev_hash: bytes, raw: bytes, /) -> bytes: ...
