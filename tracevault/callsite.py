"""Where in the agent's code a crossing was made: ``module:function:line``.

``replay run --keep-going`` and ``replay diff`` align two runs by kind, call site and ordinal
(docs/design.md, "Investigating a run"), so that one inserted or removed call does not shift
every later step. The Recorder stores the site in the event's ``attributes`` under
:data:`SITE_ATTRIBUTE`; replay computes it the same way for the re-run's crossings.

The site is the first frame above the edge call that is not harness code (the Recorder, the
replayer, the SDK adapters, asyncio and thread-pool plumbing). Frames are classified once per
code object and each ``(code, line)`` is formatted once, so the agent's hot path pays a dict
lookup or two per frame.
"""

from __future__ import annotations

import sys
from types import CodeType, FrameType

__all__ = ["SITE_ATTRIBUTE", "add_harness_module", "call_site", "site_function"]

#: The attribute key holding a crossing's call site (``module:function:line``).
SITE_ATTRIBUTE = "tracevault.site"

_HARNESS: list[str] = [
    "tracevault.producer",
    "tracevault.replayer",
    "tracevault.integrations",
    "tracevault.edges",
    "tracevault.callsite",
    "asyncio",
    "concurrent.futures",
    "threading",
    "functools",
    "contextlib",
]
# id(code) -> (code, is harness, "module:function", instruction offset -> site). The code
# object is kept so its id cannot be reused by another; ids, unlike code objects, hash for
# free, and an offset (f_lasti) costs a tenth of a line number (f_lineno walks a table).
_Entry = tuple[CodeType, bool, str, dict[int, str]]
_cache: dict[int, _Entry] = {}
_CACHE_MAX = 65_536


def add_harness_module(prefix: str) -> None:
    """Treat modules named ``prefix`` (or below it) as harness code, never a call site.

    For a wrapper of the edges that lives outside tracevault (a team's own adapter), so the
    site recorded is the agent's line that called the wrapper.
    """
    if prefix not in _HARNESS:
        _HARNESS.append(prefix)
        _cache.clear()


def _entry(frame: FrameType) -> _Entry:
    code = frame.f_code
    name = str(frame.f_globals.get("__name__", "?"))
    harness = any(name == p or name.startswith(p + ".") for p in _HARNESS)
    if len(_cache) > _CACHE_MAX:
        _cache.clear()
    entry: _Entry = (code, harness, f"{name}:{code.co_qualname}", {})
    _cache[id(code)] = entry
    return entry


def call_site(depth: int = 1) -> str | None:
    """The ``module:function:line`` of the nearest non-harness caller, or None when none is."""
    try:
        frame: FrameType | None = sys._getframe(depth)
    except ValueError:  # the stack is not that deep
        return None
    while frame is not None:
        code = frame.f_code
        entry = _cache.get(id(code))
        if entry is None or entry[0] is not code:
            entry = _entry(frame)
        if not entry[1]:
            offset = frame.f_lasti
            site = entry[3].get(offset)
            if site is None:
                site = entry[3][offset] = f"{entry[2]}:{frame.f_lineno}"
            return site
        frame = frame.f_back
    return None


def site_function(site: str | None) -> str | None:
    """``module:function`` of a site: the same call after an edit moved its line."""
    if site is None:
        return None
    return site.rpartition(":")[0]
