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
_is_harness: dict[CodeType, bool] = {}
_formatted: dict[tuple[CodeType, int], str] = {}
_CACHE_MAX = 65_536


def add_harness_module(prefix: str) -> None:
    """Treat modules named ``prefix`` (or below it) as harness code, never a call site.

    For a wrapper of the edges that lives outside tracevault (a team's own adapter), so the
    site recorded is the agent's line that called the wrapper.
    """
    if prefix not in _HARNESS:
        _HARNESS.append(prefix)
        _is_harness.clear()


def _harness(frame: FrameType) -> bool:
    code = frame.f_code
    known = _is_harness.get(code)
    if known is None:
        name = str(frame.f_globals.get("__name__", ""))
        known = any(name == p or name.startswith(p + ".") for p in _HARNESS)
        if len(_is_harness) > _CACHE_MAX:
            _is_harness.clear()
        _is_harness[code] = known
    return known


def call_site(depth: int = 1) -> str | None:
    """The ``module:function:line`` of the nearest non-harness caller, or None when none is."""
    try:
        frame: FrameType | None = sys._getframe(depth)
    except ValueError:
        return None
    while frame is not None and _harness(frame):
        frame = frame.f_back
    if frame is None:
        return None
    key = (frame.f_code, frame.f_lineno)
    site = _formatted.get(key)
    if site is None:
        module = str(frame.f_globals.get("__name__", "?"))
        site = f"{module}:{frame.f_code.co_qualname}:{frame.f_lineno}"
        if len(_formatted) > _CACHE_MAX:
            _formatted.clear()
        _formatted[key] = site
    return site


def site_function(site: str | None) -> str | None:
    """``module:function`` of a site: the same call after an edit moved its line."""
    if site is None:
        return None
    return site.rpartition(":")[0]
