"""docs/ stays true to the repository: what code cites exists, what the docs list is complete."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tracevault.archive.layout import FinalReceipt, SegmentReceipt
from tracevault.config import Settings
from tracevault.services.sequencer._metrics import SequencerMetrics
from tracevault.services.sequencer._records import DlqReason

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
THIS = Path(__file__).resolve()


def _sources() -> list[Path]:
    files = [ROOT / "README.md", ROOT / "Dockerfile", ROOT / "docker-compose.yml"]
    for folder in ("tracevault", "tests", "bench", "dev", "docs", ".ci"):
        files += [
            p
            for p in (ROOT / folder).rglob("*")
            if p.is_file() and p.suffix in {".py", ".md", ".yml", ".in", ""} and p != THIS
        ]
    return [p for p in files if p.exists() and "__pycache__" not in p.parts]


def _headings(doc: Path) -> set[str]:
    return {m.group(1).strip() for m in re.finditer(r"^#+ (.+)$", doc.read_text(), re.M)}


def test_docs_has_an_index_listing_every_document() -> None:
    index = (DOCS / "README.md").read_text()
    for doc in DOCS.glob("*.md"):
        if doc.name != "README.md":
            assert f"]({doc.name})" in index, f"docs/README.md does not list {doc.name}"


def test_every_cited_docs_path_and_section_exists() -> None:
    cited = 0
    for path in _sources():
        text = path.read_text(errors="replace")
        for m in re.finditer(r"docs/([\w./-]+\.md)((?:'s)?[\s,:(]{1,8}\"([^\"]+)\")?", text):
            cited += 1
            where = f"{path.relative_to(ROOT)}: docs/{m.group(1)}"
            target = DOCS / m.group(1)
            assert target.is_file(), f"{where} does not exist"
            section = m.group(3) and " ".join(m.group(3).split())  # may wrap in a docstring
            if section:
                names = _headings(target)
                assert any(h == section or h.startswith(section + " (") for h in names), (
                    f'{where} cites section "{section}", which it does not have'
                )
    assert cited >= 10  # the scan found the citations (a broken regex would pass vacuously)


@pytest.mark.parametrize("doc", sorted(p.name for p in [*DOCS.glob("*.md"), ROOT / "README.md"]))
def test_relative_links_in_markdown_resolve(doc: str) -> None:
    path = DOCS / doc if (DOCS / doc).exists() else ROOT / doc
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", path.read_text()):
        if "://" in target:
            continue
        assert (path.parent / target).exists(), f"{doc} links to missing {target}"


def test_no_file_cites_documents_outside_the_repository() -> None:
    banned = re.compile(r"\.\./shared|DESIGN\.md|KAFKA-LOCAL\.md")
    hits = [
        f"{p.relative_to(ROOT)}: {m.group(0)}"
        for p in _sources()
        for m in banned.finditer(p.read_text(errors="replace"))
    ]
    assert not hits


def _section(title: str) -> str:
    design = (DOCS / "design.md").read_text()
    start = design.index(f"### {title}")
    end = design.find("\n#", start + 1)
    return design[start : end if end != -1 else None]


def test_configuration_table_lists_every_setting() -> None:
    table = _section("Configuration")
    listed = set(re.findall(r"^\| `(TRACEVAULT_\w+)` \|", table, re.M))
    assert listed == {f"TRACEVAULT_{name.upper()}" for name in Settings.model_fields}


def test_dlq_table_lists_every_reason() -> None:
    table = _section("Sequencer batch protocol")
    for reason in DlqReason:
        assert f"`{reason.value}`" in table, reason


def test_metrics_table_lists_every_sequencer_metric() -> None:
    table = _section("Metrics")
    exposed = {
        m.name + ("_total" if m.type == "counter" else "")
        for m in SequencerMetrics("docs").registry.collect()
    }
    listed = set(re.findall(r"^\| `(tracevault_\w+)` \|", table, re.M))
    assert listed == exposed


def test_receipt_fields_are_all_described() -> None:
    section = _section("Archive keys and receipts")
    for cls in (SegmentReceipt, FinalReceipt):
        for name in cls.__dataclass_fields__:
            assert f"`{name}`" in section, f"{cls.__name__}.{name} is not in docs/design.md"


def _folder_cells(doc: Path) -> str:
    """The first cells of the ``| folder | what lives there |`` table in ``doc``."""
    text = doc.read_text()
    table = text.split("| folder | what lives there |", 1)[1].split("\n\n", 1)[0]
    return " ".join(row.split("|")[1] for row in table.splitlines() if row.startswith("|"))


@pytest.mark.parametrize("doc", ["docs/architecture.md", "docs/design.md"])
def test_folder_tables_list_every_package(doc: str) -> None:
    packages = sorted(p.parent.name for p in (ROOT / "tracevault").glob("*/__init__.py"))
    cells = _folder_cells(ROOT / doc)
    missing = [p for p in packages if not re.search(rf"(^|[`/ ]){p}/[^` ]*`", cells)]
    assert not missing, f"{doc}'s folder table leaves out {missing}"


def test_readme_benchmarks_are_one_table_and_their_history_lives_in_bench() -> None:
    """The README shows current figures; each bench's conditions and history are in
    bench/README.md, which the README links (the section was a lab notebook before)."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("\n## Benchmarks\n", 1)[1].split("\n## ", 1)[0].strip()
    intro, table = section.split("\n\n| ", 1)
    rows = ("| " + table).splitlines()
    assert all(row.startswith("|") for row in rows), "only the table follows the intro"
    assert "(bench/README.md)" in intro
    bench = (ROOT / "bench" / "README.md").read_text()
    for script in re.findall(r"bench/(\w+)\.py", table):
        assert script + ".py" in bench, f"bench/README.md says nothing of {script}.py"


def test_readme_is_a_front_door() -> None:
    """Short enough to read at once (it was an 823-line lab notebook), tables that read in a
    terminal, and no dated figures or load notes: those live in bench/README.md."""
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 250, len(lines)
    wide = [ln for ln in lines if ln.startswith("|") and len(ln) > 100]
    assert not wide, wide
    prose = [ln for ln in lines if not ln.startswith(" ")]  # code lines may hold a model's date
    assert not [ln for ln in prose if re.search(r"\b20\d\d-\d\d-\d\d\b|\bload \d", ln)]
    headings = [ln[3:] for ln in lines if ln.startswith("## ")]
    assert headings[:4] == ["Install", "Record an agent (quick start)", "Verify", "Replay"]
