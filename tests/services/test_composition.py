"""Objects in ``tracevault.services`` hold their parts; none inherits from another of the
project's classes to borrow state or methods (STYLE.md, "Composition, not towers").

The archiver was a tower of mixins (admission, holes and the Kafka session as base classes
stubbing what the subclass provided); this pins that it stays composed. Exceptions are the one
hierarchy allowed: a ``Broken`` is a ``Restart``, which borrows nothing.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import tracevault.services


def _classes() -> list[type]:
    out: list[type] = []
    for info in pkgutil.walk_packages(tracevault.services.__path__, "tracevault.services."):
        module = importlib.import_module(info.name)
        out += [
            c
            for _, c in inspect.getmembers(module, inspect.isclass)
            if c.__module__ == module.__name__
        ]
    return out


def test_no_service_class_inherits_from_a_project_class() -> None:
    classes = _classes()
    names = {c.__qualname__ for c in classes}
    assert {"Archiver", "ConsumerRuntime", "Intake", "CheckpointAdmission", "Flusher"} <= names
    assert {"WitnessFollower", "CheckpointRecords"} <= names
    assert {"Sequencer", "SequencerStep", "RunBook", "GapRules", "AttestRules"} <= names
    towers = [
        f"{c.__module__}.{c.__qualname__}({b.__module__}.{b.__qualname__})"
        for c in classes
        if not issubclass(c, BaseException)
        for b in c.__mro__[1:]
        if b.__module__.split(".")[0] == "tracevault"
    ]
    assert not towers, "\n".join(towers)
