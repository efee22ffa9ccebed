"""C2SP tlog-proof (``c2sp.org/tlog-proof@v1``): one entry's inclusion proof and its checkpoint.

The text format of c2sp.org/tlog-proof, so a bundle's proofs can be checked by any tool that
reads the spec (Go: ``github.com/transparency-dev/formats/proof``)::

    c2sp.org/tlog-proof@v1
    extra <base64>            (optional, unauthenticated)
    index <decimal>
    <base64 hash>             (zero or more: the RFC 6962 inclusion proof, leaf to root)

    <the checkpoint note, verbatim, with its signatures and cosignatures>

Only the format lives here; what the proof proves is decided by ``check_run_log``.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

from tracevault.errors import LogError
from tracevault.transparency._merkle import HASH_SIZE
from tracevault.transparency._note import split_note

__all__ = ["TLOG_PROOF_HEADER", "TlogProof", "with_cosignatures"]

TLOG_PROOF_HEADER = "c2sp.org/tlog-proof@v1"


@dataclass(frozen=True, slots=True)
class TlogProof:
    index: int
    hashes: tuple[bytes, ...]
    checkpoint: str
    extra: bytes | None = None

    def encode(self) -> str:
        lines = [TLOG_PROOF_HEADER]
        if self.extra is not None:
            lines.append("extra " + base64.b64encode(self.extra).decode())
        lines.append(f"index {self.index}")
        lines.extend(base64.b64encode(h).decode() for h in self.hashes)
        return "\n".join(lines) + "\n\n" + self.checkpoint

    @classmethod
    def parse(cls, text: str, what: str = "tlog-proof") -> TlogProof:
        head, sep, checkpoint = text.partition("\n\n")
        lines = head.split("\n")
        if not sep or lines[0] != TLOG_PROOF_HEADER:
            raise LogError(f"{what} is not a {TLOG_PROOF_HEADER} proof")
        pos = 1
        extra = None
        if pos < len(lines) and lines[pos].startswith("extra "):
            extra = _b64(lines[pos][6:], what, "extra data")
            pos += 1
        if pos >= len(lines) or not lines[pos].startswith("index "):
            raise LogError(f"{what} has no index line")
        num = lines[pos][6:]
        if not num.isdigit() or (num != "0" and num.startswith("0")):
            raise LogError(f"{what}: index {num!r} is not a decimal without leading zeroes")
        hashes = tuple(_b64(line, what, "proof hash") for line in lines[pos + 1 :])
        if any(len(h) != HASH_SIZE for h in hashes):
            raise LogError(f"{what} holds a proof hash that is not 32 bytes")
        return cls(int(num), hashes, checkpoint, extra)


def _b64(s: str, what: str, field: str) -> bytes:
    try:
        return base64.b64decode(s, validate=True)
    except binascii.Error:
        raise LogError(f"{what}: {field} {s[:40]!r} is not base64") from None


def with_cosignatures(note: str, cosigned: str, what: str = "cosigned checkpoint") -> str:
    """``note`` with the signature lines of ``cosigned``, another copy of the same checkpoint.

    Why: witnesses return their cosignatures on the checkpoint they were shown; a bundle's
    checkpoint must carry them so ``--min-witnesses`` can be checked offline. Only lines are
    added (nothing is verified here; the verifier decides which keys it trusts), and only
    from a copy whose text is exactly the same checkpoint.
    """
    text, sigs = split_note(note)
    other_text, other_sigs = split_note(cosigned)
    if other_text != text:
        theirs, ours = (t.split("\n", 3)[:3] + ["?"] * 3 for t in (other_text, text))
        if theirs[:2] != ours[:2]:
            raise LogError(
                f"{what} is of checkpoint {'@'.join(theirs[:2])}, not the run's "
                f"{'@'.join(ours[:2])}"
            )
        # one origin and size, two roots: name both, or the two look the same
        raise LogError(
            f"{what} {'@'.join(theirs[:2])} has root {theirs[2]}, the run's checkpoint "
            f"of that size has root {ours[2]}: the log showed two histories (a fork)"
        )
    have = {(s.name, s.key_id, s.signature) for s in sigs}
    extra = [s for s in other_sigs if (s.name, s.key_id, s.signature) not in have]
    return text + "\n" + "".join(s.line() for s in [*sigs, *extra])
