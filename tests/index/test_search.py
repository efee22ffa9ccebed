"""The index built from a real archive (file:// and moto's S3) finds exactly the runs an
independent scan of the archive finds, by tool, agent, status, time and their combinations."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tests.index.fleet import DAY_US, T0, Spec, archive_fleet, scan
from tracevault.archive import ObjectStore
from tracevault.errors import ConfigError
from tracevault.index import Filters, rebuild, search


def _day(n: int) -> datetime:
    return datetime.fromtimestamp((T0 + n * DAY_US) / 1e6, tz=UTC)


def _expect(truth: dict[str, dict[str, object]], **want: object) -> set[str]:
    out = set()
    for rid, r in truth.items():
        ok = True
        if "tool" in want:
            ok &= want["tool"] in r["tools"]  # type: ignore[operator]
        if "agent" in want:
            ok &= r["agent"] == want["agent"]
        if "status" in want:
            ok &= r["status"] == want["status"]
        if "since" in want:
            ok &= r["started"] >= want["since"]  # type: ignore[operator]
        if "until" in want:
            ok &= r["started"] < want["until"]  # type: ignore[operator]
        if "error" in want:
            ok &= want["error"] in r["errors"]  # type: ignore[operator]
        if "model" in want:
            ok &= want["model"] in r["models"]  # type: ignore[operator]
        if "tenant" in want:
            ok &= r["tenant"] == want["tenant"]
        if "kind" in want:
            ok &= want["kind"] in r["kinds"]  # type: ignore[operator]
        if "min_events" in want:
            ok &= r["events"] >= want["min_events"]  # type: ignore[operator]
        if ok:
            out.add(rid)
    return out


CASES = [
    {"tool": "send_email"},
    {"tool": "search"},
    {"agent": "researcher"},
    {"status": "errored"},
    {"status": "unfinished"},
    {"status": "finished"},
    {"since": 1, "until": 9},
    {"agent": "mailer", "tool": "send_email", "since": 0, "until": 7},
    {"error": "SMTPError"},
    {"model": "claude-3"},
    {"tenant": "acme"},
    {"kind": "ERROR"},
    {"min_events": 4},
]


def test_search_matches_an_independent_scan(fleet_store: ObjectStore) -> None:
    report = rebuild(fleet_store)
    truth = scan(fleet_store)
    assert report.runs == len(truth) == 7
    for case in CASES:
        given = {k: _day(v) if k in ("since", "until") else v for k, v in case.items()}
        want = {k: (T0 + v * DAY_US) if k in ("since", "until") else v for k, v in case.items()}
        got = {h.run_id for h in search(fleet_store, Filters.of(**given)).hits}
        expected = _expect(truth, **want)
        assert got == expected, case
        assert expected or case.get("status") == "x"  # every case finds something


def test_hits_carry_what_verifying_needs(fleet_store: ObjectStore) -> None:
    rebuild(fleet_store)
    (hit,) = search(fleet_store, Filters(tool="send_email", agent="mailer", status="finished",
                                         since=_day(0), until=_day(1))).hits  # fmt: skip
    assert hit.run_id == "run-mail-1"
    assert hit.partition == 0 and hit.origin and hit.checkpoint_size
    assert hit.first_leaf is not None and hit.last_leaf is not None
    assert 0 <= hit.first_leaf <= hit.last_leaf < hit.checkpoint_size
    assert hit.tools == ("send_email",) and hit.tenant == "acme"


def test_unknown_filter_and_status_are_refused_naming_the_valid_ones(
    fleet_store: ObjectStore,
) -> None:
    with pytest.raises(ConfigError, match="valid: agent, tenant"):
        Filters.of(colour="red")
    rebuild(fleet_store)
    with pytest.raises(ConfigError, match="valid: finished, unfinished"):
        search(fleet_store, Filters(status="lost"))


def test_index_objects_are_unlocked_so_a_rebuild_replaces_them(fleet_store: ObjectStore) -> None:
    """Derived objects carry no retention lock (docs/index.md, "Retention"): on S3 with Object
    Lock as on file://, a rebuild deletes the objects it supersedes."""
    first = rebuild(fleet_store)
    archive_fleet(fleet_store, (Spec("run-new", "mailer", 0, ("send_email",)),))
    second = rebuild(fleet_store)
    assert second.deleted and set(second.deleted) <= set(first.written)
    assert "run-new" in {h.run_id for h in search(fleet_store, Filters(agent="mailer")).hits}
    info = fleet_store.head(second.written[0])
    assert info.retain_until is None or info.expired(datetime.now(UTC))
