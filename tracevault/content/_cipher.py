"""AES-256-GCM of a run's content fields, as canonical JSON envelopes the sequencer accepts.

One data key per run, used by one cipher in one process (the Recorder's); every field gets
a fresh 96-bit nonce: 4 random bytes drawn when the cipher is made, then a 64-bit counter
(NIST SP 800-38D's deterministic construction). A nonce never repeats under a key, and a
field costs no system call for randomness. The AAD is
``tracevault/v1/content\\0 <run id> \\0 <seq, 8 bytes> <field>``: a ciphertext moved to
another run, seq or field does not open. The envelope is canonical JSON (RFC 8785), so the
sequencer's checks, its C fast path included, pass it unchanged:

    {"enc":"<base64 of nonce ‖ ciphertext ‖ tag>","v":1}
    {"enc":"...","tool":"search","v":1}      a TOOL_CALL request keeps its tool name in clear

An error's type stays in clear and its message becomes the envelope's text.
"""

from __future__ import annotations

import base64
import binascii
import itertools
import os
from typing import Any

import orjson
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from tracevault.errors import ContentKeyError

__all__ = ["FIELDS", "RunCipher", "is_envelope"]

_NONCE = 12
_HEAD = b'{"enc":"'
_TAIL = b'","v":1}'
_TOOL_KEY = b',"tool":'
#: the content fields a run encrypts, as named in the AAD
FIELDS = ("request", "response", "error")


def _b64(data: bytes) -> bytes:
    # the C function base64.b64encode wraps, without the wrapper's call
    return binascii.b2a_base64(data, newline=False)


def is_envelope(data: bytes) -> bool:
    """Whether ``data`` has the shape of an encrypted field (not whether it opens)."""
    return data.startswith(_HEAD) and data.endswith(b',"v":1}')


class RunCipher:
    """Seals and opens the content fields of one run under its data key."""

    __slots__ = ("_aad", "_count", "_gcm", "_salt", "run_id")

    def __init__(self, run_id: str, data_key: bytes) -> None:
        self.run_id = run_id
        self._gcm = AESGCM(data_key)
        self._aad = b"tracevault/v1/content\0" + run_id.encode("utf-8") + b"\0"
        self._salt = os.urandom(4)
        self._count = itertools.count()  # next() is atomic under the GIL: threads share it

    def _nonce(self) -> bytes:
        return self._salt + next(self._count).to_bytes(8, "big")

    def _ad(self, seq: int, field: str) -> bytes:
        return self._aad + seq.to_bytes(8, "big", signed=True) + field.encode("ascii")

    def seal(self, seq: int, field: str, plaintext: bytes) -> bytes:
        """The envelope of ``plaintext`` (canonical JSON bytes) at ``seq``/``field``."""
        nonce = self._nonce()
        ct = self._gcm.encrypt(nonce, plaintext, self._ad(seq, field))
        return _HEAD + _b64(nonce + ct) + _TAIL

    def seal_tool_request(self, seq: int, request: bytes) -> bytes:
        """A TOOL_CALL request's envelope, its tool name kept in clear.

        The request is canonical ``{"args":...,"tool":"<name>"}``: sorted keys put the tool
        name last, and a JSON string cannot hold an unescaped quote, so the last
        ``,"tool":`` is the top-level one and the name's literal ends one byte before the end.
        """
        at = request.rfind(_TOOL_KEY)
        if at < 0 or not request.endswith(b'"}'):
            return self.seal(seq, "request", request)
        name = request[at + len(_TOOL_KEY) : -1]
        nonce = self._nonce()
        ct = self._gcm.encrypt(nonce, request, self._ad(seq, "request"))
        return _HEAD + _b64(nonce + ct) + b'","tool":' + name + b',"v":1}'

    def open(self, seq: int, field: str, envelope: bytes) -> bytes:
        """The plaintext of an envelope; ContentKeyError naming run, seq and field if it
        is malformed or does not open here (moved, altered, another key)."""
        try:
            o: Any = orjson.loads(envelope)
            if not isinstance(o, dict) or o.get("v") != 1 or not set(o) <= {"enc", "v", "tool"}:
                raise ValueError("not an envelope of version 1")
            blob = base64.b64decode(o["enc"], validate=True)
        except (ValueError, KeyError, TypeError, binascii.Error) as exc:
            raise ContentKeyError(
                f"run {self.run_id} seq {seq}: $.{field} is not an encrypted field ({exc}); "
                "in an encrypted run every content field is one"
            ) from None
        try:
            return self._gcm.decrypt(blob[:_NONCE], blob[_NONCE:], self._ad(seq, field))
        except (InvalidTag, ValueError):
            raise ContentKeyError(
                f"run {self.run_id} seq {seq}: $.{field} does not decrypt under this run's data "
                "key for this seq and field (a ciphertext moved from elsewhere, or altered)"
            ) from None
