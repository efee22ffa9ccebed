"""Where the log key comes from, and the set of keys a verifier trusts.

The sequencer's key is a C2SP private key string (``PRIVATE+KEY+...``) in a file readable
by its owner only (mode 0600: a group- or world-readable key is refused, as ssh does), or in
an environment variable for secret managers that inject one. Rotation: every checkpoint names
its key by name and id, and a verifier takes a *set* of vkeys, old and new (docs/log.md).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable
from pathlib import Path

from tracevault.errors import ConfigError
from tracevault.log._note import Ed25519Signer, Ed25519Verifier, NoteVerifier, parse_vkey

__all__ = [
    "LOG_KEY_ENV",
    "load_signer",
    "load_verifiers",
    "load_witness_verifiers",
    "write_private_key",
]

LOG_KEY_ENV = "TRACEVAULT_LOG_KEY"


def load_signer(path: str | Path | None = None, env: str = LOG_KEY_ENV) -> Ed25519Signer:
    """The log key from ``path`` (mode 0600) or else the environment variable ``env``."""
    if path is not None:
        p = Path(path)
        try:
            st = p.stat()
        except FileNotFoundError:
            raise ConfigError(f"log key file {p} does not exist") from None
        if stat.S_IMODE(st.st_mode) & 0o077:
            raise ConfigError(
                f"log key file {p} has mode {stat.S_IMODE(st.st_mode):04o}; "
                "it must be readable by its owner only (chmod 600)"
            )
        return Ed25519Signer.from_skey(p.read_text())
    text = os.environ.get(env)
    if not text:
        raise ConfigError(f"no log key: set the key file setting or {env}")
    return Ed25519Signer.from_skey(text)


def write_private_key(path: str | Path, signer: Ed25519Signer) -> None:
    """Create ``path`` with mode 0600 and the key; refuses to overwrite an existing key."""
    p = Path(path)
    try:
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise ConfigError(f"{p} exists; a log key is never overwritten") from None
    with os.fdopen(fd, "w") as f:
        f.write(signer.skey + "\n")


def _key_lines(vkeys: Iterable[str]) -> list[str]:
    """Vkeys given inline or as ``@file`` (one per line, ``#`` comments), one string each."""
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
    return [parse_vkey(x) for x in _key_lines(vkeys)]


def load_witness_verifiers(vkeys: Iterable[str]) -> list[NoteVerifier]:
    """Witness keys, inline or ``@file``: what ``check_run_log(witnesses=...)`` takes.

    A witness cosigns with C2SP tlog-cosignature (type 0x04) or signs like a log (0x01);
    ``tracevault.log.parse_witness_vkey`` reads both when it exists, else only Ed25519 note
    keys are read (docs/log.md, "Verify and bundles").
    """
    from tracevault import log  # noqa: PLC0415 - the parser may be added beside us

    parse: Callable[[str], NoteVerifier] = getattr(log, "parse_witness_vkey", parse_vkey)
    return [parse(x) for x in _key_lines(vkeys)]
