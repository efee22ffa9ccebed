"""Deterministic re-run of a recorded run: ``replay`` (sync agents) and ``areplay`` (async).

Protocol, mirroring ``Recorder.run``/``arun``:

1. seq 0 must be RUN_STARTED; its request ``{"input": X}`` gives the agent's input.
2. ``agent(X, edges)`` runs with :class:`ReplayEdges`: each crossing is compared (kind,
   model, seed, canonical request bytes) with the next recorded event and answered with the
   recorded response, or the recorded exception raised again.
3. When the agent returns, the record must say RUN_FINISHED next with the same
   ``{"output": ...}``; when it raises, the record must say ERROR with the same type and
   message (then RUN_FINISHED). A re-run that reproduces a recorded failure *matches*.
4. ``until=N`` stops the agent before the first crossing after seq N: the state at step N.
5. ``keep_going=True`` aligns crossings by kind, call site and ordinal instead of position
   and reports every divergence (``ReplayResult.divergences``) instead of stopping at the
   first (``_keepgoing``); a concurrent record is still served in its recorded interleaving.

The first difference is a :class:`ReplayDivergence` (raised by default; returned in
``ReplayResult.divergence`` with ``raise_on_divergence=False``).
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from tracevault.content import is_envelope
from tracevault.edges import JSON, Edges
from tracevault.errors import ConfigError, ReplayDivergence
from tracevault.recorded_error import type_name
from tracevault.replayer._json_diff import json_diff
from tracevault.replayer._results import ReplayResult
from tracevault.replayer.rerun._keepgoing import KeepGoingCursor
from tracevault.replayer.rerun._never_acts import never_acts
from tracevault.replayer.rerun._until import UntilCursor
from tracevault.replayer.rerun.edges import ReplayCursor, ReplayEdges, StopReplay
from tracevault.schemas import ErrorInfo, EventKind, TraceEvent, canonical_json_like

__all__ = ["Agent", "AsyncAgent", "areplay", "replay"]

Agent = Callable[[JSON, Edges], JSON]
AsyncAgent = Callable[[JSON, Edges], Awaitable[JSON]]


class _Run:
    def __init__(
        self, events: Sequence[TraceEvent], until: int | None, keep_going: bool = False
    ) -> None:
        if not events:
            raise ConfigError("nothing to replay: the run has no events")
        first = events[0]
        if first.seq != 0 or first.kind is not EventKind.RUN_STARTED:
            raise ConfigError(
                f"run {first.run_id}: replay needs seq 0 to be RUN_STARTED, got seq {first.seq} "
                f"{first.kind.value}; load the whole run (verify it first)"
            )
        if until is not None and until < 0:
            raise ConfigError(f"--until must be a seq >= 0, got {until}")
        self.run_id = first.run_id
        if first.request and is_envelope(first.request):
            raise ConfigError(
                f"run {self.run_id}: its content is encrypted (seq 0's request is a sealed "
                "envelope), so there is nothing to replay yet: open it first with "
                "tracevault.content.open_run(settings, events), whose settings name the key "
                "provider of the run's tenant (the CLI's replay commands do this)"
            )
        req = json.loads(first.request) if first.request else None
        if not isinstance(req, dict) or "input" not in req:
            raise ConfigError(
                f"run {self.run_id}: seq 0 request has no 'input' (see tracevault.edges payloads)"
            )
        self.input: JSON = req["input"]
        if keep_going and until is not None:
            raise ConfigError("--keep-going replays the whole run: it does not take --until")
        self.all: KeepGoingCursor | None = (
            KeepGoingCursor(self.run_id, events) if keep_going else None
        )
        self.cursor = self.all or (
            ReplayCursor(self.run_id, events, until)
            if until is None
            else UntilCursor(self.run_id, events, until)
        )
        self.edges = ReplayEdges(self.cursor)

    def _every(self, output: Any, exc: BaseException | None) -> ReplayResult:
        """The keep-going outcome: what was never reached, the end, every divergence."""
        c = self.all
        assert c is not None
        c.missing()
        c.outcome(output, exc)
        found = c.reports()
        return ReplayResult(
            run_id=self.run_id,
            matched=not found,
            steps=c.index.crossings - len(c.index.untaken()),
            until=None,
            stopped=False,
            output=output,
            error=None if exc is None else ErrorInfo(type_name(exc)[0], str(exc)),
            divergence=found[0] if found else None,
            divergences=found,
        )

    # -- outcomes -----------------------------------------------------------------------
    def _result(
        self, *, matched: bool, output: Any = None, error: ErrorInfo | None = None
    ) -> ReplayResult:
        c = self.cursor
        return ReplayResult(
            run_id=self.run_id,
            matched=matched,
            steps=c.pos,
            until=c.until,
            stopped=c.stopped,
            output=output,
            error=error,
            divergence=c.report,
            served=tuple(c.events[: c.pos]),
            next_call=c.asked if isinstance(c, UntilCursor) else None,
        )

    def returned(self, output: JSON) -> ReplayResult:
        if self.all is not None:
            return self._every(output, None)
        c = self.cursor
        if isinstance(c, UntilCursor):
            c.ended(EventKind.RUN_FINISHED.value, {"output": output})
        c.raise_if_diverged()
        c.check_stop()
        actual = {"output": output}
        ev = c.peek()
        actual_bytes = canonical_json_like(
            actual, None if ev is None else ev.response, field="response"
        )
        if ev is None:
            raise c.diverge(
                "the agent finished but the record has no RUN_FINISHED (an unfinished run)",
                actual_kind=EventKind.RUN_FINISHED.value,
                actual_request={},
            )
        if ev.kind is not EventKind.RUN_FINISHED:
            raise c.diverge(
                f"the agent finished where the record has a {ev.kind.value} call "
                "(a call is missing from the re-run)",
                actual_kind=EventKind.RUN_FINISHED.value,
                diff=json_diff(json.loads(ev.request or b"null"), {}, "$.request"),
                actual_request={},
            )
        if ev.error is not None:
            raise c.diverge(
                f"the record says the agent raised {ev.error.type}; the re-run returned",
                actual_kind=EventKind.RUN_FINISHED.value,
                diff=(f"$.error: expected {ev.error.type}: {ev.error.message!r}, got null",),
                actual_request={},
            )
        if actual_bytes != ev.response:
            diff = json_diff(json.loads(ev.response or b"null"), actual, "$.response")
            raise c.diverge(
                "the agent's final output differs from the record",
                actual_kind=EventKind.RUN_FINISHED.value,
                diff=diff,
                actual_request={},
            )
        c.pos += 1
        self._finished()
        return self._result(matched=True, output=output)

    def _finished(self) -> None:
        """Let the crossings the record completes after the end have their turn."""
        interleave = getattr(self.cursor, "interleave", None)
        if interleave is not None:
            interleave.finished(self.cursor.pos)

    def raised(self, exc: BaseException) -> ReplayResult:
        if self.all is not None:
            return self._every(None, exc)
        c = self.cursor
        if isinstance(c, UntilCursor):
            c.ended(
                EventKind.ERROR.value, {"error": {"type": type_name(exc)[0], "message": str(exc)}}
            )
        c.raise_if_diverged()
        c.check_stop()
        names = type_name(exc)
        # the Recorder applied the run's redaction rules to the message: so does the re-run
        redactor = getattr(c, "redactor", None)
        message = str(exc) if redactor is None else redactor.text(str(exc))
        got = {"type": names[0], "message": message}
        ev = c.peek()
        expected_err = (
            None
            if ev is None or ev.error is None
            else {"type": ev.error.type, "message": ev.error.message}
        )
        if ev is None or ev.kind is not EventKind.ERROR or ev.error is None:
            raise c.diverge(
                f"the agent raised {names[0]}: {exc} where the record has "
                f"{'nothing more' if ev is None else ev.kind.value}",
                actual_kind=EventKind.ERROR.value,
                diff=json_diff({"error": expected_err}, {"error": got}),
                actual_request={},
            ) from exc
        # the Recorder keeps the first _MAX_ERROR_CHARS characters of a message
        if ev.error.type not in names or ev.error.message not in (message, message[:16_384]):
            raise c.diverge(
                "the agent raised a different error than the record says",
                actual_kind=EventKind.ERROR.value,
                diff=json_diff({"error": expected_err}, {"error": got}),
                actual_request={},
            ) from exc
        c.pos += 1
        nxt = c.peek()
        if nxt is not None and nxt.kind is EventKind.RUN_FINISHED:
            c.pos += 1
        self._finished()
        return self._result(matched=True, error=ev.error)

    def settle(
        self, outcome: Callable[[], ReplayResult], raise_on_divergence: bool
    ) -> ReplayResult:
        try:
            return outcome()
        except StopReplay:
            return self._result(matched=True)
        except ReplayDivergence:
            if self.all is not None and self.cursor.report is not None:
                return self._every(None, None)
            if raise_on_divergence or self.cursor.report is None:
                raise
            return self._result(matched=False)


def _check_sync(output: Any) -> Any:
    if inspect.isawaitable(output):
        if inspect.iscoroutine(output):
            output.close()
        raise ConfigError("the agent is async (it returned an awaitable): use areplay()")
    return output


def replay(
    events: Sequence[TraceEvent],
    agent: Agent,
    *,
    until: int | None = None,
    raise_on_divergence: bool = True,
    keep_going: bool = False,
) -> ReplayResult:
    """Re-run ``agent`` against the recorded ``events`` (seq order, from a verified run).

    Returns a :class:`ReplayResult`; raises :class:`ReplayDivergence` at the first step
    where the re-run leaves the record unless ``raise_on_divergence=False``. With
    ``keep_going=True`` nothing is raised: ``result.divergences`` lists every divergence.
    """
    run = _Run(events, until, keep_going)

    def outcome() -> ReplayResult:
        run.cursor.check_stop()
        try:
            with never_acts(run.cursor):
                output = _check_sync(agent(run.input, run.edges))
        except (StopReplay, ReplayDivergence, ConfigError):
            raise
        except Exception as exc:
            return run.raised(exc)
        return run.returned(output)

    return run.settle(outcome, raise_on_divergence)


async def areplay(
    events: Sequence[TraceEvent],
    agent: AsyncAgent | Agent,
    *,
    until: int | None = None,
    raise_on_divergence: bool = True,
    keep_going: bool = False,
) -> ReplayResult:
    """:func:`replay` for async agents (``await agent(input, edges)``)."""
    run = _Run(events, until, keep_going)
    result: Any = None
    failure: BaseException | None = None
    stopped = False
    try:
        run.cursor.check_stop()
        with never_acts(run.cursor):
            result = agent(run.input, run.edges)
            if inspect.isawaitable(result):
                result = await result
    except StopReplay:
        stopped = True
    except ReplayDivergence:
        if run.cursor.divergence is None:
            raise
        failure = run.cursor.divergence
    except Exception as exc:
        failure = exc
    except asyncio.CancelledError as exc:
        # the agent let a cancellation out (live: ERROR CancelledError), unless it is ours
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise
        failure = exc

    def outcome() -> ReplayResult:
        if stopped:
            raise StopReplay
        if failure is not None:
            if isinstance(failure, ReplayDivergence):
                raise failure
            return run.raised(failure)
        return run.returned(result)

    return run.settle(outcome, raise_on_divergence)
