"""The archive's hash tiles as a source of the nodes a gap hides from the witness.

When records between the witness's size and the next checkpoint record are gone from the
topic (retention, a consumer offset past them), the record alone cannot prove consistency
(docs/log.md, "Witness"). The archive holds every node of each partition's tree up to its
newest archived checkpoint (``tracevault.archive.tlog``), so the missing nodes can be read
there. Nothing read here is trusted: the proof built from it is checked against the root the
witness cosigned and the root the log key signed, so a doctored archive can only fail it.
"""

from __future__ import annotations

from tracevault.archive import ObjectStore
from tracevault.archive.tlog import checkpoint_prefix, log_prefix, tile_key
from tracevault.errors import LogError, NotFoundError
from tracevault.transparency import NodeSource, tile_node_source

__all__ = ["ArchiveTiles"]


class ArchiveTiles:
    """Read-only view of the archived partition logs of one topic prefix."""

    def __init__(self, store: ObjectStore, prefix: str) -> None:
        self.store = store
        self.prefix = prefix

    def source(self, partition: int, generation: str = "") -> tuple[int, NodeSource]:
        """(archived size, its nodes) of ``partition``; :class:`LogError` if none is archived.

        The size is the newest checkpoint object's name: one listing, no note read, since
        only the proof's check against signed roots decides anything.
        """
        log = log_prefix(self.prefix, partition, generation)
        cps = self.store.list(checkpoint_prefix(log))
        if not cps:
            raise LogError(f"the archive {self.store.url} holds no checkpoint of {log}")
        name = cps[-1].key.rsplit("/", 1)[1]
        if not name.isdigit():
            raise LogError(f"the archive's checkpoint object {cps[-1].key} is not named by a size")
        size = int(name)

        def read(level: int, index: int, width: int) -> bytes:
            key = tile_key(log, level, index, width)
            try:
                return self.store.get(key)
            except NotFoundError:
                raise LogError(f"the archive has no tile {key}") from None

        return size, tile_node_source(size, read)
