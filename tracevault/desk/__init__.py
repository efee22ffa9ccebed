"""The investigator's desk: evidence a person can open (docs/desk.md).

``tracevault report`` writes one self-contained HTML file per set of runs that re-verifies
its own evidence in the browser (WebCrypto: the chain, the RFC 6962 inclusion proofs, the
signed checkpoint); the ``ui`` serves the same views from the archive. Both read runs only
through the replayer's public API (``tracevault.replayer``), so what they show is what
``replay verify`` checks.
"""

from tracevault.desk.evidence import Reveal, RunEvidence, gather
from tracevault.desk.report import render_report

__all__ = ["Reveal", "RunEvidence", "gather", "render_report"]
