"""The log's side of C2SP tlog-witness: push a checkpoint to a witness, keep its cosignature.

Why: a witness we did not write (litewitness, or any C2SP tlog-witness) does not read our
sealed topic; the log must show it each checkpoint with a consistency proof from the size
the witness is at (``add-checkpoint``). The archive holds every node of a partition's tree
up to its newest archived checkpoint, so the proof comes from its tiles, and the cosigned
checkpoint is written to a witness store in the layout ``replay verify --witness-store``
reads (``tracevault.archive.witness_layout``). Nothing here is trusted by a verifier: the
cosignature verifies with the witness's vkey or counts for nothing (docs/log.md, "Witness").

Answers, as the spec gives them: 200 the cosignature lines; 409 ``text/x.tlog.size`` the
witness's size (the client proves from there and asks once more); 403 or 404 the witness
does not know this log or its key (witnesses differ on which, the spec says 404 for an
unknown origin); 422 the witness says the proof fails (our log does not extend what it
cosigned: an alert); 400 malformed.
"""

from __future__ import annotations

import base64
import logging
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from tracevault.archive import ObjectStore
from tracevault.archive.tlog import checkpoint_key as archive_checkpoint_key
from tracevault.archive.tlog import log_prefix
from tracevault.archive.witness_layout import checkpoint_key
from tracevault.errors import ConfigError, LogError, NotFoundError, ServiceUnavailableError
from tracevault.transparency import (
    Checkpoint,
    NoteVerifier,
    consistency_proof,
    open_note,
    split_note,
)
from tracevault.witness._archive import ArchiveTiles

__all__ = ["WitnessAnswer", "WitnessClient", "push_archived", "store_cosigned"]

log = logging.getLogger(__name__)

_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class WitnessAnswer:
    """One ``add-checkpoint`` answer: ``status``, ``size`` for a 409, ``body`` as sent."""

    status: int
    body: str
    size: int | None = None


class WitnessClient:
    """Submits checkpoints to one witness's ``<url>/add-checkpoint``."""

    def __init__(self, url: str, timeout: float = _TIMEOUT_S) -> None:
        if not url.startswith(("http://", "https://")):
            raise ConfigError(f"witness URL {url!r} is not http:// or https://")
        self.url = url.rstrip("/") + "/add-checkpoint"
        self.timeout = timeout
        self._sizes: dict[str, int] = {}  # origin -> the size the witness said it is at

    def post(self, note: str, old_size: int, proof: Sequence[bytes]) -> WitnessAnswer:
        """One request, its answer; :class:`ServiceUnavailableError` if unreachable."""
        lines = [f"old {old_size}", *(base64.b64encode(h).decode() for h in proof)]
        body = ("\n".join(lines) + "\n\n" + note).encode()
        req = urllib.request.Request(self.url, data=body, method="POST")  # noqa: S310 - http(s) only
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as res:  # noqa: S310
                return WitnessAnswer(res.status, res.read().decode())
        except urllib.error.HTTPError as e:
            with e:
                text = e.read().decode(errors="replace")
                ctype = (e.headers.get("Content-Type") or "").split(";")[0].strip()
            size = None
            if e.code == 409 and ctype == "text/x.tlog.size" and text.strip().isdigit():
                size = int(text.strip())
            return WitnessAnswer(e.code, text, size)
        except OSError as e:
            raise ServiceUnavailableError(f"witness {self.url} is unreachable: {e}") from None

    def cosign(self, note: str, proof_from: Callable[[int], Sequence[bytes]]) -> str:
        """The witness's cosignature lines on ``note``, proving from the size it is at.

        ``proof_from(old)`` is the consistency proof from ``old`` to the note's size. The
        first try uses the size this client last saw (0 at first, as the spec suggests);
        a 409 names the witness's size and the request is made once more from there.
        """
        cp = Checkpoint.parse(split_note(note)[0])
        old = self._sizes.get(cp.origin, 0)
        for _ in range(2):
            if old > cp.size:
                raise LogError(
                    f"witness {self.url} is at {cp.origin}@{old}, past the checkpoint's "
                    f"{cp.size}: it cosigned a larger tree of this log than the one shown"
                )
            got = self.post(note, old, proof_from(old) if old else [])
            if got.status == 200:
                self._sizes[cp.origin] = cp.size
                return got.body
            if got.status == 409 and got.size is not None and got.size != old:
                old = got.size
                self._sizes[cp.origin] = old
                continue
            if got.status in (403, 404):
                # 403 or 404: the witness does not witness this origin or key (exit 3)
                raise NotFoundError(
                    f"witness {self.url} does not witness {cp.origin} ({got.status}: "
                    f"{got.body.strip()[:200]}); add the log and its vkey there"
                )
            if got.status == 422:
                log.error(
                    "ALERT witness %s says %s@%s is not consistent with what it cosigned at %s",
                    self.url,
                    cp.origin,
                    cp.size,
                    old,
                )
            raise LogError(
                f"witness {self.url} refused {cp.origin}@{cp.size} from {old}: "
                f"{got.status} {got.body.strip()[:200]}"
            )
        raise LogError(f"witness {self.url} kept answering 409 for {cp.origin}@{cp.size}")


def store_cosigned(
    store: ObjectStore,
    note: str,
    lines: str,
    witnesses: Sequence[NoteVerifier],
    retain_until: datetime,
) -> str:
    """Append the cosignature ``lines`` to ``note`` and write it where verifiers look.

    Only lines by a key in ``witnesses`` are kept, and only when they verify on this
    checkpoint (the spec: a client ignores cosignatures from unknown keys). A size already
    stored is left as it is. Returns the note written (or found).
    """
    text, sigs = split_note(note)
    _, good = open_note(note + lines, list(witnesses))
    kept = [s for s in split_note(note + lines)[1] if s not in sigs]
    ids = {(v.name, v.key_id) for v in good}
    kept = [s for s in kept if (s.name, s.key_id) in ids]
    if not kept:
        raise LogError("the witness's answer holds no cosignature by the given witness key")
    cosigned = text + "\n" + "".join(s.line() for s in [*sigs, *kept])
    cp = Checkpoint.parse(text)
    key = checkpoint_key(cp.origin, cp.size)
    try:
        return store.get(key).decode()
    except NotFoundError:
        store.put(key, cosigned.encode(), retain_until=retain_until)
        return cosigned


def push_archived(
    tiles: ArchiveTiles,
    partition: int,
    generation: str,
    *,
    client: WitnessClient,
    witness_key: NoteVerifier,
    store: ObjectStore,
    log_keys: Sequence[NoteVerifier],
    retain_until: datetime,
) -> str:
    """Have the witness cosign the newest archived checkpoint of ``partition``; the
    cosigned note, also written to ``store`` (the proof comes from the archive's tiles).

    The archived note is checked with ``log_keys`` first: the archive is not trusted, and a
    witness shown a note that is not the log's would only refuse it."""
    size, src = tiles.source(partition, generation)
    key = archive_checkpoint_key(log_prefix(tiles.prefix, partition, generation), size)
    note = tiles.store.get(key).decode()
    text, _ = open_note(note, log_keys)
    cp = Checkpoint.parse(text)
    if cp.size != size:
        raise LogError(f"the archive's {key} signs size {cp.size}, not {size}")
    lines = client.cosign(note, lambda old: consistency_proof(old, size, src))
    return store_cosigned(store, note, lines, [witness_key], retain_until)
