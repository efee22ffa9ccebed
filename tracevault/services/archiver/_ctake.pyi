"""Types of the archiver's C path (``_ctake.c``)."""

from typing import Any

from confluent_kafka import Message

sha256_impl: str

def take(
    msgs: list[Message], start: int, ctx: tuple[object, ...], /
) -> tuple[int, int | None, list[Any]]: ...
def leaf_fields(
    value: bytes, ctx: tuple[object, ...], /
) -> tuple[str, int, bytes, bool, int] | None: ...
def sha256(data: bytes, /) -> bytes: ...
