"""The witness service: cosigns checkpoints it checked, refuses forks and rollbacks.

Design: docs/log.md, "Witness". A verifier that wants a witnessed checkpoint reads it from the
witness's store with :func:`cosigned_checkpoint` and checks it with public keys only.
"""

from tracevault.witness._core import (
    Cosigned,
    Refused,
    Witness,
    checkpoint_key,
    cosigned_checkpoint,
    cosigned_sizes,
)

__all__ = [
    "Cosigned",
    "Refused",
    "Witness",
    "checkpoint_key",
    "cosigned_checkpoint",
    "cosigned_sizes",
]
