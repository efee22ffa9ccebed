"""C2SP tlog-checkpoint bodies and the origin of each partition's log.

A checkpoint body is ``origin\\n size\\n base64(root)\\n`` and optional extension lines
(c2sp.org/tlog-checkpoint). One log per sealed partition, so the origin names the partition:
``<log_origin>/<prefix>/<generation>/<partition>``, where the generation names the Kafka topic
incarnation the log lives in (``log_generation``: a new cluster, or the topic deleted and
created again, starts a new log rather than forking the old one). Logs begun before
generations are ``<log_origin>/<prefix>/<partition>`` and stay valid (docs/log.md).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from dataclasses import dataclass

from tracevault.errors import LogError
from tracevault.transparency._merkle import HASH_SIZE

__all__ = [
    "Checkpoint",
    "is_partition_origin",
    "log_generation",
    "log_origin",
    "origin_generation",
]

_GENERATION = re.compile(r"g[0-9a-f]{16}")


def log_origin(base: str, prefix: str, partition: int, generation: str = "") -> str:
    """The origin of a partition's log; without ``generation`` the form logs had before."""
    if generation:
        return f"{base}/{prefix}/{generation}/{partition}"
    return f"{base}/{prefix}/{partition}"


def log_generation(cluster_id: str, topic_id: str) -> str:
    """``g`` + 16 hex digits naming one incarnation of the sealed topic: its cluster's id and
    its own topic id (both made by Kafka, so a rebuilt cluster or a re-created topic gets
    another, and every service derives the same one without storing it)."""
    digest = hashlib.sha256(f"{cluster_id}/{topic_id}".encode()).hexdigest()
    return "g" + digest[:16]


def is_partition_origin(origin: str, base: str, prefix: str, partition: int) -> bool:
    """Whether ``origin`` names the log of ``partition`` of ``prefix`` (any generation)."""
    if origin == log_origin(base, prefix, partition):
        return True
    head, sep, tail = origin.rpartition("/")
    if not sep or tail != str(partition):
        return False
    stem, sep, gen = head.rpartition("/")
    return bool(sep) and stem == f"{base}/{prefix}" and _GENERATION.fullmatch(gen) is not None


def origin_generation(origin: str) -> str:
    """The generation an origin names (``""`` for the form before generations)."""
    head = origin.rpartition("/")[0]
    gen = head.rpartition("/")[2]
    return gen if _GENERATION.fullmatch(gen) else ""


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
