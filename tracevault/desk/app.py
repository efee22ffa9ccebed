"""``tracevault ui``'s pages: runs, a run, a diff; server-rendered, no script.

Why server-rendered and script-free: the page a person reads is what the server verified, and
nothing is fetched after it (no CDN, works offline). Each run is verified once through the
replayer (``evidence.gather``), in a thread; only its first page is shown before the verdict,
under "verifying…" and reloading itself, and its status sits at the top of the page in words,
a failure in red (docs/desk.md, "The UI"). Errors become a message in the page,
never a stack trace: an unknown run is a 404 page that links back to the runs.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from importlib.resources import files
from typing import Any
from urllib.parse import parse_qs, quote

from tracevault.errors import missing_extra

try:
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.middleware.base import BaseHTTPMiddleware
    from starlette.requests import Request
    from starlette.responses import PlainTextResponse, RedirectResponse, Response
    from starlette.routing import Route
    from starlette.templating import Jinja2Templates
except ImportError as exc:  # the extra is not installed: say which one
    raise missing_extra("ui", exc) from exc

from tracevault.config import Settings
from tracevault.desk.evidence import Reveal, RunEvidence, gather, is_encrypted, preview
from tracevault.desk.report import durations_ms, event_name, pretty_json
from tracevault.desk.runs import ArchiveListing, RunSource
from tracevault.errors import NotFoundError, TraceVaultError
from tracevault.replayer import LoadedRun, Trust, align_runs
from tracevault.schemas import TraceEvent, micros_to_datetime

__all__ = ["PAGE_SIZE", "DeskConfig", "make_app"]

log = logging.getLogger(__name__)

#: Events per page of a run: a 100,000-event run's first screen renders 500 rows.
PAGE_SIZE = 500
RUNS_PAGE = 100
_COOKIE = "tracevault_ui_token"


@dataclass(frozen=True, slots=True)
class DeskConfig:
    """What the desk reads and trusts. ``trust``: what each run is verified against, built as
    ``replay verify`` builds it (``Trust.of``). ``token``: every request must carry it (None:
    loopback only, which ``tracevault ui`` enforces before it binds)."""

    settings: Settings
    trust: Trust
    token: str | None = None
    runs: RunSource | None = None
    cache_s: float = 60.0


class _Job:
    """One run's verification, run once in a thread: its first page (``head``, decoded as soon
    as the run is loaded, not verified) is ready before its verdict (``evidence``)."""

    def __init__(self) -> None:
        self.head: list[TraceEvent] | None = None
        self.total = 0
        self.evidence: RunEvidence | None = None
        self.error: BaseException | None = None
        self.ready = threading.Event()  # head, evidence or error is set
        self.served = threading.Event()  # the first screen went out: verify at full speed
        self.done = threading.Event()  # evidence or error is set

    def run(self, conf: DeskConfig, run_id: str) -> None:
        def loaded(run: LoadedRun) -> None:
            try:
                self.head, self.total = preview(run, PAGE_SIZE), len(run.records)
            except Exception:  # no first page early: the verdict comes first
                log.debug("desk: no early first page of %s", run_id, exc_info=True)
            self.ready.set()
            if self.head is not None:  # the GIL to the first screen first (at most 5 s)
                self.served.wait(timeout=5.0)

        try:
            self.evidence = gather(
                conf.settings,
                run_id,
                source="archive",
                trust=conf.trust,
                reveal=Reveal(every=True),
                on_loaded=loaded,
            )
        except BaseException as exc:  # handed to the request that asks
            self.error = exc
        finally:
            self.done.set()
            self.ready.set()

    def result(self) -> RunEvidence:
        self.done.wait()
        if self.error is not None:
            raise self.error
        assert self.evidence is not None  # done without an error
        return self.evidence


class _Runs:
    """Runs being verified or verified, a few kept for ``cache_s``: paging a 100,000-event run
    must not verify it again for every page, and a run still being written is re-read after a
    minute. Each run is verified once, in a thread of its own (docs/desk.md, "The UI")."""

    def __init__(self, conf: DeskConfig, size: int = 4) -> None:
        self._conf = conf
        self._size = size
        self._lock = threading.Lock()
        self._kept: OrderedDict[str, tuple[float, _Job]] = OrderedDict()

    def job(self, run_id: str) -> _Job:
        now = time.monotonic()
        with self._lock:
            got = self._kept.get(run_id)
            fresh = got is not None and got[1].error is None and now - got[0] < self._conf.cache_s
            if got is not None and (not got[1].done.is_set() or fresh):
                self._kept.move_to_end(run_id)
                return got[1]
            job = _Job()
            self._kept[run_id] = (now, job)
            while len(self._kept) > self._size:
                self._kept.popitem(last=False)
        threading.Thread(target=job.run, args=(self._conf, run_id), daemon=True).start()
        return job

    async def get(self, run_id: str, job: _Job | None = None) -> RunEvidence:
        """The verdict of ``run_id`` (of ``job``, the one a page already holds)."""
        job = job or self.job(run_id)
        job.served.set()  # this one waits for the verdict, not for a first screen
        await asyncio.to_thread(job.done.wait)
        return job.result()


def _rows(ev: RunEvidence, lo: int, hi: int) -> list[dict[str, Any]]:
    events = list(ev.events[lo : hi + 1])
    durs = durations_ms(events)
    rows = []
    for i, e in enumerate(events[: hi - lo]):
        shown = e.seq in ev.revealed
        parts = []
        for name, data in (("request", e.request), ("response", e.response)):
            text = (
                pretty_json(data) if shown else "not opened: SHA-256 " + str(ev.payload_sha(data))
            )
            parts.append({"name": name, "size": len(data), "text": text})
        rows.append(
            {
                "seq": e.seq,
                "kind": e.kind.value,
                "name": event_name(e),
                "parts": parts,
                "at": micros_to_datetime(e.at).isoformat(timespec="milliseconds"),
                "took": "" if durs[i] is None else f"{durs[i]:.1f} ms",
                "error": None if e.error is None else f"{e.error.type}: {e.error.message}",
            }
        )
    return rows


class _Pages:
    """The desk's pages over one ``DeskConfig``: each method one route."""

    def __init__(self, conf: DeskConfig) -> None:
        here = files("tracevault.desk")
        self.conf = conf
        self.templates = Jinja2Templates(directory=str(here.joinpath("templates")))
        self.runs = _Runs(conf)
        self.source = conf.runs or ArchiveListing(conf.settings)
        self.css = here.joinpath("assets", "desk.css").read_text(encoding="utf-8")

    def page(self, request: Request, name: str, status: int = 200, **ctx: Any) -> Response:
        ctx["authed"] = self.conf.token is not None
        return self.templates.TemplateResponse(request, name, ctx, status_code=status)

    def message(self, request: Request, status: int, heading: str, text: str) -> Response:
        return self.page(
            request,
            "message.html",
            status,
            heading=heading,
            message=text,
            back_href="/",
            back_text="Back to the runs (search)",
        )

    async def runs_page(self, request: Request) -> Response:
        q = request.query_params.get("q", "").strip()
        found = self.source.search(q)
        pages = max(1, math.ceil(len(found) / RUNS_PAGE))
        n = min(_int(request.query_params.get("page"), 0), pages - 1)
        return self.page(
            request,
            "runs.html",
            q=q,
            total=len(found),
            pages=pages,
            page=n,
            runs=found[n * RUNS_PAGE : (n + 1) * RUNS_PAGE],
            source=self.source.name,
        )

    async def run_page(self, request: Request) -> Response:
        run_id = request.path_params["run_id"]
        job = self.runs.job(run_id)
        n = _int(request.query_params.get("page"), 0)
        await asyncio.to_thread(job.ready.wait)
        if not job.done.is_set() and job.head is not None and n == 0:
            again = _int(request.query_params.get("reload"), 0) + 1  # a new URL each time
            try:
                return self._verifying(request, run_id, job.head, job.total, again)
            finally:
                job.served.set()
        ev = await self.runs.get(run_id, job)  # its error too, not a second attempt
        total = len(ev.events)
        pages = max(1, math.ceil(total / PAGE_SIZE))
        n = min(n, pages - 1)
        lo, hi = n * PAGE_SIZE, min(total, (n + 1) * PAGE_SIZE)
        return self.page(
            request,
            "run.html",
            verifying=False,
            ev=ev,
            rows=_rows(ev, lo, hi),
            total=total,
            page=n,
            pages=pages,
            first=lo,
            last=max(lo, hi - 1),
        )

    def _verifying(
        self, request: Request, run_id: str, head: list[TraceEvent], total: int, again: int
    ) -> Response:
        """The first page of a run still being verified: "verifying…" at the top, payloads of
        encrypted events by hash, and the page reloads itself (no script) until the verdict."""
        sealed = frozenset(e.seq for e in head if is_encrypted(e))
        ev = RunEvidence(
            run_id=run_id,
            status="verifying",
            checks=(),
            failure=None,
            records=(),
            events=head,
            log=None,
            revealed=frozenset(e.seq for e in head) - sealed,
        )
        return self.page(
            request,
            "run.html",
            verifying=True,
            reload=f"/runs/{quote(run_id, safe='')}?page=0&reload={again}",
            ev=ev,
            rows=_rows(ev, 0, len(head)),
            total=total,
            page=0,
            pages=max(1, math.ceil(total / PAGE_SIZE)),
            first=0,
            last=max(0, len(head) - 1),
        )

    async def seq_link(self, request: Request) -> Response:
        run_id, seq = request.path_params["run_id"], request.path_params["seq"]
        await self.runs.get(run_id)  # the link lands on the verdict, not on "verifying…"
        return RedirectResponse(f"/runs/{quote(run_id, safe='')}?page={seq // PAGE_SIZE}#seq-{seq}")

    async def diff_page(self, request: Request) -> Response:
        a = request.query_params.get("a", "").strip()
        b = request.query_params.get("b", "").strip()
        ignore = tuple(request.query_params.getlist("ignore"))
        if not (a and b):
            return self.page(request, "diff.html", a=a, b=b, ignore=ignore, result=None)
        ev_a, ev_b = await self.runs.get(a), await self.runs.get(b)
        result = align_runs(ev_a.events, ev_b.events, ignore=ignore)
        first = result.differences[0] if result.differences else None
        return self.page(
            request,
            "diff.html",
            a=a,
            b=b,
            ignore=ignore,
            result=result,
            first=first,
            ev_a=ev_a,
            ev_b=ev_b,
        )

    async def stylesheet(self, request: Request) -> Response:
        return Response(self.css, media_type="text/css")

    async def login(self, request: Request) -> Response:
        if request.method == "GET":
            nxt = request.query_params.get("next", "/")
            return self.page(request, "login.html", next=nxt, bad=False)
        form = parse_qs((await request.body()).decode("utf-8", "replace"))
        given, nxt = form.get("token", [""])[0], form.get("next", ["/"])[0]
        token = self.conf.token
        if token is None or not hmac.compare_digest(given.encode(), token.encode()):
            return self.page(request, "login.html", 401, next=nxt, bad=True)
        local = nxt.startswith("/") and not nxt.startswith("//")  # never off this site
        resp = RedirectResponse(nxt if local else "/", status_code=303)
        resp.set_cookie(_COOKIE, given, httponly=True, samesite="strict")
        return resp

    async def logout(self, request: Request) -> Response:
        resp = RedirectResponse("/login", status_code=303)
        resp.delete_cookie(_COOKIE)
        return resp

    async def not_found(self, request: Request, exc: Exception) -> Response:
        return self.message(request, 404, "Not found", str(exc))

    async def failed(self, request: Request, exc: Exception) -> Response:
        if isinstance(exc, NotFoundError):
            return self.message(request, 404, "Not found", str(exc))
        code = 503 if getattr(exc, "exit_code", 0) == 3 else 500
        return self.message(request, code, "The desk could not read this", str(exc))

    async def crashed(self, request: Request, exc: Exception) -> Response:
        log.exception("desk page %s failed", request.url.path)
        return self.message(
            request, 500, "The desk failed", f"{type(exc).__name__}: see the server's log"
        )


