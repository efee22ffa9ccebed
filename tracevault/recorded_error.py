"""Raising a recorded exception again under replay.

The record keeps only an exception's type name and message, not the object. Replay raises a
:class:`RecordedError` that carries both; when the type names a built-in exception
(``ValueError``, ``builtins.KeyError``, ``TimeoutError``) the raised object is also an
instance of that built-in, so the agent's own ``except ValueError:`` takes the same branch it
took live.

It lives beneath both of its users (docs/design.md, "Layout"): the replayer raises it, and the
provider adapters in ``tracevault.integrations`` raise it for a recorded SDK error, so an
adapter needs nothing of the replayer.
"""

from __future__ import annotations

import builtins
import functools
import sys

from tracevault.schemas import ErrorInfo

__all__ = ["RecordedError", "raise_recorded", "recorded_error", "type_name"]


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


def _builtin_class(name: str) -> type[BaseException] | None:
    """The exception class ``name`` names: a built-in, or one in an already imported module.

    Only ``sys.modules`` is consulted: replay never imports a module because a record says so.
    """
    short = name.removeprefix("builtins.")
    cls = getattr(builtins, short, None)
    if cls is None and "." in name:
        module, _, qual = name.rpartition(".")
        owner: object = sys.modules.get(module)
        if owner is None and "." in module:  # a nested class: module.Outer.Inner
            module, _, outer = module.rpartition(".")
            owner = getattr(sys.modules.get(module), outer, None)
        cls = getattr(owner, qual, None) if owner is not None else None
    if isinstance(cls, type) and issubclass(cls, Exception):
        return cls
    return None


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


def recorded_error(err: ErrorInfo) -> RecordedError:
    """The exception to raise for a recorded error."""
    try:
        exc = _class_for(err.type)(err.message)
    except TypeError:  # the original class wants other constructor arguments
        exc = RecordedError(err.message)
    exc.recorded_type = err.type
    return exc


def raise_recorded(err: ErrorInfo) -> None:
    raise recorded_error(err)


def type_name(exc: BaseException) -> tuple[str, ...]:
    """Names under which ``exc``'s type may have been recorded (short, qualified, dotted)."""
    if isinstance(exc, RecordedError):
        return (exc.recorded_type, exc.recorded_type.rsplit(".", 1)[-1])
    cls = type(exc)
    return (cls.__name__, cls.__qualname__, f"{cls.__module__}.{cls.__qualname__}")
