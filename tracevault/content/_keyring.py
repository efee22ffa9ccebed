"""A local keyring file of KEKs, mode 0600: the demo's and a single machine's key provider.

One JSON file: ``{"v": 1, "keks": {"<tenant>/<subject ref or ->": {"id", "key" | "destroyed"}},
"subject_secrets": {"<tenant>": [{"id", "key"}, ...]}}`` (the HMAC secrets subject references
are made with, oldest first: docs/confidentiality.md, "Subject references are keyed").
A data key is wrapped with AES-256-GCM under the KEK, the AAD naming the KEK and the run, so
a wrapped key cannot be replayed for another run or another KEK. A file readable by anyone but
its owner is refused (ConfigError), as for the log key. Updates are atomic (a temporary file
renamed over the old, under an exclusive lock), so two Recorders creating KEKs at once do not
lose one. Destroying a KEK overwrites its entry with a tombstone: the key bytes leave the file.
A keyring holds only the tenants it was given: another tenant's runs do not open with it.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from tracevault.content._provider import DATA_KEY_BYTES, KeyProvider
from tracevault.content._wrapped import WrappedKey
from tracevault.errors import ConfigError, ContentKeyError

__all__ = ["KeyringProvider"]

_NONCE = 12


def _slot(tenant: str, subject: str | None) -> str:
    return f"{tenant}/{subject or '-'}"


def _aad(kek_id: str, context: str) -> bytes:
    return f"tracevault/v1/keyring\0{kek_id}\0{context}".encode()


class KeyringProvider(KeyProvider):
    """KEKs in a 0600 JSON file at ``path`` (created on first use, with its folder)."""

    name = "keyring"

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    # -- the file ---------------------------------------------------------------------------
    def _check_mode(self) -> None:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return
        if stat.S_IMODE(st.st_mode) & 0o077:
            raise ConfigError(
                f"keyring file {self.path} has mode {stat.S_IMODE(st.st_mode):04o}; it must be "
                "readable by its owner only (chmod 600)"
            )

    def _read(self) -> dict[str, Any]:
        self._check_mode()
        try:
            data = json.loads(self.path.read_bytes())
        except FileNotFoundError:
            return {"v": 1, "keks": {}}
        except (OSError, ValueError) as exc:
            raise ConfigError(f"keyring file {self.path} is unreadable: {exc}") from None
        if (
            not isinstance(data, dict)
            or data.get("v") != 1
            or not isinstance(data.get("keks"), dict)
        ):
            raise ConfigError(f"keyring file {self.path} is not a version 1 tracevault keyring")
        return data

    def _write(self, data: dict[str, Any]) -> None:
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(json.dumps(data, sort_keys=True, indent=1).encode())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[dict[str, Any]]:
        """The keyring read under an exclusive lock; written back when the block ends."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock = self.path.with_name(f".{self.path.name}.lock")
        fd = os.open(lock, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            data = self._read()
            yield data
            self._write(data)
        finally:
            os.close(fd)

    # -- KeyProvider ------------------------------------------------------------------------
    def generate(self, tenant: str, subject: str | None, context: str) -> tuple[bytes, WrappedKey]:
        slot = _slot(tenant, subject)
        entry = self._read()["keks"].get(slot)
        if entry is None:
            with self._locked() as data:
                entry = data["keks"].setdefault(
                    slot,
                    {"id": f"{slot}#{secrets.token_hex(4)}", "key": _b64(secrets.token_bytes(32))},
                )
        kek = self._kek(entry, tenant, subject)
        data_key = secrets.token_bytes(DATA_KEY_BYTES)
        nonce = secrets.token_bytes(_NONCE)
        blob = nonce + AESGCM(kek).encrypt(nonce, data_key, _aad(entry["id"], context))
        return data_key, WrappedKey(self.name, tenant, subject, entry["id"], blob)

    def _kek(self, entry: dict[str, Any], tenant: str, subject: str | None) -> bytes:
        if "key" not in entry:
            raise ContentKeyError(
                f"the key of tenant {tenant!r}"
                + (f", subject ref {subject}" if subject else "")
                + f" in keyring {self.path} was destroyed: its content was erased on "
                f"{entry.get('destroyed', '?')} ({entry.get('reason', 'no reason recorded')})"
            )
        return base64.b64decode(entry["key"])

    def unwrap(self, wrapped: WrappedKey, context: str) -> bytes:
        entry = self._read()["keks"].get(_slot(wrapped.tenant, wrapped.subject))
        if entry is None or entry.get("id") != wrapped.kek_id:
            raise ContentKeyError(
                f"keyring {self.path} holds no key of {wrapped.describe()}: this run's content "
                "cannot be opened here (another tenant's keys, or a keyring that was not given "
                "this tenant)"
            )
        kek = self._kek(entry, wrapped.tenant, wrapped.subject)
        blob = wrapped.blob
        try:
            return AESGCM(kek).decrypt(blob[:_NONCE], blob[_NONCE:], _aad(entry["id"], context))
        except InvalidTag:
            raise ContentKeyError(
                f"the wrapped data key of {wrapped.describe()} does not open under keyring "
                f"{self.path} for {context}: it was made for another run or another key"
            ) from None

    def subject_secrets(self, tenant: str, *, create: bool) -> list[bytes]:
        held = self._read().get("subject_secrets", {}).get(tenant, [])
        if not held and create:
            with self._locked() as data:
                held = data.setdefault("subject_secrets", {}).setdefault(tenant, [])
                if not held:
                    held.append(_secret(tenant))
        return [base64.b64decode(e["key"]) for e in reversed(held)]

    def rotate_subject_secret(self, tenant: str) -> None:
        with self._locked() as data:
            data.setdefault("subject_secrets", {}).setdefault(tenant, []).append(_secret(tenant))

    def destroy(self, tenant: str, subject: str | None, *, when: str, reason: str) -> list[str]:
        gone: list[str] = []
        with self._locked() as data:
            for slot, entry in data["keks"].items():
                t, _, s = slot.partition("/")
                if t != tenant or (subject is not None and s != subject) or "key" not in entry:
                    continue
                data["keks"][slot] = {"id": entry["id"], "destroyed": when, "reason": reason}
                gone.append(entry["id"])
        return gone


def _secret(tenant: str) -> dict[str, str]:
    return {"id": f"{tenant}#{secrets.token_hex(4)}", "key": _b64(secrets.token_bytes(32))}


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode("ascii")
