"""C2SP tlog-checkpoint bodies and the origin of each partition's log.

A checkpoint body is ``origin\\n size\\n base64(root)\\n`` and optional extension lines
(c2sp.org/tlog-checkpoint). One log per sealed partition, so the origin names the partition:
``<log_origin>/<prefix>/<partition>`` (docs/log.md).
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

from tracevault.errors import LogError
from tracevault.log._merkle import HASH_SIZE

__all__ = ["Checkpoint", "log_origin"]


def log_origin(base: str, prefix: str, partition: int) -> str:
    return f"{base}/{prefix}/{partition}"


@dataclass(frozen=True, slots=True)
class Checkpoint:
    origin: str
    size: int
    root: bytes
    extensions: tuple[str, ...] = ()

    def body(self) -> str:
        ext = "".join(f"{e}\n" for e in self.extensions)
        return f"{self.origin}\n{self.size}\n{base64.b64encode(self.root).decode()}\n{ext}"

    @classmethod
    def parse(cls, text: str) -> Checkpoint:
        if not text.endswith("\n"):
            raise LogError("checkpoint body does not end with a newline")
        lines = text[:-1].split("\n")
        if len(lines) < 3:
            raise LogError("checkpoint body needs origin, size and root hash lines")
        origin, size_s, root_s, *ext = lines
        if not origin:
            raise LogError("checkpoint origin line is empty")
        if not size_s.isdigit() or (size_s != "0" and size_s.startswith("0")):
            raise LogError(f"checkpoint size {size_s!r} is not a decimal number")
        try:
            root = base64.b64decode(root_s, validate=True)
        except binascii.Error:
            raise LogError(f"checkpoint root {root_s!r} is not base64") from None
        if len(root) != HASH_SIZE:
            raise LogError("checkpoint root is not a SHA-256 hash")
        if any(not e for e in ext):
            raise LogError("checkpoint has an empty extension line")
        return cls(origin, int(size_s), root, tuple(ext))
