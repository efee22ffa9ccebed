"""A partition log written straight into a real sealed topic, as a log key holder would.

Shared by the witness tests that need the real broker: the genuine log, a fork or a
rolled-back history (another ``tag``), each a checkpoint record produced to partition 0.
"""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from confluent_kafka import Producer

from tracevault.config import Settings
from tracevault.kafka import sealed_generation
from tracevault.transparency import (
    CHECKPOINT_KEY,
    RECORD_HEADER,
    RECORD_HEADER_CHECKPOINT,
    CheckpointRecord,
    CompactTree,
    Ed25519Signer,
    leaf_hash,
    log_origin,
)

RUN = "run-attacked"


def chain(seq: int, tag: str) -> bytes:
    return hashlib.sha256(f"{tag}:{seq}".encode()).digest()


@dataclass
class Partition:
    """Partition 0's log as a key holder writes it: leaves of run RUN, tagged by history."""

    settings: Settings
    signer: Ed25519Signer
    producer: Producer
    tag: str
    tree: CompactTree = field(default_factory=CompactTree)
    leaves: list[bytes] = field(default_factory=list)

    @property
    def origin(self) -> str:
        # as the sequencer signs it: of this incarnation of the topic (docs/log.md)
        gen = sealed_generation(self.settings)
        return log_origin(self.settings.log_origin, self.settings.topic_prefix, 0, gen)

    def build(self, n: int) -> CheckpointRecord:
        """The next record of ``n`` leaves, kept in the tree but not produced."""
        lo = self.tree.size
        new = [leaf_hash(RUN, s, chain(s, self.tag)) for s in range(lo, lo + n)]
        rec, self.tree = CheckpointRecord.build(self.tree, new, self.origin, self.signer)
        self.leaves.extend(new)
        return rec

    def produce(self, rec: CheckpointRecord) -> None:
        self.producer.produce(
            self.settings.topics.sealed,
            key=CHECKPOINT_KEY,
            value=rec.encode(),
            partition=0,
            headers=[(RECORD_HEADER, RECORD_HEADER_CHECKPOINT)],
        )
        assert self.producer.flush(10) == 0

    def append(self, n: int) -> CheckpointRecord:
        rec = self.build(n)
        self.produce(rec)
        return rec

    def fork(self, tag: str) -> Partition:
        return Partition(self.settings, self.signer, self.producer, tag)


def post_add_checkpoint(url: str, old: int, proof: list[bytes], note: str) -> tuple[int, str, str]:
    """POST a C2SP tlog-witness add-checkpoint body; (status, Content-Type, body)."""
    body = f"old {old}\n" + "".join(base64.b64encode(h).decode() + "\n" for h in proof)
    req = urllib.request.Request(url, data=(body + "\n" + note).encode(), method="POST")
    try:
        with urllib.request.urlopen(req, timeout=10) as res:
            return res.status, res.headers["Content-Type"], res.read().decode()
    except urllib.error.HTTPError as e:
        with e:
            return e.code, e.headers["Content-Type"], e.read().decode()


@contextmanager
def witness_process(args: list[str], **env: str) -> Iterator[subprocess.Popen[str]]:
    """``python -m tracevault <args>`` with ``env`` added; killed on the way out if alive."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tracevault", *args],
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=10)
