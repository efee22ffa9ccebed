"""``TRACEVAULT_NO_C=1`` turns every C path off, and it is a known setting.

The product imports each extension through ``tracevault.native.load``: with the variable set,
none of them is even imported, the modules that use them run their Python twins, and
``tracevault doctor`` says so. Without it every extension loads, and the SHA-256 under them
is OpenSSL's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tracevault import native
from tracevault.config import Settings
from tracevault.doctor._checks import _native

_USERS = (
    "tracevault.services.sequencer._step",
    "tracevault.services.archiver._intake",
    "tracevault.archive._filestore",
    "tracevault.transparency._merkle",
    "tracevault.transparency._note",
    "tracevault.content._events",
    "tracevault.schemas._jcs",
    "tracevault.producer._wire",
)
_PROBE = (
    "import importlib, json, sys\n"
    f"mods = [importlib.import_module(m) for m in {_USERS!r}]\n"
    "from tracevault import native\n"
    "print(json.dumps({'imported': sorted(m for m in native.EXTENSIONS if m in sys.modules),\n"
    "    'used': [getattr(m, n) is not None for m, n in zip(mods, "
    "('_cseal', '_ctake', '_cput', '_cmerkle', '_csign', '_cfields', '_cjcs', '_cwire'))]}))\n"
)


def _probe(**env: str) -> dict[str, list[object]]:
    base = {k: v for k, v in os.environ.items() if k != native.NO_C_ENV}
    res = subprocess.run(
        [sys.executable, "-c", _PROBE], env={**base, **env}, capture_output=True, text=True,
        timeout=120, check=True,
    )  # fmt: skip
    out: dict[str, list[object]] = json.loads(res.stdout)
    return out


def test_no_c_imports_no_extension_and_every_user_runs_python() -> None:
    assert _probe(TRACEVAULT_NO_C="1") == {"imported": [], "used": [False] * len(_USERS)}


def test_without_the_switch_every_extension_is_used() -> None:
    got = _probe()
    assert got == {"imported": sorted(native.EXTENSIONS), "used": [True] * len(_USERS)}
    assert _probe(TRACEVAULT_NO_C="0") == got


@pytest.mark.parametrize(("value", "off"), [("1", True), ("true", True), ("yes", True),
                                            ("0", False), ("", False), ("off", False)])  # fmt: skip
def test_the_switch_reads_as_the_setting_does(
    monkeypatch: pytest.MonkeyPatch, value: str, off: bool
) -> None:
    monkeypatch.setenv(native.NO_C_ENV, value)
    assert native.disabled() is off
    if value:
        assert Settings().no_c is off  # a known, validated setting, read the same way


def test_doctor_says_which_path_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(native.NO_C_ENV, raising=False)
    on = _native()
    assert on.status == "ok" and "OpenSSL" in on.detail, on
    monkeypatch.setenv(native.NO_C_ENV, "1")
    off = _native()
    assert off.status == "warn" and native.NO_C_ENV in off.detail, off
