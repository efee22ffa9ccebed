"""C2SP signed-note: Ed25519 signers and verifiers, verifier keys, signing and opening notes.

Format (c2sp.org/signed-note, the format of Go's ``golang.org/x/mod/sumdb/note``): a note is
UTF-8 text ending in a newline, a blank line, then one line per signature,
``"\u2014 " name " " base64(key_id ‖ signature) "\\n"``. A key id is the first four bytes of
``SHA-256(name ‖ "\\n" ‖ type ‖ public key)``; Ed25519 is type 0x01. A verifier key (vkey) is
``name+hex(key_id)+base64(type ‖ public key)``; the private form is
``PRIVATE+KEY+name+hex(key_id)+base64(type ‖ seed)``, exactly what ``note.GenerateKey`` writes,
so keys move between our tools and Go's (docs/log.md).

The :class:`NoteSigner` protocol is the seam for a cloud KMS: anything with a name, a key id
and ``sign(message)`` can sign checkpoints; the file and environment keys are one such.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import ClassVar, Protocol, Self

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
)

from tracevault import native
from tracevault.errors import ConfigError, LogError

__all__ = [
    "ALG_ED25519",
    "Ed25519Signer",
    "Ed25519Verifier",
    "NoteSigner",
    "NoteVerifier",
    "SeedKey",
    "Signature",
    "key_id",
    "open_note",
    "parse_vkey",
    "sign_note",
    "split_note",
]

ALG_ED25519 = 0x01
_DASH = "\u2014 "
_MAX_SIGNATURES = 100


def key_id(name: str, alg: int, public_key: bytes) -> bytes:
    """The 4-byte key id of c2sp.org/signed-note."""
    return hashlib.sha256(name.encode() + b"\n" + bytes([alg]) + public_key).digest()[:4]


def _check_name(name: str) -> None:
    if not name or any(c.isspace() or c == "+" for c in name) or not name.isprintable():
        raise ConfigError(f"key name {name!r} must be non-empty, with no spaces and no '+'")


class NoteSigner(Protocol):
    """Signs note texts. A KMS-backed signer implements this without holding the key."""

    @property
    def name(self) -> str: ...

    @property
    def key_id(self) -> bytes: ...

    def sign(self, message: bytes) -> bytes: ...


class NoteVerifier(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def key_id(self) -> bytes: ...

    def verify(self, message: bytes, signature: bytes) -> bool: ...


@dataclass(frozen=True, slots=True)
class Ed25519Verifier:
    """A verifier for one Ed25519 key; ``vkey`` is its public text form."""

    name: str
    public_key: bytes

    def __post_init__(self) -> None:
        _check_name(self.name)
        if len(self.public_key) != 32:
            raise ConfigError(f"Ed25519 public key of {self.name!r} is not 32 bytes")

    @property
    def key_id(self) -> bytes:
        return key_id(self.name, ALG_ED25519, self.public_key)

    @property
    def vkey(self) -> str:
        blob = base64.b64encode(bytes([ALG_ED25519]) + self.public_key).decode()
        return f"{self.name}+{self.key_id.hex()}+{blob}"

    def verify(self, message: bytes, signature: bytes) -> bool:
        try:
            Ed25519PublicKey.from_public_bytes(self.public_key).verify(signature, message)
        except InvalidSignature:
            return False
        return True


_KEY_KINDS = {0x01: "a log key (Ed25519, type 0x01)", 0x04: "a witness key (type 0x04)"}


class SeedKey:
    """A named Ed25519 key from a 32-byte seed, of one signed-note key type (``ALG``).

    What a log's signer and a witness's signer share: the name, the key id of their type and
    the private key text (``PRIVATE+KEY+name+id+base64(type ‖ seed)``). Each subclass says
    what it signs and which verifier checks it.
    """

    ALG: ClassVar[int] = ALG_ED25519

    def __init__(self, name: str, seed: bytes) -> None:
        _check_name(name)
        if len(seed) != 32:
            raise ConfigError(f"Ed25519 private key of {name!r} is not a 32-byte seed")
        self._name = name
        self._key = Ed25519PrivateKey.from_private_bytes(seed)
        self._public = self._key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        self._key_id = key_id(name, self.ALG, self._public)

    @classmethod
    def generate(cls, name: str) -> Self:
        seed = Ed25519PrivateKey.generate().private_bytes(
            Encoding.Raw, PrivateFormat.Raw, NoEncryption()
        )
        return cls(name, seed)

    @classmethod
    def from_skey(cls, text: str) -> Self:
        """Parse ``PRIVATE+KEY+name+id+base64(ALG ‖ seed)`` and check its id.

        A key of the other type is refused by name: one key, one role, so a log key can
        never cosign its own checkpoints as a witness.
        """
        name, hexid, raw = key_fields(text, private=True, what="a private key")
        if len(raw) != 33 or raw[0] != cls.ALG:
            found = _KEY_KINDS.get(raw[0]) if raw else None
            raise ConfigError(
                f"private key of {name!r} is not {_KEY_KINDS[cls.ALG]}"
                + (f": it is {found}" if found else "")
            )
        signer = cls(name, raw[1:])
        check_key_id(name, hexid, signer.key_id, "private key")
        return signer

    @property
    def name(self) -> str:
        return self._name

    @property
    def key_id(self) -> bytes:
        return self._key_id

    @property
    def skey(self) -> str:
        seed = self._key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
        blob = base64.b64encode(bytes([self.ALG]) + seed).decode()
        return f"PRIVATE+KEY+{self._name}+{self.key_id.hex()}+{blob}"


#: libcrypto's Ed25519 holding the GIL (``_csign.c``): the Recorder's Publisher thread signs
#: agent notes beside a busy agent thread, where ``cryptography``'s sign, which releases the
#: GIL, cost 5 ms each to get it back (docs/identity.md, "What identity costs").
_csign: ModuleType | None = native.load("tracevault.transparency._csign")


class Ed25519Signer(SeedKey):
    """An Ed25519 signer from a 32-byte seed (the file or environment key)."""

    def __init__(self, name: str, seed: bytes) -> None:
        super().__init__(name, seed)
        self._verifier = Ed25519Verifier(name, self._public)
        self._ckey = None if _csign is None else _csign.key(seed)

    @property
    def verifier(self) -> Ed25519Verifier:
        return self._verifier

    def sign(self, message: bytes) -> bytes:
        if self._ckey is not None:
            sig: bytes = _csign.sign(self._ckey, message)  # type: ignore[union-attr]
            return sig
        return self._key.sign(message)


def parse_vkey(text: str) -> Ed25519Verifier:
    """Parse ``name+id+base64(0x01 ‖ public key)``; the id must match the key."""
    name, hexid, raw = key_fields(text, private=False, what="a verifier key")
    if len(raw) != 33 or raw[0] != ALG_ED25519:
        raise ConfigError(f"verifier key of {name!r} is not an Ed25519 (type 0x01) key")
    verifier = Ed25519Verifier(name, raw[1:])
    check_key_id(name, hexid, verifier.key_id, "verifier key")
    return verifier


def key_fields(text: str, *, private: bool, what: str) -> tuple[str, str, bytes]:
    """(name, hex id, type byte ‖ key) of ``[PRIVATE+KEY+]name+id+base64``, any key type."""
    if not private and text.strip().startswith("PRIVATE+KEY+"):
        # never echo it: the text is a secret (docs/log.md, "Keys")
        raise ConfigError(
            f"{what} was given a private (signer) key (PRIVATE+KEY+…): a verifier needs the "
            'public one. Print it with `tracevault keys show KEYFILE` (or `echo "$KEY" | '
            "tracevault keys show -`) and pass that vkey, or @FILE of vkeys"
        )
    parts = text.strip().split("+", 4 if private else 2)  # base64 may hold "+"
    if private and (len(parts) != 5 or parts[0] != "PRIVATE" or parts[1] != "KEY"):
        raise ConfigError(f"{what} reads PRIVATE+KEY+<name>+<id>+<key>")
    if not private and len(parts) != 3:
        raise ConfigError(f"{what} {text!r} does not read <name>+<id>+<key>")
    name, hexid, blob = parts[-3:]
    try:
        raw = base64.b64decode(blob, validate=True)
    except binascii.Error as e:
        raise ConfigError(f"{what} of {name!r} is not base64: {e}") from None
    return name, hexid, raw


def check_key_id(name: str, hexid: str, actual: bytes, what: str) -> None:
    """A key's written id must be the one its name, type and key give (c2sp.org/signed-note)."""
    if actual.hex() != hexid.lower():
        raise ConfigError(f"{what} of {name!r} has id {hexid}, its key says otherwise")


