"""The Runs page over the index (``tracevault search`` as a page) in a real Chromium: the
filters, the status chips, paging, and the archive's listing saying it cannot filter.

A real signed archive of recorded runs, indexed by ``tracevault.index.rebuild``; the desk
picks the index by itself once it is there.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.desk.browser import Chromium
from tests.desk.server import desk_conf, serving
from tests.replayer.conftest import write_three_runs
from tracevault.archive import open_store
from tracevault.config import Settings
from tracevault.desk.runs import ArchiveListing, IndexSource, RunQuery
from tracevault.index import Filters, rebuild

IDS = "[...document.querySelectorAll('a.run')].map(a => a.textContent)"


def _archive(root: Path, index: bool) -> str:
    url = write_three_runs(f"file://{root / 'archive'}")
    store = open_store(url)
    if index:
        rebuild(store)
    return url


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> str:
    return _archive(tmp_path_factory.mktemp("indexed"), index=True)


def test_the_runs_page_searches_the_index_with_filters(indexed: str, web: Chromium) -> None:
    with serving(desk_conf(indexed, None)) as desk:
        web.open(desk + "/")
        assert web.js("document.getElementById('tv-source').textContent").startswith(
            "the index: 3 runs"
        )
        assert sorted(web.js(IDS)) == ["run-a", "run-b", "run-c"]
        row = "[...document.querySelectorAll('#tv-runs tr')][1].textContent"
        assert "fetch" in web.js(row) and "finished" in web.js(row)  # tools, status chip
        web.screenshot("ui-runs-index")
        # a filter as `tracevault search --tool` takes it, typed in the form
        web.js("document.getElementById('tv-f-tool').value = 'no_such_tool'")
        web.click("#tv-filters button")
        assert "tool=no_such_tool" in web.js("location.href")
        assert web.js(IDS) == []
        assert web.js("document.getElementById('tv-source').textContent").startswith(
            "the index: 0 runs matching"
        )
        web.open(desk + "/?tool=fetch&q=run-b")
        assert web.js(IDS) == ["run-b"]
        # the status chips: one click each, the other filters kept
        web.click("#tv-chips a[data-status=errored]")
        assert "status=errored" in web.js("location.href") and "q=run-b" in web.js("location.href")
        assert web.js(IDS) == []
        web.click("#tv-chips a[data-status=finished]")
        assert web.js(IDS) == ["run-b"]
        assert web.js("document.querySelector('#tv-chips a.on').dataset.status") == "finished"
        # a bad filter is said in the page, not a trace
        web.open(desk + "/?since=yesterday")
        assert "since: 'yesterday' is not a date" in web.js(
            "document.getElementById('tv-bad').textContent"
        )


def test_the_index_pages_in_the_query(indexed: str) -> None:
    source = IndexSource(open_store(indexed, create=False))
    try:
        pages = [source.search(RunQuery(page=p, size=2)) for p in (0, 1, 2)]
    finally:
        source.close()
    assert [len(p.rows) for p in pages] == [2, 1, 0] and {p.total for p in pages} == {3}
    assert sorted(r.run_id for p in pages for r in p.rows) == ["run-a", "run-b", "run-c"]
    started = [r.started for p in pages for r in p.rows]
    assert started == sorted(started, reverse=True)  # newest first, as `tracevault search`


def test_without_an_index_the_listing_says_filters_need_it(tmp_path: Path, web: Chromium) -> None:
    url = _archive(tmp_path, index=False)
    page = ArchiveListing(Settings(archive_url=url)).search(RunQuery(filters=Filters(tool="x")))
    assert page.total == 3 and "filters need the index" in page.notes[0]
    with serving(desk_conf(url, None)) as desk:
        web.open(desk + "/?tool=fetch")
        assert web.js("document.getElementById('tv-source').textContent").startswith(
            "the archive: 3 runs"
        )
        assert "filters need the index" in web.js("document.querySelector('.tv-note').textContent")
        rebuild(open_store(url))  # built while the desk runs: the next page uses it
        web.open(desk + "/?tool=no_such_tool")
        assert web.js("document.getElementById('tv-source').textContent").startswith(
            "the index: 0 runs"
        )
