"""C2SP tlog-cosignature (``cosignature/v1``, Ed25519): what a witness signs, and its check.

A cosignature is an ordinary signed-note signature line on a checkpoint, with a key id of
type 0x04 (``SHA-256(name ‖ "\\n" ‖ 0x04 ‖ public key)[:4]``) and, as the signature,
``u64 timestamp ‖ Ed25519(msg)`` where ``msg = "cosignature/v1\\ntime <t>\\n" ‖ body``
(c2sp.org/tlog-cosignature). The prefix is domain separation: a witness key never signs
anything a log key would, and a log signature can never pass for a cosignature.

:class:`CosignatureSigner` is a :class:`~tracevault.transparency.NoteSigner` and
:class:`CosignatureVerifier` a :class:`~tracevault.transparency.NoteVerifier`, so ``sign_note``,
``open_note`` and ``check_run_log(witnesses=...)`` take them unchanged. Keys are written in
the formats of ``github.com/transparency-dev/formats/note`` (docs/log.md, "Keys").
"""

from __future__ import annotations

import base64
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PublicKey,
)

from tracevault.errors import ConfigError, LogError
from tracevault.transparency._note import (
    ALG_ED25519,
    NoteSigner,
    SeedKey,
    Signature,
    check_key_id,
    key_fields,
    key_id,
    split_note,
)
from tracevault.transparency._note import _check_name as check_key_name

__all__ = [
    "ALG_COSIGNATURE_V1",
    "COSIGNATURE_V1_HEADER",
    "CosignatureSigner",
    "CosignatureVerifier",
    "add_cosignature",
    "cosignature_message",
    "cosignature_time",
    "parse_witness_vkey",
]

ALG_COSIGNATURE_V1 = 0x04
COSIGNATURE_V1_HEADER = "cosignature/v1"
_TS = struct.Struct(">Q")
_SIG_LEN = _TS.size + 64
_MAX_TS = (1 << 63) - 1


def cosignature_message(timestamp: int, body: bytes) -> bytes:
    """What a ``cosignature/v1`` Ed25519 signature covers: header, time line, the note body."""
    if not 0 <= timestamp <= _MAX_TS:
        raise LogError(f"cosignature timestamp {timestamp} is outside 0..2^63-1")
    return f"{COSIGNATURE_V1_HEADER}\ntime {timestamp}\n".encode() + body


def cosignature_time(signature: bytes) -> int:
    """The POSIX timestamp a cosignature carries (its first eight bytes)."""
    if len(signature) != _SIG_LEN:
        raise LogError(f"a cosignature/v1 signature is {_SIG_LEN} bytes, not {len(signature)}")
    (ts,) = _TS.unpack_from(signature, 0)
    return int(ts)


@dataclass(frozen=True, slots=True)
class CosignatureVerifier:
    """Checks ``cosignature/v1`` signatures of one witness key; ``vkey`` is its text form.

    ``max_future_s`` (None: no limit) rejects cosignatures dated further ahead than that, as
    the spec allows: a witness clock far in the future is a witness not to count.
    """

    name: str
    public_key: bytes
    max_future_s: float | None = None

    def __post_init__(self) -> None:
        check_key_name(self.name)
        if len(self.public_key) != 32:
            raise ConfigError(f"Ed25519 witness key of {self.name!r} is not 32 bytes")

    @property
    def key_id(self) -> bytes:
        return key_id(self.name, ALG_COSIGNATURE_V1, self.public_key)

    @property
    def vkey(self) -> str:
        blob = base64.b64encode(bytes([ALG_COSIGNATURE_V1]) + self.public_key).decode()
        return f"{self.name}+{self.key_id.hex()}+{blob}"

    def verify(self, message: bytes, signature: bytes) -> bool:
        if len(signature) != _SIG_LEN:
            return False
        (ts,) = _TS.unpack_from(signature, 0)
        if ts > _MAX_TS:
            return False
        if self.max_future_s is not None and ts > time.time() + self.max_future_s:
            return False
        try:
            Ed25519PublicKey.from_public_bytes(self.public_key).verify(
                signature[_TS.size :], cosignature_message(ts, message)
            )
        except InvalidSignature:
            return False
        return True


class CosignatureSigner(SeedKey):
    """A witness's signer: ``sign(body)`` returns ``u64 time ‖ Ed25519`` per cosignature/v1.

    ``clock`` (POSIX seconds) is injectable so a test can pin the timestamp.
    """

    ALG = ALG_COSIGNATURE_V1

    def __init__(self, name: str, seed: bytes, clock: Callable[[], float] = time.time) -> None:
        super().__init__(name, seed)
        self._clock = clock
        self._verifier = CosignatureVerifier(name, self._public)

    @property
    def verifier(self) -> CosignatureVerifier:
        return self._verifier

    def sign(self, message: bytes) -> bytes:
        ts = int(self._clock())
        return _TS.pack(ts) + self._key.sign(cosignature_message(ts, message))


def parse_witness_vkey(text: str) -> CosignatureVerifier:
    """Parse a witness vkey ``name+id+base64(0x04 ‖ public key)``; the id must match."""
    name, hexid, raw = key_fields(text, private=False, what="a witness key")
    if len(raw) != 33 or raw[0] != ALG_COSIGNATURE_V1:
        hint = (
            ": that is a log key (type 0x01); pass the witness's own vkey"
            if raw[:1] == bytes([ALG_ED25519])
            else ""
        )
        raise ConfigError(f"witness key of {name!r} is not a cosignature/v1 (0x04) key{hint}")
    verifier = CosignatureVerifier(name, raw[1:])
    check_key_id(name, hexid, verifier.key_id, "witness key")
    return verifier


def add_cosignature(note: str, signer: NoteSigner) -> str:
    """``note`` with one more signature line, by ``signer``, over its text.

    The existing lines are kept as they are (the log's signature first); a line by the same
    key is replaced, so cosigning twice never leaves two cosignatures of one witness.
    """
    text, sigs = split_note(note)
    blob = signer.sign(text.encode())
    mine = Signature(signer.name, signer.key_id, blob)
    kept = [s for s in sigs if (s.name, s.key_id) != (signer.name, signer.key_id)]
    return text + "\n" + "".join(s.line() for s in [*kept, mine])
