"""Verify a run both ways — lazily and rebuilding every event — and insist they agree.

The tamper corpora call this instead of ``verify``: every damage must be named identically
(same check, seq, object and message) whether or not the events are rebuilt during the
checks, and an honest run must give the same report and the same events. The corpora are
about the chain and the archive's own objects, so the log is waived (``chain_only``, as
``--no-log-check``): their runs carry no signed log. Their events are signed by the session's
agent key (``recording.seal``), which a deployment's verifier trusts (``trusted_agents``).
"""

from __future__ import annotations

import pytest

from tests.conftest import trusted_agents
from tracevault.errors import ChainError
from tracevault.replayer import LoadedRun, VerifyReport, verify
from tracevault.schemas import TraceEvent


def verify_both_ways(run: LoadedRun, *, require_finished: bool = False) -> VerifyReport:
    try:
        lazy = verify(
            run, require_finished=require_finished, chain_only=True, agents=trusted_agents()
        )
    except ChainError as exc:
        with pytest.raises(ChainError) as info:
            verify(
                run,
                require_finished=require_finished,
                rebuild=True,
                chain_only=True,
                agents=trusted_agents(),
            )
        assert str(info.value) == str(exc)
        assert (info.value.seq, info.value.obj) == (exc.seq, exc.obj)
        raise
    full = verify(
        run,
        require_finished=require_finished,
        rebuild=True,
        chain_only=True,
        agents=trusted_agents(),
    )
    assert full == lazy
    assert isinstance(full.events, list)
    assert all(type(ev) is TraceEvent for ev in full.events)
    assert full.events == list(lazy.events)
    return lazy
