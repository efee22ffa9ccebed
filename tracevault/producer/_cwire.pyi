"""Types of the Recorder's event bytes in C (``_cwire.c``)."""

from collections.abc import Callable

from tracevault.schemas import EventKind

def encode(
    prefix: bytes,
    agent: bytes,
    layout: tuple[tuple[EventKind, ...], type, Callable[[tuple[object, ...]], bytes]],
    fields: tuple[object, ...],
    /,
) -> bytes: ...
def link(prev: bytes, raw: bytes, /) -> bytes: ...