@dataclass(frozen=True, slots=True)
class Signature:
    """One signature line: the signer's name, key id, and the bytes after the id."""

    name: str
    key_id: bytes
    signature: bytes

    def line(self) -> str:
        blob = base64.b64encode(self.key_id + self.signature).decode()
        return f"{_DASH}{self.name} {blob}\n"


def sign_note(text: str, signers: Iterable[NoteSigner]) -> str:
    """Sign ``text`` (which must end in a newline) with each signer; returns the note."""
    if not text.endswith("\n"):
        raise LogError("a note's text must end with a newline")
    msg = text.encode()
    lines = [Signature(s.name, s.key_id, s.sign(msg)).line() for s in signers]
    if not lines:
        raise LogError("a note needs at least one signer")
    return text + "\n" + "".join(lines)


def split_note(note: str | bytes) -> tuple[str, list[Signature]]:
    """Separate the text from its signature lines, checking only their form."""
    if isinstance(note, bytes):
        try:
            note = note.decode("utf-8")
        except UnicodeDecodeError:
            raise LogError("a signed note is not UTF-8") from None
    cut = note.rfind("\n\n")
    if cut < 0 or not note.endswith("\n"):
        raise LogError("not a signed note: no blank line before the signatures")
    text, block = note[: cut + 1], note[cut + 2 :]
    sigs: list[Signature] = []
    for line in block.splitlines():
        if not line.startswith(_DASH):
            raise LogError(f"malformed signature line {line[:60]!r}")
        name, _, blob = line[len(_DASH) :].partition(" ")
        try:
            raw = base64.b64decode(blob, validate=True)
        except binascii.Error:
            raise LogError(f"signature of {name!r} is not base64") from None
        if not name or len(raw) < 5:
            raise LogError(f"malformed signature line of {name!r}")
        sigs.append(Signature(name, raw[:4], raw[4:]))
        if len(sigs) > _MAX_SIGNATURES:
            raise LogError(f"a note with more than {_MAX_SIGNATURES} signatures")
    if not sigs:
        raise LogError("a signed note without signatures")
    return text, sigs


def open_note(
    note: str | bytes, verifiers: Sequence[NoteVerifier]
) -> tuple[str, list[NoteVerifier]]:
    """The note's text and the verifiers whose signature on it holds.

    As Go's ``note.Open``: signatures by unknown keys are ignored, a signature by a known key
    that does not verify is an error (the note was altered), and a note with no signature by
    a known key is an error naming the keys it was signed with.
    """
    text, sigs = split_note(note)
    msg = text.encode()
    known = {(v.name, v.key_id): v for v in verifiers}
    good: list[NoteVerifier] = []
    for s in sigs:
        v = known.get((s.name, s.key_id))
        if v is None:
            continue
        if not v.verify(msg, s.signature):
            raise LogError(f"signature of {s.name} ({s.key_id.hex()}) does not verify")
        if v not in good:
            good.append(v)
    if not good:
        named = ", ".join(f"{s.name}+{s.key_id.hex()}" for s in sigs)
        raise LogError(f"note signed by unknown key(s) {named}; trusted: " + _names(verifiers))
    return text, good


def _names(verifiers: Sequence[NoteVerifier]) -> str:
    return ", ".join(f"{v.name}+{v.key_id.hex()}" for v in verifiers) or "none"
