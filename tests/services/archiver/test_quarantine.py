"""The quarantine object: once per record, locked like the archive, on both stores."""

from __future__ import annotations

from datetime import timedelta

from tracevault.archive import ObjectStore
from tracevault.archive._store import utc_now
from tracevault.archive.layout import quarantine_key
from tracevault.runid import RUN_ID_RULE
from tracevault.services.archiver._quarantine import (
    Quarantined,
    QuarantineReason,
    quarantine,
    unarchivable,
)


def test_a_record_is_quarantined_once_with_its_bytes_and_reason(store: ObjectStore) -> None:
    until = utc_now() + timedelta(days=200)
    key = quarantine(
        store, until, QuarantineReason.CHAIN, "run 'r' seq 4 breaks", "p.sealed", 1, 42,
        b"r", b"\xc3\x01bytes", "r", 4,
    )  # fmt: skip
    assert (
        key
        == quarantine_key("p.sealed", 1, 42)
        == "quarantine/p.sealed/1/00000000000000000042.json"
    )
    # re-delivered after a crash, with another detail: the first object stays, no error
    again = quarantine(
        store, until, QuarantineReason.HOLE, "other", "p.sealed", 1, 42, b"r", b"\xc3\x01bytes"
    )
    assert again == key and [i.key for i in store.list("quarantine/")] == [key]
    q = Quarantined.from_json(store.get(key))
    assert (q.reason, q.run_id, q.seq, q.offset, q.partition) == ("chain", "r", 4, 42, 1)
    assert q.value == b"\xc3\x01bytes" and q.detail == "run 'r' seq 4 breaks"
    info = store.head(key)
    assert info.retain_until is not None and info.retain_until >= until - timedelta(seconds=1)


def test_unarchivable_names_what_no_store_can_hold() -> None:
    ok_at = 1_767_225_600_000_000
    assert unarchivable("run-1", ok_at) is None
    assert unarchivable("ü" * 30, ok_at) is None, "an old id with a readable name archives"
    assert unarchivable(":" * 128, ok_at) is None, "an id of the grammar archives (mapped)"
    assert "sealed_at" in (unarchivable("r", 2**62) or "")
    assert "sealed_at" in (unarchivable("r", -(2**62)) or "")
    # sealed before the run-id grammar, outside it and with no readable name: quarantined,
    # the rule named (the layout would name them; docs/design.md, "Run ids")
    for odd in ["ü" * 40, "ü" * 50, "", ".", "..", "中" * 85, "x" * 255, "x" * 232]:
        assert RUN_ID_RULE in (unarchivable(odd, ok_at) or ""), odd
