"""A batch report as JUnit XML, so CI systems show each replayed run as a test.

One ``<testcase>`` per run (``classname`` is ``tracevault.replay``, ``name`` the run id). A
run that diverged is a ``<failure>`` (the agent does something else: the test's assertion
failed); a run that could not be replayed at all (it does not verify, it cannot be read, the
agent or the worker broke) is an ``<error>``. The shape is the common Ant/Jenkins one that
GitLab, GitHub Actions reporters and Jenkins read; tests/replayer/junit.xsd pins it.
"""

from __future__ import annotations

import re
import socket
import xml.etree.ElementTree as ET
from datetime import UTC, datetime

from tracevault.replayer.batch._report import BatchItem, BatchReport

__all__ = ["junit_xml"]

# XML 1.0 cannot carry most control characters, even escaped: a recorded payload may hold them.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _text(value: str) -> str:
    return _NOT_XML.sub("\ufffd", value)


def _seconds(value: float) -> str:
    return f"{value:.6f}"


def _testcase(parent: ET.Element, it: BatchItem) -> None:
    case = ET.SubElement(
        parent,
        "testcase",
        {"classname": "tracevault.replay", "name": _text(it.run_id), "time": _seconds(it.seconds)},
    )
    if it.status == "ok":
        return
    first_line = it.detail.splitlines()[0] if it.detail else it.status
    if it.status == "diverged":
        first = it.first_divergence
        where = "" if first is None else f" ({first[0]} {first[1]})"
        message = f"diverged at seq {it.seq}{where}: {first_line}"
        body = "\n".join((it.divergence or {}).get("diff") or ()) or it.detail
        el = ET.SubElement(case, "failure", {"type": "diverged", "message": _text(message)})
    else:
        at = "" if it.seq is None else f" at seq {it.seq}"
        obj = "" if it.obj is None else f" in {it.obj}"
        message = f"{it.status}{at}{obj}: {first_line}"
        body = it.detail
        el = ET.SubElement(case, "error", {"type": it.status, "message": _text(message)})
    el.text = _text(body)


def junit_xml(report: BatchReport, *, hostname: str | None = None) -> bytes:
    """The report as a UTF-8 JUnit XML document (``<testsuites>`` with one ``<testsuite>``)."""
    totals = report.totals()
    failures = str(totals["diverged"])
    errors = str(totals["verify_failed"] + totals["error"])
    root = ET.Element(
        "testsuites",
        {
            "name": "tracevault replay batch",
            "tests": str(totals["runs"]),
            "failures": failures,
            "errors": errors,
            "time": _seconds(report.seconds),
        },
    )
    suite = ET.SubElement(
        root,
        "testsuite",
        {
            "name": _text(f"replay {report.agent} {report.since}..{report.until}"),
            "tests": str(totals["runs"]),
            "failures": failures,
            "errors": errors,
            "skipped": "0",
            "time": _seconds(report.seconds),
            "timestamp": datetime.now(UTC).replace(microsecond=0, tzinfo=None).isoformat(),
            "hostname": hostname or socket.gethostname(),
        },
    )
    props = ET.SubElement(suite, "properties")
    for name, value in (
        ("agent", report.agent),
        ("since", report.since.isoformat()),
        ("until", report.until.isoformat()),
        ("engine", report.engine),
    ):
        ET.SubElement(props, "property", {"name": name, "value": _text(value)})
    for it in report.items:
        _testcase(suite, it)
    ET.indent(root)
    body: bytes = ET.tostring(root, encoding="utf-8", xml_declaration=True)
    return body + b"\n"
