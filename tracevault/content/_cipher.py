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

Where the C extension is built (``_cfields.c``'s ``Sealer``), every seal of a cipher goes
through the one ``Sealer`` made with it: it owns the run key's only nonce counter (the Python
counter is then never used), and seals an event's request and response in one call
(:attr:`RunCipher.event_sealer`, the Recorder's), with the bytes the Python path gives for the
same nonces. Either counter refuses (OverflowError) after 2**64 fields instead of wrapping.
"""

from __future__ import annotations

import binascii
import itertools
import os
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import TYPE_CHECKING, Any

import orjson
import pybase64
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from tracevault import native
from tracevault.errors import ContentKeyError

if TYPE_CHECKING:
    from tracevault.content._cfields import Sealer

__all__ = ["FIELDS", "EventSealer", "RunCipher", "is_envelope"]

_NONCE = 12
_HEAD = b'{"enc":"'
_TAIL = b'","v":1}'
_TOOL_KEY = b',"tool":'
#: the content fields a run encrypts, as named in the AAD
FIELDS = ("request", "response", "error")
#: the counter's values: 2**64 nonces under one key, then a refusal
_COUNTERS = 2**64
#: the sealer in C (``_cfields.c``): an event's two fields in one call, the one nonce counter
_cfields: ModuleType | None = native.load("tracevault.content._cfields")

#: ``seal_event(seq, is_tool, request, response) -> (request envelope, response envelope)``
EventSealer = Callable[[int, bool, bytes, bytes], tuple[bytes, bytes]]


#: Standard base64 (RFC 4648 section 4, padded), in SIMD: binascii's took 1.8 µs to write and
#: 5.4 µs to read (strictly) a 1.5 KB field, pybase64 0.2 and 0.6 (docs/confidentiality.md,
#: "What encryption costs"). Its decoder with ``validate=True`` refuses everything binascii's
#: strict mode refuses, and excess padding too (tests/content/test_envelope.py).
_b64 = pybase64.b64encode
_unb64 = pybase64.b64decode


def is_envelope(data: bytes) -> bool:
    """Whether ``data`` has the shape of an encrypted field (not whether it opens)."""
    return data.startswith(_HEAD) and data.endswith(b',"v":1}')


def _blob(envelope: bytes) -> bytes:
    """The nonce, ciphertext and tag an envelope carries (ValueError when it is none).

    The envelopes this module writes are sliced without a JSON parse (the read path of
    ``replay show/run`` opens two per event); anything else is parsed and held to the same
    shape: ``enc``, ``v`` = 1 and an optional ``tool``, nothing more.
    """
    if envelope.startswith(_HEAD):
        end = len(envelope) - len(_TAIL)
        if envelope.endswith(_TAIL) and envelope.find(b'"', len(_HEAD), end) < 0:
            return _unb64(envelope[len(_HEAD) : end], validate=True)
    o: Any = orjson.loads(envelope)
    if not isinstance(o, dict) or o.get("v") != 1 or not set(o) <= {"enc", "v", "tool"}:
        raise ValueError("not an envelope of version 1")
    return _unb64(o["enc"], validate=True)


def _is_bytes(value: object) -> bool:
    # Callers are typed, tests of the twins are not: a runtime check of what the type promises.
    return isinstance(value, bytes)


def _sealers_counter() -> Iterator[int]:
    """The Python counter of a cipher that seals in C: drawing from it is a bug, refused."""
    yield from ()
    raise RuntimeError("this cipher's nonces are its Sealer's: the Python counter is unused")


class RunCipher:
    """Seals and opens the content fields of one run under its data key."""

    __slots__ = ("_aad", "_count", "_gcm", "_salt", "_sealer", "run_id")

    @property
    def aad_prefix(self) -> bytes:
        """The AAD before the seq and the field: ``tracevault/v1/content\\0<run id>\\0``."""
        return self._aad

    def __init__(self, run_id: str, data_key: bytes) -> None:
        self._setup(run_id, data_key, os.urandom(4), 0, native=True)

    @classmethod
    def pinned(
        cls, run_id: str, data_key: bytes, salt: bytes, start: int, *, native: bool
    ) -> RunCipher:
        """A cipher whose nonces start at ``salt ‖ start``, sealing in C (``native``, where it
        is built) or in Python: for the tests that hold the two to the same bytes. Two ciphers
        made so under one key reuse nonces; tracevault itself never calls this."""
        cipher = cls.__new__(cls)
        cipher._setup(run_id, data_key, salt, start, native=native)
        return cipher

    def _setup(
        self, run_id: str, data_key: bytes, salt: bytes, start: int, *, native: bool
    ) -> None:
        if len(salt) != 4:
            raise ValueError("the nonce salt is 4 bytes")
        if not 0 <= start < _COUNTERS:
            raise OverflowError("the nonce counter starts within 0 .. 2**64 - 1")
        self.run_id = run_id
        self._gcm = AESGCM(data_key)
        self._aad = b"tracevault/v1/content\0" + run_id.encode("utf-8") + b"\0"
        self._salt = salt
        # Exactly one counter per key: the Sealer's where the C is loaded (then the Python
        # one refuses to be drawn from), else this one. Both are atomic under the GIL: threads
        # share them (the Sealer never releases it).
        self._sealer: Sealer | None = None
        self._count: Iterator[int] = itertools.count(start)
        if native and _cfields is not None:
            self._sealer = _cfields.Sealer(data_key, self._aad, salt, start)
            self._count = _sealers_counter()

    def _nonce(self) -> bytes:
        return self._salt + next(self._count).to_bytes(8, "big")

    def _ad(self, seq: int, field: str) -> bytes:
        return self._aad + seq.to_bytes(8, "big", signed=True) + field.encode("ascii")

    def _seal_ad(self, seq: int, field: str) -> bytes:
        """The AAD of a field to seal, checked as the C checks it, before a nonce is drawn:
        ``seq`` an int within int64 (TypeError, OverflowError), ``field`` one of FIELDS."""
        if field not in FIELDS:
            raise ValueError("seal: field must be request, response or error")
        return self._aad + int.to_bytes(seq, 8, "big", signed=True) + field.encode("ascii")

    def seal(self, seq: int, field: str, plaintext: bytes) -> bytes:
        """The envelope of ``plaintext`` (canonical JSON bytes) at ``seq``/``field``."""
        if self._sealer is not None:
            return self._sealer.seal(seq, field, plaintext)
        ad = self._seal_ad(seq, field)
        nonce = self._nonce()
        ct = self._gcm.encrypt(nonce, plaintext, ad)
        return _HEAD + _b64(nonce + ct) + _TAIL

    def seal_tool_request(self, seq: int, request: bytes) -> bytes:
        """A TOOL_CALL request's envelope, its tool name kept in clear.

        The request is canonical ``{"args":...,"tool":"<name>"}``: sorted keys put the tool
        name last, and a JSON string cannot hold an unescaped quote, so the last
        ``,"tool":`` is the top-level one and the name's literal ends one byte before the end.
        Any other shape is sealed as :meth:`seal` seals it.
        """
        if self._sealer is not None:
            return self._sealer.seal_tool_request(seq, request)
        if not _is_bytes(request):  # any bytes-like, as the C takes it (else TypeError)
            request = bytes(memoryview(request))
        at = request.rfind(_TOOL_KEY)
        if at < 0 or not request.endswith(b'"}'):
            return self.seal(seq, "request", request)
        name = request[at + len(_TOOL_KEY) : -1]
        ad = self._seal_ad(seq, "request")
        nonce = self._nonce()
        ct = self._gcm.encrypt(nonce, request, ad)
        return _HEAD + _b64(nonce + ct) + b'","tool":' + name + b',"v":1}'

    def _seal_event(
        self, seq: int, is_tool: bool, request: bytes, response: bytes
    ) -> tuple[bytes, bytes]:
        req = (
            self.seal_tool_request(seq, request) if is_tool else self.seal(seq, "request", request)
        )
        return req, self.seal(seq, "response", response)

    @property
    def event_sealer(self) -> EventSealer:
        """``seal_event(seq, is_tool, request, response)``: an event's request (a TOOL_CALL's
        as :meth:`seal_tool_request` seals it when ``is_tool``) and response sealed, the
        request's nonce first; in C, one call, where it is built."""
        if self._sealer is not None:
            return self._sealer.seal_event
        return self._seal_event

    def open_pair(self, seq: int, request: bytes, response: bytes) -> tuple[bytes, bytes]:
        """An event's request and response opened: :meth:`open` twice, with the AAD's
        prefix made once (the read path of ``replay show/run`` opens every event)."""
        ad = self._aad + seq.to_bytes(8, "big", signed=True)
        decrypt = self._gcm.decrypt
        try:
            req, resp = _blob(request), _blob(response)
            return decrypt(req[:_NONCE], req[_NONCE:], ad + b"request"), decrypt(
                resp[:_NONCE], resp[_NONCE:], ad + b"response"
            )
        except (InvalidTag, ValueError, KeyError, TypeError, binascii.Error):
            # the slow way, to name the field that does not open
            return self.open(seq, "request", request), self.open(seq, "response", response)

    def open(self, seq: int, field: str, envelope: bytes) -> bytes:
        """The plaintext of an envelope; ContentKeyError naming run, seq and field if it
        is malformed or does not open here (moved, altered, another key)."""
        try:
            blob = _blob(envelope)
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
