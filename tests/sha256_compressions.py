"""Run a check under each SHA-256 compression the C extensions pick from.

``tracevault/_sha256.h`` picks its compression once, at module import: the SHA extensions
where the CPU has them, else the portable one; ``TRACEVAULT_PORTABLE_SHA256`` forces the
portable one. A check of a C path's hashes runs in a child process per choice, so both are
proven on a machine that has the extensions.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def under_each_compression(code: str) -> list[list[str]]:
    """The words ``code`` prints, run with the default compression, then the portable one."""
    outs = []
    for portable in (False, True):
        env = {k: v for k, v in os.environ.items() if k != "TRACEVAULT_PORTABLE_SHA256"}
        if portable:
            env["TRACEVAULT_PORTABLE_SHA256"] = "1"
        outs.append(
            subprocess.run(
                [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
            ).stdout.split()
        )
    return outs


def compressions_here() -> set[str]:
    """The ``sha256_impl`` names the two runs must report on this CPU."""
    cpu_has_it = "sha_ni" in Path("/proc/cpuinfo").read_text()
    return {"portable", "sha-ni"} if cpu_has_it else {"portable"}
