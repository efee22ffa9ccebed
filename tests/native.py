"""The C extensions as the tests of the C itself import them.

The product imports each through ``tracevault.native.load`` (None where it is not built, or
under ``TRACEVAULT_NO_C=1``). These tests exercise the C directly, so they import it here,
whatever ``TRACEVAULT_NO_C`` says. Where an extension is not built, collection still
succeeds (the CI step without the extensions collects the whole suite), and every test that
touches it fails loudly, naming the extension: a missing C path is never a skip.

``FUZZ_SCALE`` multiplies the example counts of the property tests that pin the C to Python
(``examples``): 1 in the main suite, more in the fuzz step of ``.ci/native``.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import Any

import pytest

__all__ = ["examples", "extension"]


class _Missing:
    """Stands in for an extension that does not import: any use fails the test."""

    def __init__(self, name: str, why: str) -> None:
        self._name, self._why = name, why

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith(("_", "pytest")):  # what collection asks of every module global
            raise AttributeError(attr)
        pytest.fail(f"{self._name} is not built ({self._why}): reinstall with a C compiler, "
                    "the Python headers and libssl-dev", pytrace=False)  # fmt: skip


def extension(name: str) -> ModuleType:
    """The C extension ``name``, imported directly (``TRACEVAULT_NO_C`` turns off the
    product's use of it, not these tests of it)."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        return _Missing(name, str(exc))  # type: ignore[return-value]


def examples(n: int) -> int:
    """``n`` examples, times ``FUZZ_SCALE``."""
    return max(1, int(n * float(os.environ.get("FUZZ_SCALE", "1"))))
