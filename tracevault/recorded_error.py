"""Raising a recorded exception again under replay.

The record keeps only an exception's type name and message, not the object. Replay raises an
instance of the recorded type itself (``type(exc)`` is ``ValueError``,
``openai.RateLimitError``, the agent's ``myagent.errors.LookupFailed``; its ``__module__`` and
``__qualname__`` as live) where that type can be found: a built-in, or a class in a loaded
module or a module of a loaded package (a record never makes replay import a package the agent
did not). The instance is made from the message alone (``cls(message)``, or without its
constructor when that wants other arguments) and kept only if ``str()`` of it reads as the
recorded message; it carries ``recorded_type`` (a ``KeyError``, whose ``str()`` is its
argument's repr, is made from that repr read back). Otherwise (the type is gone, or cannot be
rebuilt from its message) replay raises the stand-in :class:`RecordedError`, also an instance
of the recorded built-in or loaded class where there is one, so the agent's ``except
ValueError:`` still takes the branch it took live.

It lives beneath both of its users (docs/design.md, "Layout"): the replayer raises it, and the
provider adapters in ``tracevault.integrations`` raise it for a recorded SDK error, so an
adapter needs nothing of the replayer.
"""

from __future__ import annotations

import ast
import builtins
import functools
import importlib
import sys

from tracevault.schemas import ErrorInfo

__all__ = ["RecordedError", "raise_recorded", "recorded_error", "recorded_type", "type_name"]


class RecordedError(Exception):
    """An exception the record says a crossing (or the agent) raised; ``str()`` is its message."""

    recorded_type: str = "Exception"

    def __init__(self, message: str, recorded_type: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if recorded_type is not None:
            self.recorded_type = recorded_type

    def __reduce__(self) -> tuple[type, tuple[str, str]]:
        return (RecordedError, (self.message, self.recorded_type))


def _module(name: str) -> object:
    """The module ``name`` if loaded, or importable as a module of a loaded package."""
    found = sys.modules.get(name)
    if found is None and "." in name and name.partition(".")[0] in sys.modules:
        try:
            found = importlib.import_module(name)
        except Exception:
            return None
    return found


def _builtin_class(name: str) -> type[BaseException] | None:
    """The exception class ``name`` names: a built-in, or one in a loaded module (a nested
    class ``module.Outer.Inner`` too); see the module docstring for which modules."""
    short = name.removeprefix("builtins.")
    cls: object = getattr(builtins, short, None) if "." not in short else None
    parts = name.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        if cls is not None:
            break
        owner = _module(".".join(parts[:cut]))
        for attr in parts[cut:]:
            owner = getattr(owner, attr, None)
        cls = owner
    if isinstance(cls, type) and issubclass(cls, Exception):
        return cls
    return None


def _exact(cls: type[BaseException], message: str) -> BaseException | None:
    """An instance of ``cls`` itself whose ``str()`` is ``message``, or None."""
    try:
        exc = cls(message)
    except Exception:
        try:
            exc = cls.__new__(cls)
            BaseException.__init__(exc, message)
        except Exception:
            return None
    if _reads(exc, message):
        return exc
    try:  # a type whose str() is the repr of its argument (KeyError): rebuilt from that
        again = cls(ast.literal_eval(message))
    except Exception:
        return None
    return again if _reads(again, message) else None


def _reads(exc: BaseException, message: str) -> bool:
    try:
        return str(exc) == message
    except Exception:
        return False


@functools.lru_cache(maxsize=256)
def _class_for(type_name: str) -> type[RecordedError]:
    base = _builtin_class(type_name)
    short = type_name.rsplit(".", 1)[-1] or "Exception"
    bases: tuple[type, ...] = (RecordedError,) if base is None else (RecordedError, base)
    try:
        cls = type(short, bases, {"recorded_type": type_name, "__module__": __name__})
    except TypeError:  # a built-in whose C layout cannot be mixed in
        cls = type(short, (RecordedError,), {"recorded_type": type_name, "__module__": __name__})
    return cls


def recorded_error(err: ErrorInfo) -> Exception:
    """The exception to raise for a recorded error: its own type, else the stand-in."""
    cls = _builtin_class(err.type)
    exact = None if cls is None else _exact(cls, err.message)
    if isinstance(exact, Exception):
        exact.recorded_type = err.type  # type: ignore[attr-defined]
        return exact
    try:
        exc = _class_for(err.type)(err.message)
    except TypeError:  # the original class wants other constructor arguments
        exc = RecordedError(err.message)
    exc.recorded_type = err.type
    return exc


def raise_recorded(err: ErrorInfo) -> None:
    raise recorded_error(err)


def recorded_type(exc: BaseException) -> str | None:
    """The type name the record gave ``exc``, if replay raised it from a record."""
    name = getattr(exc, "recorded_type", None)
    return name if isinstance(name, str) else None


def type_name(exc: BaseException) -> tuple[str, ...]:
    """Names under which ``exc``'s type may have been recorded (short, qualified, dotted)."""
    name = recorded_type(exc)
    if name is not None:
        return (name, name.rsplit(".", 1)[-1])
    cls = type(exc)
    return (cls.__name__, cls.__qualname__, f"{cls.__module__}.{cls.__qualname__}")
