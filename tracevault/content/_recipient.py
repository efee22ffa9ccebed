"""A recipient's key pair, and a run's data key sealed for one recipient with HPKE (RFC 9180).

``replay export --reveal-to`` hands an auditor who must read a bundle the run's data key,
sealed to the auditor's X25519 public key, so the auditor reads with nothing but its own
private key: no provider, no KMS grant (docs/confidentiality.md, "Bundles for one reader").

The construction is HPKE's base mode, single shot, suite DHKEM(X25519, HKDF-SHA256),
HKDF-SHA256, AES-256-GCM, from ``cryptography`` (the maintained binding; no scheme of ours).
HPKE's KEM already binds the ephemeral key and the recipient's public key; its ``info``
(the single-shot API's place for what the key must be bound to, RFC 9180 section 8.1) binds
the rest: the recipient's key id, the bundle's run, the run whose key it is, and that run's
chain head and last seq. A sealed key moved to another bundle, another run or another export
of the same run does not open.

Key strings, printable and never confused with the log's signing keys::

    RECIPIENT+<name>+<hex key id>+<base64 of the 32-byte X25519 public key>
    PRIVATE+RECIPIENT+<name>+<hex key id>+<base64 of the 32-byte X25519 private key>

The key id is the first four bytes of SHA-256("tracevault/v1/recipient\\0" ‖ name ‖ "\\n" ‖
public key).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import stat
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hpke
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
)

from tracevault.errors import ConfigError, ContentKeyError

__all__ = [
    "REVEAL_SUITE",
    "Recipient",
    "RecipientKey",
    "RevealedRun",
    "open_for",
    "seal_for",
]

#: what a reveal names as its construction
REVEAL_SUITE = "HPKE base, DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, AES-256-GCM (RFC 9180)"
_SUITE = hpke.Suite(hpke.KEM.X25519, hpke.KDF.HKDF_SHA256, hpke.AEAD.AES_256_GCM)
_PUBLIC = "RECIPIENT+"
_PRIVATE = "PRIVATE+RECIPIENT+"
_RAW = (Encoding.Raw, PublicFormat.Raw)


def _key_id(name: str, public: bytes) -> str:
    return hashlib.sha256(
        b"tracevault/v1/recipient\0" + name.encode() + b"\n" + public
    ).hexdigest()[:8]


def _check_name(name: str) -> None:
    if not name or any(c.isspace() or c == "+" for c in name) or not name.isprintable():
        raise ConfigError(f"recipient name {name!r} must be non-empty, with no spaces and no '+'")


def _fields(text: str, prefix: str, what: str) -> tuple[str, str, bytes]:
    """name, key id and the 32 key bytes of a key string; ConfigError naming ``what``."""
    parts = text.strip().removeprefix(prefix).split("+", 2)
    if not text.strip().startswith(prefix) or len(parts) != 3:
        raise ConfigError(f"{what} is not a recipient key ({prefix}NAME+KEYID+BASE64)")
    name, kid, blob = parts
    try:
        raw = base64.b64decode(blob, validate=True)
    except binascii.Error:
        raise ConfigError(f"{what}: the key's last field is not base64") from None
    if len(raw) != 32:
        raise ConfigError(f"{what}: an X25519 key is 32 bytes, this one {len(raw)}")
    return name, kid, raw


@dataclass(frozen=True, slots=True)
class Recipient:
    """A recipient's public key: who a bundle's content is revealed to."""

    name: str
    public: bytes

    @property
    def key_id(self) -> str:
        return _key_id(self.name, self.public)

    @property
    def key(self) -> str:
        """The printable public key string."""
        return f"{_PUBLIC}{self.name}+{self.key_id}+{base64.b64encode(self.public).decode()}"

    def describe(self) -> str:
        return f"recipient {self.name} (key id {self.key_id})"

    @classmethod
    def parse(cls, text: str, what: str = "the recipient key") -> Recipient:
        name, kid, public = _fields(text, _PUBLIC, what)
        _check_name(name)
        r = cls(name, public)
        if r.key_id != kid:
            raise ConfigError(f"{what}: key id {kid} does not match its name and key")
        return r


@dataclass(frozen=True, slots=True)
class RecipientKey:
    """A recipient's private key (X25519), kept in a 0600 file by its owner."""

    name: str
    private: X25519PrivateKey

    @classmethod
    def generate(cls, name: str) -> RecipientKey:
        _check_name(name)
        return cls(name, X25519PrivateKey.generate())

    @property
    def recipient(self) -> Recipient:
        return Recipient(self.name, self.private.public_key().public_bytes(*_RAW))

    @property
    def skey(self) -> str:
        """The private key string (what the 0600 file holds; ``keys generate`` writes it)."""
        raw = self.private.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
        r = self.recipient
        return f"{_PRIVATE}{r.name}+{r.key_id}+{base64.b64encode(raw).decode()}"

    @classmethod
    def parse(cls, text: str, what: str = "the recipient's private key") -> RecipientKey:
        name, kid, raw = _fields(text, _PRIVATE, what)
        _check_name(name)
        key = cls(name, X25519PrivateKey.from_private_bytes(raw))
        if key.recipient.key_id != kid:
            raise ConfigError(f"{what}: key id {kid} does not match its name and key")
        return key

    @classmethod
    def load(cls, path: str | Path) -> RecipientKey:
        """From a file readable by its owner only (a wider mode is refused, as for log keys)."""
        p = Path(path)
        try:
            mode = stat.S_IMODE(p.stat().st_mode)
            text = p.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read recipient key file {p}: {exc.strerror}") from None
        if mode & 0o077:
            raise ConfigError(
                f"recipient key file {p} has mode {mode:04o}; it must be readable by its owner "
                "only (chmod 600)"
            )
        return cls.parse(text, what=f"recipient key file {p}")


@dataclass(frozen=True, slots=True)
class RevealedRun:
    """What a sealed data key is bound to: the bundle's run, the run whose key it is, and
    that run's chain (head and last seq): the exact content the reveal opens."""

    bundle_run: str
    run_id: str
    head: str
    last_seq: int

    def info(self, recipient: Recipient) -> bytes:
        return b"\0".join(
            (
                b"tracevault/v1/reveal",
                recipient.key_id.encode(),
                self.bundle_run.encode(),
                self.run_id.encode(),
                self.head.encode(),
                str(self.last_seq).encode(),
            )
        )


def seal_for(recipient: Recipient, data_key: bytes, run: RevealedRun) -> bytes:
    """HPKE's ``enc ‖ ciphertext`` of ``data_key`` for ``recipient``, bound to ``run``."""
    public = X25519PublicKey.from_public_bytes(recipient.public)
    return _SUITE.encrypt(data_key, public, info=run.info(recipient))


def open_for(key: RecipientKey, sealed: bytes, run: RevealedRun) -> bytes:
    """The data key; ContentKeyError when it was sealed for another recipient, another
    bundle or run, or altered."""
    try:
        return _SUITE.decrypt(sealed, key.private, info=run.info(key.recipient))
    except (InvalidTag, ValueError):
        raise ContentKeyError(
            f"the revealed key of run {run.run_id} does not open with "
            f"{key.recipient.describe()} for this bundle (run {run.bundle_run}, head "
            f"{run.head[:16]}…, last seq {run.last_seq}): it was sealed for another recipient, "
            "bundle or run, or altered"
        ) from None
