"""The optional C extensions, each imported here so that one switch turns every one off.

``pip install`` builds its extensions where a C compiler, the Python headers and OpenSSL's
headers are there (pyproject.toml; docs/design.md, "Sequencer speed"; docs/log.md,
"Archiver speed"). Each has a Python twin that gives the same bytes, so a build without them
only runs slower. ``TRACEVAULT_NO_C=1`` makes every module that would use one run its Python
path instead, on a machine where they are built: to compare the two, to rule the C out when
chasing a problem, and for the CI step that runs the sealing, archiving and verifying tests
without it. It is read once, when the modules that use the C are first imported, because
they pick their path then; it is also a field of ``Settings`` (``no_c``), so the variable is
a known, validated setting like every other ``TRACEVAULT_*``.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

__all__ = ["EXTENSIONS", "NO_C_ENV", "disabled", "load", "status"]

NO_C_ENV = "TRACEVAULT_NO_C"

#: Every C extension, by what it does.
EXTENSIONS = {
    "tracevault.services.sequencer._cseal": "the sequencer's per-event path",
    "tracevault.services.archiver._ctake": "the archiver's per-event path",
    "tracevault.archive._cput": "the file store's put without the GIL",
    "tracevault.transparency._cmerkle": "the log's tree hashing",
    "tracevault.transparency._csign": "note signatures that keep the GIL",
    "tracevault.content._cfields": "an encrypted run's content opened",
    "tracevault.schemas._cjcs": "canonical JSON checked on the agent's path",
    "tracevault.producer._cwire": "the Recorder's event bytes",
    "tracevault.index._ccolumns": "the index's event columns",
}

# pydantic's false words (Settings reads the same variable as a bool and refuses others);
# anything else turns the C off, so a mistyped value errs on the side of the Python path.
_FALSE = {"", "0", "false", "f", "no", "n", "off"}


def disabled() -> bool:
    """Whether ``TRACEVAULT_NO_C`` asks for the Python paths."""
    return os.environ.get(NO_C_ENV, "").strip().lower() not in _FALSE


def load(name: str) -> ModuleType | None:
    """The extension ``name``, or None where it is not built, does not load, or
    ``TRACEVAULT_NO_C`` turns the C off: the caller then runs its Python path."""
    if name not in EXTENSIONS:
        raise ValueError(f"{name} is not one of tracevault's C extensions")
    if disabled():
        return None
    try:
        return importlib.import_module(name)
    except ImportError:  # not built (no compiler, no headers), or its libcrypto is missing
        return None


def status(name: str) -> str:
    """``"loaded"``, ``"disabled"`` (TRACEVAULT_NO_C), or why it does not load: what
    ``tracevault doctor`` says for each extension."""
    if disabled():
        return "disabled"
    try:
        importlib.import_module(name)
    except ImportError as exc:
        return f"not loaded ({exc})"
    return "loaded"
