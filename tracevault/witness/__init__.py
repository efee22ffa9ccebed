"""The witness's library: the decision to cosign a checkpoint, refusing forks and rollbacks.

Design: docs/log.md, "Witness". :class:`Witness` decides (shaped as C2SP tlog-witness
``add-checkpoint``) and keeps what it cosigned and refused in its own store;
:func:`serve_add_checkpoint` answers that request over HTTP; :class:`ArchiveTiles` reads an
archive's hash tiles for the proofs a gap needs; ``tracevault witness status/push``
(``commands``) read its store and push to witnesses we did not write (litewitness). The
service that follows the sealed topic runs on the service runtime, in
:mod:`tracevault.services.witness`. A verifier that wants a witnessed checkpoint reads it from
the witness's store with :func:`cosigned_checkpoint` and checks it with public keys only.
"""

from tracevault.witness._archive import ArchiveTiles
from tracevault.witness._core import (
    Cosigned,
    Refused,
    Witness,
    checkpoint_key,
    cosigned_checkpoint,
    cosigned_sizes,
    deployment_origins,
)
from tracevault.witness._http import serve_add_checkpoint

__all__ = [
    "ArchiveTiles",
    "Cosigned",
    "Refused",
    "Witness",
    "checkpoint_key",
    "cosigned_checkpoint",
    "cosigned_sizes",
    "deployment_origins",
    "serve_add_checkpoint",
]
