"""Types of the index's C columns (``_ccolumns.c``)."""

from typing import Any

def columns(
    values: list[bytes],
    counts: list[int],
    sealed_header: bytes,
    trace_header: bytes,
    nkinds: int,
    tool_kind: int,
    /,
) -> tuple[int, dict[str, Any], list[tuple[int, bytes]], list[tuple[Any, ...]]] | None: ...
