"""Where the log key comes from, and the set of keys a verifier trusts.

The sequencer's key is a C2SP private key string (``PRIVATE+KEY+...``) in a file readable
by its owner only (mode 0600: a group- or world-readable key is refused, as ssh does), or in
an environment variable for secret managers that inject one. Rotation: every checkpoint names
its key by name and id, and a verifier takes a *set* of vkeys, old and new (docs/log.md).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

from tracevault.errors import ConfigError
from tracevault.transparency._cosignature import CosignatureSigner, parse_witness_vkey
from tracevault.transparency._note import Ed25519Signer, Ed25519Verifier, NoteVerifier, parse_vkey

__all__ = [
    "AGENT_KEY_ENV",
    "LOG_KEY_ENV",
    "WITNESS_KEY_ENV",
    "load_agent_signer",
    "load_signer",
    "load_verifiers",
    "load_witness_signer",
    "load_witness_verifiers",
    "write_private_key",
]

LOG_KEY_ENV = "TRACEVAULT_LOG_KEY"
WITNESS_KEY_ENV = "TRACEVAULT_WITNESS_KEY"
AGENT_KEY_ENV = "TRACEVAULT_AGENT_KEY"
OPERATOR_KEY_ENV = "TRACEVAULT_OPERATOR_KEY"
#: The agent_id of erasure records (``tracevault erase``): signed by an operator key only.
ERASE_AGENT = "tracevault-erase"


def _read_private(path: str | Path | None, env: str, what: str) -> str:
    """A private key's text from ``path`` (owner-only mode) or else the variable ``env``."""
    if path is not None:
        p = Path(path)
        try:
            st = p.stat()
        except FileNotFoundError:
            raise ConfigError(f"{what} file {p} does not exist") from None
        if stat.S_IMODE(st.st_mode) & 0o077:
            raise ConfigError(
                f"{what} file {p} has mode {stat.S_IMODE(st.st_mode):04o}; "
                "it must be readable by its owner only (chmod 600)"
            )
        return p.read_text()
    text = os.environ.get(env)
    if not text:
        raise ConfigError(f"no {what}: set the key file setting or {env}")
    return text


def load_signer(path: str | Path | None = None, env: str = LOG_KEY_ENV) -> Ed25519Signer:
    """The log key from ``path`` (mode 0600) or else the environment variable ``env``."""
    return Ed25519Signer.from_skey(_read_private(path, env, "log key"))


def load_agent_signer(path: str | Path | None = None, env: str = AGENT_KEY_ENV) -> Ed25519Signer:
    """An agent's key (signs its runs' notes, docs/identity.md) from ``path`` or ``env``."""
    return Ed25519Signer.from_skey(_read_private(path, env, "agent key"))


def load_operator_signer(
    path: str | Path | None = None, env: str = OPERATOR_KEY_ENV
) -> Ed25519Signer:
    """The operator's key, which signs erasure records (docs/confidentiality.md, "Erasure
    records are signed"), from ``path`` (mode 0600) or else ``env``."""
    return Ed25519Signer.from_skey(_read_private(path, env, "operator key"))


def operator_verifiers(setting: str) -> list[Ed25519Verifier]:
    """``operator_vkeys``: the operator vkeys a deployment trusts to sign erasure records,
    comma-separated or ``@FILE`` (one a line), as ``log_vkeys``."""
    text = setting.strip()
    if not text:
        return []
    return load_verifiers([text] if text.startswith("@") else text.split(","))


def load_witness_signer(
    path: str | Path | None = None, env: str = WITNESS_KEY_ENV
) -> CosignatureSigner:
    """A witness's cosignature/v1 key from ``path`` (mode 0600) or else ``env``."""
    return CosignatureSigner.from_skey(_read_private(path, env, "witness key"))


class PrivateKey(Protocol):
    """A private key that prints as one line: a signer here, a bundle recipient's key too."""

    @property
    def skey(self) -> str: ...


def write_private_key(path: str | Path, signer: PrivateKey) -> None:
    """Create ``path`` with mode 0600 and the key; refuses to overwrite an existing key."""
    p = Path(path)
    try:
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise ConfigError(f"{p} exists; a private key is never overwritten") from None
    except OSError as e:
        raise ConfigError(f"cannot create key file {p}: {e.strerror}") from None
    with os.fdopen(fd, "w") as f:
        f.write(signer.skey + "\n")


def _vkey_texts(vkeys: Iterable[str]) -> list[str]:
    """vkeys given inline or as ``@file`` (one per line, ``#`` comments), in order."""
    out: list[str] = []
    for item in vkeys:
        if item.startswith("@"):
            path = Path(item[1:])
            try:
                lines = path.read_text().splitlines()
            except OSError as e:
                raise ConfigError(f"cannot read verifier keys from {path}: {e}") from None
            out.extend(x for x in lines if x.strip() and not x.startswith("#"))
        else:
            out.append(item)
    return out


def load_verifiers(vkeys: Iterable[str]) -> list[Ed25519Verifier]:
    """Parse vkeys given inline or as ``@file`` (one per line, ``#`` comments)."""
    return [parse_vkey(x) for x in _vkey_texts(vkeys)]


def load_witness_verifiers(vkeys: Iterable[str]) -> list[NoteVerifier]:
    """Witness vkeys (cosignature/v1, type 0x04), inline or ``@file``, for ``witnesses=``.

    A log vkey (type 0x01) given here is refused by name: counting the log's own signature
    as a witness would let the key holder witness itself.
    """
    return [parse_witness_vkey(x) for x in _vkey_texts(vkeys)]
