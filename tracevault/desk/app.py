"""``tracevault ui``'s pages: runs, a run, a diff; server-rendered, no script.

Why server-rendered and script-free: the page a person reads is what the server verified, and
nothing is fetched after it (no CDN, works offline). Each run is verified once through the
replayer (``evidence.gather``), in a thread; only its first page, read from the run's first
objects (``evidence.first_page``), is shown before the verdict, under "verifying…" and
reloading itself, and its status sits at the top of the page in words, a failure in red
(docs/desk.md, "The UI"). Errors become a message in the page,
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
from datetime import UTC, datetime
from importlib.resources import files
from typing import Any
from urllib.parse import parse_qs, quote, urlencode

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
from tracevault.desk.access import Access, AccessLog, Reader
from tracevault.desk.evidence import Reveal, RunEvidence, first_page, gather, is_encrypted
from tracevault.desk.report import durations_ms, event_name, pretty_json
from tracevault.desk.runs import IndexSource, RunQuery, RunSource, source_for
from tracevault.errors import ConfigError, NotFoundError, TraceVaultError
from tracevault.index import FILTERS, STATUSES, Filters
from tracevault.replayer import Trust, align_runs
from tracevault.schemas import TraceEvent, micros_to_datetime

__all__ = ["PAGE_SIZE", "DeskConfig", "make_app"]

log = logging.getLogger(__name__)

#: Events per page of a run: a 100,000-event run's first screen renders 500 rows.
PAGE_SIZE = 500
RUNS_PAGE = 100
_COOKIE = "tracevault_ui_token"
#: At most this long a run's verification waits for its first screen to go out (the request
#: that asked for it sets ``_Job.served`` when it is answered, or fails, or is dropped).
_SERVED_S = 30.0


@dataclass(frozen=True, slots=True)
class DeskConfig:
    """What the desk reads and trusts. ``trust``: what each run is verified against, built as
    ``replay verify`` builds it (``Trust.of``). ``token``: every request must carry it (None:
    loopback only, which ``tracevault ui`` enforces before it binds). ``access``: where
    openings of content are recorded (None: no content opens, hashes only)."""

    settings: Settings
    trust: Trust
    token: str | None = None
    runs: RunSource | None = None
    cache_s: float = 60.0
    access: AccessLog | None = None


class _Job:
    """One run's verification, run once in a thread: its first page (``head``, read from the
    run's first objects, not verified) is ready before its verdict (``evidence``)."""

    def __init__(self) -> None:
        self.head: list[TraceEvent] | None = None
        self.total = 0
        self.evidence: RunEvidence | None = None
        self.error: BaseException | None = None
        self.ready = threading.Event()  # head, evidence or error is set
        self.served = threading.Event()  # the first screen went out: verify at full speed
        self.done = threading.Event()  # evidence or error is set

    def run(self, conf: DeskConfig, run_id: str) -> None:
        try:
            try:
                got = first_page(conf.settings, run_id, PAGE_SIZE)
            except Exception:  # no first page early: the verdict (or its error) comes first
                log.debug("desk: no early first page of %s", run_id, exc_info=True)
                got = None
            if got is not None:
                self.head, self.total = got
            self.ready.set()
            if self.head is not None:  # the GIL to the first screen first (its request
                self.served.wait(timeout=_SERVED_S)  # sets ``served`` however it ends)
            self.evidence = gather(
                conf.settings,
                run_id,
                source="archive",
                trust=conf.trust,
                reveal=Reveal(every=True),
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


def _rows(
    ev: RunEvidence, lo: int, hi: int, opened: frozenset[int], openable: bool
) -> list[dict[str, Any]]:
    """Rows ``lo``..``hi`` of the timeline; only ``opened`` seqs (their access recorded)
    show content, the others their SHA-256 and, when ``openable``, a link that opens them."""
    events = list(ev.events[lo : hi + 1])
    durs = durations_ms(events)
    rows = []
    for i, e in enumerate(events[: hi - lo]):
        shown = e.seq in ev.revealed and e.seq in opened
        parts = []
        for name, data in (("request", e.request), ("response", e.response)):
            text = pretty_json(data) if shown else "SHA-256 " + str(ev.payload_sha(data))
            parts.append({"name": name, "size": len(data), "text": text, "open": shown})
        rows.append(
            {
                "seq": e.seq,
                "kind": e.kind.value,
                "name": event_name(e),
                "parts": parts,
                "at": micros_to_datetime(e.at).isoformat(" ", timespec="milliseconds")[:23],
                "took": "" if durs[i] is None else f"{durs[i]:.1f} ms",
                "error": None if e.error is None else f"{e.error.type}: {e.error.message}",
                "openable": openable and e.seq in ev.revealed and not shown,
                "sealed": e.seq not in ev.revealed,
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
        self.source: RunSource | None = conf.runs  # else the index once there is one
        if conf.runs is None:  # a 1M-run index takes seconds to read: start now, in a thread
            threading.Thread(target=self._warm, daemon=True).start()
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

    def _source(self) -> RunSource:
        """The given source, else the index (kept once found), else the archive's listing
        (asked again each time: an index may be built while the desk runs)."""
        if self.source is not None:
            return self.source
        found = source_for(self.conf.settings)
        if isinstance(found, IndexSource):
            self.source = found
        return found

    def _warm(self) -> None:
        try:
            found = self._source()
            if isinstance(found, IndexSource):
                found.warm()
        except Exception:  # the Runs page will say what is wrong when it is asked
            log.debug("desk: the index was not read ahead", exc_info=True)

    async def runs_page(self, request: Request) -> Response:
        params = {k: v.strip() for k, v in request.query_params.items() if k != "page"}
        params = {k: v for k, v in params.items() if v}
        q = params.get("q", "")
        n = _int(request.query_params.get("page"), 0)
        source = self._source()
        ctx = _runs_ctx(params, source.name)
        try:
            query = RunQuery(q, _filters(params), n, RUNS_PAGE)
        except ConfigError as exc:
            ctx["bad"] = str(exc)
            return self.page(request, "runs.html", 400, **ctx)
        found = await asyncio.to_thread(source.search, query)
        pages = max(1, math.ceil(found.total / RUNS_PAGE))
        ctx.update(
            total=found.total,
            pages=pages,
            page=n,
            runs=found.rows,
            notes=found.notes,
            prev_href=_href(params, page=n - 1) if n > 0 else None,
            next_href=_href(params, page=n + 1) if n + 1 < pages else None,
        )
        return self.page(request, "runs.html", **ctx)

    async def run_page(self, request: Request) -> Response:
        run_id = request.path_params["run_id"]
        job = self.runs.job(run_id)
        try:
            return await self._run_page(request, run_id, job)
        finally:  # answered, failed or dropped: the verification need not wait any longer
            job.served.set()

    async def _run_page(self, request: Request, run_id: str, job: _Job) -> Response:
        wanted = _seqs(request.query_params.getlist("open"))
        n = _int(request.query_params.get("page"), min(wanted) // PAGE_SIZE if wanted else 0)
        await asyncio.to_thread(job.ready.wait)
        if not job.done.is_set() and job.head is not None and n == 0 and not wanted:
            again = _int(request.query_params.get("reload"), 0) + 1  # a new URL each time
            return self._verifying(request, run_id, job.head, job.total, again)
        ev = await self.runs.get(run_id, job)  # its error too, not a second attempt
        total = len(ev.events)
        pages = max(1, math.ceil(total / PAGE_SIZE))
        n = min(n, pages - 1)
        lo, hi = n * PAGE_SIZE, min(total, (n + 1) * PAGE_SIZE)
        opened = frozenset(s for s in wanted if lo <= s < hi and s in ev.revealed)
        recorded = await self._record_access(request, ev.run_id, opened) if opened else None
        if recorded is None:
            opened = frozenset()
        return self.page(
            request,
            "run.html",
            verifying=False,
            ev=ev,
            rows=_rows(ev, lo, hi, opened, self.conf.access is not None),
            access=self.conf.access is not None,
            recorded=recorded,
            total=total,
            page=n,
            pages=pages,
            first=lo,
            last=max(lo, hi - 1),
        )

    def _verifying(
        self, request: Request, run_id: str, head: list[TraceEvent], total: int, again: int
    ) -> Response:
        """The first page of a run still being verified: "verifying…" at the top, every payload
        by hash (content opens only after the verdict, with its access recorded), and the page
        reloads itself (no script) until the verdict."""
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
            rows=_rows(ev, 0, len(head), frozenset(), False),
            access=self.conf.access is not None,
            total=total,
            page=0,
            pages=max(1, math.ceil(total / PAGE_SIZE)),
            first=0,
            last=max(0, len(head) - 1),
        )

    async def _record_access(
        self, request: Request, run_id: str, seqs: frozenset[int], what: str = "payload"
    ) -> Access | None:
        """Record that this request's reader opened ``seqs`` of ``run_id``; None without an
        access log, and then nothing may be shown (content never opens unrecorded)."""
        access = self.conf.access
        if access is None:
            return None
        reader = _reader(request, access.local_user, authed=self.conf.token is not None)
        return await asyncio.to_thread(access.record, reader, run_id, sorted(seqs), what)

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
        shown = self.conf.access is not None
        if shown:  # the differing values are content: their reading is recorded too
            for run_id, seqs in (
                (a, {d.seq_a for d in result.differences if d.seq_a is not None}),
                (b, {d.seq_b for d in result.differences if d.seq_b is not None}),
            ):
                if seqs:
                    await self._record_access(request, run_id, frozenset(seqs), "diff")
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
            shown=shown,
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


#: Headers an SSO proxy names the signed-in person with (oauth2-proxy, Pomerium, …), first wins.
_USER_HEADERS = (
    "x-forwarded-email",
    "x-forwarded-user",
    "x-auth-request-email",
    "x-auth-request-user",
)


def _reader(request: Request, local_user: str, *, authed: bool) -> Reader:
    """Who is reading: the person the SSO proxy names, else the token's holder (the desk
    cannot tell who), else on loopback the OS user the desk runs as."""
    address = request.client.host if request.client else ""
    for header in _USER_HEADERS:
        name = request.headers.get(header, "").strip()
        if name:
            return Reader(name[:256], f"proxy-header {header}", address)
    if authed:
        return Reader("holder of the desk's token", "token", address)
    return Reader(local_user, "loopback", address)


def _href(params: dict[str, str], **change: object) -> str:
    """The Runs page's URL with ``params`` and ``change`` (a value None drops the key)."""
    merged = {**params, **{k: str(v) for k, v in change.items() if v is not None}}
    merged = {k: v for k, v in merged.items() if k not in change or change[k] is not None}
    return "/?" + urlencode(merged) if merged else "/"


def _runs_ctx(params: dict[str, str], source: str) -> dict[str, Any]:
    """What every Runs page shows: the form's values, the status chips, the source."""
    chips = [{"label": "any", "href": _href(params, status=None, page=None),
              "on": "status" not in params}]  # fmt: skip
    chips += [
        {"label": st, "href": _href(params, status=st, page=None), "on": params.get("status") == st}
        for st in STATUSES
    ]
    return {
        "q": params.get("q", ""),
        "params": params,
        "chips": chips,
        "source": source,
        "fields": [f for f in FILTERS if f != "status"],
        "total": 0,
        "pages": 1,
        "page": 0,
        "runs": [],
        "notes": (),
        "bad": None,
        "prev_href": None,
        "next_href": None,
    }


def _filters(params: dict[str, str]) -> Filters:
    """``tracevault search``'s filters from the page's query (ConfigError naming a bad one)."""
    given: dict[str, Any] = {k: params[k] for k in FILTERS if k in params}
    for k in ("since", "until"):
        if k in given:
            try:
                when = datetime.fromisoformat(given[k])
            except ValueError as exc:
                raise ConfigError(f"{k}: {given[k]!r} is not a date (2026-01-31) or time") from exc
            given[k] = when.replace(tzinfo=UTC) if when.tzinfo is None else when
    if "min_events" in given:
        if not given["min_events"].isdigit():
            raise ConfigError(f"min_events: {given['min_events']!r} is not a number")
        given["min_events"] = int(given["min_events"])
    filters = Filters.of(**given)
    filters.where()  # an unknown status or kind is refused here, not in the source
    return filters


def _seqs(given: list[str]) -> frozenset[int]:
    """``open=3&open=5,7``: the seqs asked for (what is not a seq is ignored)."""
    out: set[int] = set()
    for text in given:
        out.update(int(t) for t in text.split(",") if t.strip().isdigit())
    return frozenset(out)


def _int(text: str | None, default: int) -> int:
    try:
        return max(0, int(text)) if text is not None else default
    except ValueError:
        return default