def make_app(conf: DeskConfig) -> Starlette:
    """The desk's ASGI app over ``conf`` (served by ``tracevault ui`` with uvicorn)."""
    p = _Pages(conf)
    guard = (
        []
        if conf.token is None
        else [Middleware(BaseHTTPMiddleware, dispatch=_require_token(conf.token))]
    )
    return Starlette(
        routes=[
            Route("/", p.runs_page),
            Route("/runs/{run_id:str}", p.run_page),
            Route("/runs/{run_id:str}/seq/{seq:int}", p.seq_link),
            Route("/diff", p.diff_page),
            Route("/static/desk.css", p.stylesheet),
            Route("/login", p.login, methods=["GET", "POST"]),
            Route("/logout", p.logout, methods=["POST"]),
        ],
        exception_handlers={404: p.not_found, TraceVaultError: p.failed, Exception: p.crashed},
        middleware=guard,
    )


def _require_token(token: str) -> Callable[[Request, Any], Awaitable[Response]]:
    """Every request carries the token, as ``Authorization: Bearer`` or the login cookie."""

    async def check(request: Request, call_next: Any) -> Response:
        if request.url.path in ("/login", "/static/desk.css"):
            return await call_next(request)  # type: ignore[no-any-return]
        auth = request.headers.get("authorization", "")
        given = auth[7:] if auth.lower().startswith("bearer ") else request.cookies.get(_COOKIE, "")
        if given and hmac.compare_digest(given.encode(), token.encode()):
            return await call_next(request)  # type: ignore[no-any-return]
        if "text/html" in request.headers.get("accept", ""):
            return RedirectResponse(f"/login?next={quote(request.url.path)}", status_code=303)
        return PlainTextResponse("a token is required (Authorization: Bearer …)", status_code=401)

    return check


def _int(text: str | None, default: int) -> int:
    try:
        return max(0, int(text)) if text is not None else default
    except ValueError:
        return default
