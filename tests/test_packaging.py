"""pyproject's metadata in the form setuptools keeps building without deprecation warnings.

The table form ``license = { text = ... }`` made every ``pip install`` print setuptools'
deprecation warning (7 times), with builds to stop on 2027-02-18; the SPDX string needs
setuptools 77, so the build requires it.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

PYPROJECT = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())


def test_the_license_is_an_spdx_expression_with_a_setuptools_that_reads_it() -> None:
    assert PYPROJECT["project"]["license"] == "Apache-2.0"
    assert not any(c.startswith("License ::") for c in PYPROJECT["project"].get("classifiers", []))
    (setuptools,) = [r for r in PYPROJECT["build-system"]["requires"] if r.startswith("setuptools")]
    floor = re.fullmatch(r"setuptools>=(\d+)(?:\.\d+)*", setuptools)
    assert floor and int(floor.group(1)) >= 77, setuptools
