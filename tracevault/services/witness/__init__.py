"""The witness service: follows ``<prefix>.sealed`` on the one service runtime and hands each
checkpoint record to the witness's decision (:mod:`tracevault.witness`, which a verifier and
``tracevault witness push`` use without any of this).

Import from here::

    from tracevault.services.witness import WitnessFollower
"""

from tracevault.services.witness._follower import FollowerStats, WitnessFollower
from tracevault.services.witness._records import CheckpointRecords

__all__ = ["CheckpointRecords", "FollowerStats", "WitnessFollower"]
