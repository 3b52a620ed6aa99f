"""The dashboard's routes: studies, a study, a trial, comparisons, downloads, JSON.

`create_app(storage_url)` opens the database read-only (`Store.open(upgrade=
False)`: a foreign, older or missing database is refused before anything is
served) and returns a Starlette app whose every route is GET. Pages are built
by `autotune.results.view`; a study's page is computed once per change of the
study (`Store.version`, one indexed query) and kept, so a reload of a large
study costs one query.

Stable URLs: `/`, `/study/NAME`, `/study/NAME/trial/N`,
`/study/NAME/compare/A/B`, `/compare?a=STUDY&b=STUDY`, `/runs/NAME` (every run,
filtered by `role`, `outcome` and `flag`, `page` by page),
`/study/NAME/export.FORMAT` (the recommendation), `/study/NAME/trial/N/export.FORMAT`,
and the same data as JSON under `/api/`.
"""

# Imports inside the functions are lazy on purpose: the pages load the read model and the
# storage only when served, so that importing the app stays light for the CLI.

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import (
    FileResponse,
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    Response,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from autotune.dashboard.render import STATIC, page_html
from autotune.ground.errors import AutotuneError, ExportError, StudyNotFoundError

if TYPE_CHECKING:
    from autotune.ground.records import RunRecord, StudyRecord
    from autotune.storage.store import Store

#: Seconds between two checks of a page for new results (the page reloads when they changed).
DEFAULT_REFRESH_S = 5.0

#: Headers on every response: no sniffing, no referrer, never framed, and a content security
#: policy that allows this server alone (Plotly sets inline styles; no script is inline).
SECURITY_HEADERS = (
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"content-security-policy",
     b"default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
     b"img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; "
     b"form-action 'self'; frame-ancestors 'none'"),
)


class SecurityHeaders:
    """ASGI middleware: `SECURITY_HEADERS` added to every HTTP response."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], *SECURITY_HEADERS]
            await send(message)

        await self.app(scope, receive, with_headers)


#: The media type of each export form, as `autotune export --format F` writes it.
EXPORT_MEDIA = {"yaml": "application/yaml", "json": "application/json",
                "env": "text/plain", "jax": "application/json"}


def plotly_js() -> Path:
    """plotly.min.js as the installed plotly package ships it (served, never fetched)."""
    import plotly

    return Path(plotly.__file__).parent / "package_data" / "plotly.min.js"


@dataclass
class _Cached:
    """One version of a study: its record, its runs once something needs them (`earlier`:
    the runs of the version before, so only those stored since are read), the pages."""

    version: str
    record: StudyRecord
    earlier: list[RunRecord] = field(default_factory=list)
    runs: list[RunRecord] | None = None
    page: dict[str, Any] | None = None
    summary: dict[str, Any] | None = None
    importance: dict[str, Any] | None = None


class Reader:
    """What the routes read: a study's record, runs and pages, kept until it changes.

    Thread-safe (Starlette runs the routes in a thread pool): one study is read
    and computed by one thread at a time, so a page asked for while it is being
    computed waits for that computation instead of repeating it. Never writes.
    A study page its writer kept for the study's present version
    (`Store.current_view`) is shown as kept, and no run is read for it.
    """

    def __init__(self, store: Store) -> None:
        from autotune.flags.catalog import load_catalog

        self.store = store
        self.catalog = load_catalog()
        self._cache: dict[str, _Cached] = {}
        self._lock = threading.RLock()

    def version(self, name: str) -> str:
        """A token that changes whenever the study's runs or claims change."""
        return self.store.version(name)

    def _entry(self, name: str) -> _Cached:
        """The study as of now; its pages computed from it are dropped on change. Called
        with the lock held."""
        version = self.version(name)
        hit = self._cache.get(name)
        if hit is not None and hit.version == version:
            return hit
        earlier = [] if hit is None else hit.runs if hit.runs is not None else hit.earlier
        entry = self._cache[name] = _Cached(version, self.store.get_study(name), earlier)
        return entry

    def _runs(self, name: str, entry: _Cached) -> list[RunRecord]:
        """Every run of the entry's study: read once, then only those stored since (runs
        never change once stored). Called with the lock held."""
        if entry.runs is None:
            last = entry.earlier[-1].id if entry.earlier else None
            entry.runs = entry.earlier + self.store.runs(name, after=last)
        return entry.runs

    def warm(self) -> None:
        """Compile the templates, read or compute every study's page once (the first
        visit is then as fast as the next), then read the runs of the studies whose page
        was kept (a change then reads only the runs stored since). Errors are left for
        the request that meets them."""
        from autotune.dashboard.render import environment

        for template in ("study.html", "studies.html"):
            environment().get_template(template)
        with contextlib.suppress(AutotuneError):
            names = [record.name for record in self.store.list_studies()]
            for name in names:
                self.study(name)
                self.summary(name)
            for name in names:
                self.read(name)

    def record(self, name: str) -> StudyRecord:
        """The study's record as of now (no run read)."""
        with self._lock:
            return self._entry(name).record

    def read(self, name: str) -> tuple[StudyRecord, list[RunRecord]]:
        """The study's record and every run, as of now."""
        with self._lock:
            entry = self._entry(name)
            return entry.record, self._runs(name, entry)

    def study(self, name: str) -> dict[str, Any]:
        """`view.study_page` of the study, once per version: the page its writer kept for
        this version, or computed from its runs."""
        with self._lock:
            entry = self._entry(name)
            if entry.page is None:
                entry.page = self._kept(name, entry) or self._computed(name, entry)
                entry.summary = entry.page["summary"]
            return entry.page

    def _kept(self, name: str, entry: _Cached) -> dict[str, Any] | None:
        """The page the study's writer kept at the entry's version, or None."""
        stored = self.store.stored_view(name)
        if stored is None or stored[0] != entry.version:
            return None
        page: dict[str, Any] = json.loads(stored[1])
        return page

    def _computed(self, name: str, entry: _Cached) -> dict[str, Any]:
        from autotune.results.view import study_page

        return study_page(entry.record, self._runs(name, entry), self.catalog,
                          self.store.workers(name), claims=self.store.claims(name))

    def importance(self, name: str) -> dict[str, Any]:
        """`importance --format json` of the study, once per version, with `available`
        (false, with the `reason`, where there is nothing to rank: a study of memory
        alone, or one whose search Optuna does not hold)."""
        from autotune.api.importance import importance

        with self._lock:
            entry = self._entry(name)
            if entry.importance is None:
                try:
                    found = {**importance(self.store, name).to_json(), "available": True}
                except AutotuneError as exc:  # memory alone; no Optuna study of that name
                    found = {"study": name, "available": False, "reason": exc.message,
                             "flags": []}
                entry.importance = found
            return entry.importance

    def summary(self, name: str) -> dict[str, Any]:
        """`view.study_summary` of the study (its line on the studies page), once per
        version: the kept page's where there is one."""
        from autotune.results.view import study_summary

        with self._lock:
            entry = self._entry(name)
            if entry.summary is None and entry.page is None:
                entry.page = self._kept(name, entry)
            if entry.page is not None:
                entry.summary = entry.page["summary"]
            if entry.summary is None:
                entry.summary = study_summary(entry.record, self._runs(name, entry),
                                              self.store.workers(name))
            return entry.summary

    def studies(self) -> list[dict[str, Any]]:
        """The line of every study, latest activity first."""
        rows = [self.summary(record.name) for record in self.store.list_studies()]
        return sorted(rows, key=lambda r: r["last_activity"], reverse=True)


def _reader(request: Request) -> Reader:
    reader: Reader = request.app.state.reader
    return reader


def _refresh(request: Request) -> float:
    refresh: float = request.app.state.refresh_s
    return refresh


def _name(request: Request) -> str:
    return str(request.path_params["name"])


def _missing(what: str) -> HTTPException:
    return HTTPException(404, detail=what)


def _study_or_404(reader: Reader, name: str) -> tuple[StudyRecord, list[RunRecord]]:
    """The study's record and every run (404 when there is no such study)."""
    try:
        return reader.read(name)
    except StudyNotFoundError as exc:
        raise _missing(f"no study called {name!r} in this database") from exc


def _record_or_404(reader: Reader, name: str) -> StudyRecord:
    """The study's record alone, for a route that reads no run (404 when there is none)."""
    try:
        return reader.record(name)
    except StudyNotFoundError as exc:
        raise _missing(f"no study called {name!r} in this database") from exc


def studies_page(request: Request) -> Response:
    reader = _reader(request)
    version = _studies_version(reader.store)  # before the rows: see `_polled`
    rows = reader.studies()
    return HTMLResponse(page_html("studies.html", studies=rows, refresh_s=_refresh(request),
                                  poll=request.url_for("api_version").path, version=version))


def study_page(request: Request) -> Response:
    name = _name(request)
    reader = _reader(request)
    polled = _polled(request, name)
    return HTMLResponse(page_html("study.html", page=reader.study(name),
                                  refresh_s=_refresh(request), **polled))


def _polled(request: Request, name: str) -> dict[str, Any]:
    """What a page of study `name` polls (`poll`) and the version it starts from
    (`version`, the body's `data-version`), taken before the page reads the study: a
    change stored while the page renders then reloads it once. (A page that learned its
    version from its first poll kept a change stored between its rendering and that poll
    unseen until the next change; after a study's last change, for good.)

    Raises:
        HTTPException: 404, no study called `name`.
    """
    try:
        version = _reader(request).version(name)
    except StudyNotFoundError as exc:
        raise _missing(f"no study called {name!r} in this database") from exc
    return {"poll": _version_path(request, name), "version": version}


def _version_path(request: Request, name: str) -> str:
    """The path of a study's version (what its pages poll), the name one encoded segment:
    a study called `a?b` polls `/api/study/a%3Fb/version`, not `/api/study/a`."""
    return request.app.url_path_for("api_study_version", name=quote(name, safe=""))


def _trial(request: Request) -> dict[str, Any]:
    """`view.trial_page` of the trial the URL names (404 when there is none)."""
    from autotune.results.view import trial_page as view

    name, number = _name(request), int(request.path_params["number"])
    reader = _reader(request)
    record, runs = _study_or_404(reader, name)
    page = view(record, runs, number, reader.catalog)
    if page is None:  # a proposal that reused a measured configuration has no run of its own
        page = view(record, runs, number, reader.catalog,
                    reused_run=reader.store.reused_run(name, number))
    if page is None:
        raise _missing(f"study {name!r} has no trial {number}")
    return page


def trial_page(request: Request) -> Response:
    polled = _polled(request, _name(request))
    return HTMLResponse(page_html("trial.html", page=_trial(request),
                                  refresh_s=_refresh(request), **polled))


def compare_trials_page(request: Request) -> Response:
    from autotune.results.view import compare_trials

    name = _name(request)
    a, b = int(request.path_params["a"]), int(request.path_params["b"])
    reader = _reader(request)
    record, runs = _study_or_404(reader, name)
    page = compare_trials(runs, a, b, reader.catalog)
    if page is None:
        raise _missing(f"study {name!r} has no trial {a if not _has(runs, a) else b}")
    return HTMLResponse(page_html("compare_trials.html", page=page, study=record.name,
                                  refresh_s=0, poll=None))


def _runs_page(request: Request) -> tuple[StudyRecord, dict[str, Any]]:
    """The study the URL names and `view.runs_page` of its runs under the query's filters
    (`role`, `outcome`, `flag`; empty means any) and `page` (a number from 1)."""
    from autotune.results.view import runs_page

    name = _name(request)
    record, runs = _study_or_404(_reader(request), name)
    query = request.query_params
    try:
        number = int(query.get("page") or 1)
    except ValueError as exc:
        raise _missing(f"page {query.get('page')!r} is not a number") from exc
    return record, runs_page(runs, role=query.get("role") or None,
                             outcome=query.get("outcome") or None,
                             flag=query.get("flag") or None, page=number)


def runs_page(request: Request) -> Response:
    polled = _polled(request, _name(request))
    record, page = _runs_page(request)
    kept = {k: v for k, v in page["filters"].items() if v}

    def query(number: int) -> str:
        return urlencode({**kept, "page": number})

    return HTMLResponse(page_html("runs.html", page=page, study=record, query=query,
                                  refresh_s=_refresh(request), **polled))


def api_runs(request: Request) -> Response:
    return JSONResponse(_runs_page(request)[1])


def _has(runs: list[RunRecord], number: int) -> bool:
    return any(r.trial_number == number for r in runs)


def compare_studies_page(request: Request) -> Response:
    from autotune.results.view import compare_studies

    reader = _reader(request)
    names = [request.query_params.get(key) for key in ("a", "b")]
    if None in names:
        raise _missing("name the two studies to compare: /compare?a=STUDY&b=STUDY")
    ra, runs_a = _study_or_404(reader, str(names[0]))
    rb, runs_b = _study_or_404(reader, str(names[1]))
    page = compare_studies(ra, runs_a, rb, runs_b, reader.catalog)
    return HTMLResponse(page_html("compare_studies.html", page=page, refresh_s=0, poll=None))


def download(request: Request) -> Response:
    """The export document, rendered exactly as `autotune export --format F` writes it."""
    from autotune.results.export import ExportFormat, export_document, render_export

    name, fmt = _name(request), str(request.path_params["fmt"])
    if fmt not in EXPORT_MEDIA:
        raise _missing(f"no export format {fmt!r}; known: {', '.join(EXPORT_MEDIA)}")
    number = request.path_params.get("number")
    reader = _reader(request)
    record, runs = _study_or_404(reader, name)
    try:
        document = export_document(record, runs, reader.catalog,
                                   trial=int(number) if number is not None else None)
    except ExportError as exc:
        raise _missing(exc.message) from exc
    filename = f"{record.name}-{'best' if number is None else f'trial-{number}'}.{fmt}"
    return Response(render_export(document, ExportFormat(fmt)).encode("utf-8"),
                    media_type=EXPORT_MEDIA[fmt],
                    headers={"Content-Disposition": f"attachment; filename*=UTF-8''"
                                                    f"{quote(filename, safe='')}"})


def api_studies(request: Request) -> Response:
    return JSONResponse(_reader(request).studies())


def api_study(request: Request) -> Response:
    name = _name(request)
    reader = _reader(request)
    _record_or_404(reader, name)
    return JSONResponse(reader.study(name))


def api_trial(request: Request) -> Response:
    return JSONResponse(_trial(request))


def api_importance(request: Request) -> Response:
    """Each flag's share of the search's variance and the paired ablation (as
    `autotune importance --format json`), for the study page's importance chart."""
    name = _name(request)
    reader = _reader(request)
    _record_or_404(reader, name)
    return JSONResponse(reader.importance(name))


def api_study_version(request: Request) -> Response:
    name = _name(request)
    reader = _reader(request)
    _record_or_404(reader, name)
    return JSONResponse({"version": reader.version(name)})


def api_version(request: Request) -> Response:
    """A token for the studies page: every study's version."""
    return JSONResponse({"version": _studies_version(_reader(request).store)})


def _studies_version(store: Store) -> str:
    """A token that changes whenever any study's `Store.version` does, or a study comes or
    goes."""
    versions = {r.name: store.version(r.name) for r in store.list_studies()}
    return hashlib.sha256(json.dumps(versions, sort_keys=True).encode()).hexdigest()


def favicon(request: Request) -> Response:
    return Response(status_code=204)


async def not_found(request: Request, exc: Exception) -> Response:
    """A 404 (or another HTTP error) page with a link back to the studies."""
    status = getattr(exc, "status_code", 500)
    detail = str(getattr(exc, "detail", "") or "not found")
    if request.url.path.startswith("/api/"):
        return JSONResponse({"error": detail}, status_code=status)
    if status == 405:
        return PlainTextResponse("the dashboard is read-only: GET only", status_code=405,
                                 headers={"Allow": "GET, HEAD"})
    return HTMLResponse(page_html("missing.html", detail=detail, status=status, refresh_s=0,
                                  poll=None), status_code=status)


async def failed(request: Request, exc: Exception) -> Response:
    """A fault of the database (it went away, say): the message, not a traceback."""
    message = exc.message if isinstance(exc, AutotuneError) else "internal error"
    return HTMLResponse(page_html("missing.html", detail=message, status=500, refresh_s=0,
                                  poll=None), status_code=500)


def routes() -> list[Route | Mount]:
    """Every route; each one GET only."""
    get = ["GET"]
    return [
        Route("/", studies_page, methods=get, name="studies"),
        Route("/favicon.ico", favicon, methods=get),
        Route("/compare", compare_studies_page, methods=get, name="compare_studies"),
        Route("/runs/{name:path}", runs_page, methods=get, name="runs"),
        Route("/api/runs/{name:path}", api_runs, methods=get),
        # A study's name may hold "/" (it reaches the app decoded): the most specific
        # routes come first, and the name is the rest of the path.
        Route("/study/{name:path}/trial/{number:int}/export.{fmt}", download, methods=get,
              name="trial_export"),
        Route("/study/{name:path}/trial/{number:int}", trial_page, methods=get, name="trial"),
        Route("/study/{name:path}/compare/{a:int}/{b:int}", compare_trials_page, methods=get,
              name="compare_trials"),
        Route("/study/{name:path}/export.{fmt}", download, methods=get, name="export"),
        Route("/study/{name:path}", study_page, methods=get, name="study"),
        Route("/api/version", api_version, methods=get, name="api_version"),
        Route("/api/studies", api_studies, methods=get),
        Route("/api/study/{name:path}/trial/{number:int}", api_trial, methods=get),
        Route("/api/study/{name:path}/importance", api_importance, methods=get,
              name="api_importance"),
        Route("/api/study/{name:path}/version", api_study_version, methods=get,
              name="api_study_version"),
        Route("/api/study/{name:path}", api_study, methods=get),
        Route("/static/plotly.min.js", lambda r: FileResponse(plotly_js()), methods=get),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]


def create_app(store: Store, refresh_s: float = DEFAULT_REFRESH_S,
               warm: bool = False, allowed_hosts: Sequence[str] | None = None) -> Starlette:
    """The dashboard over an open, read-only `store`; pages poll every `refresh_s` seconds
    (0: never). `warm` computes every study's page in a background thread from the
    start, so the first visit does not wait for it. With `allowed_hosts`, a request
    whose Host header names another host is refused (400: a page of another site
    that resolves its name to this address, DNS rebinding, reads nothing). Every
    response carries `SECURITY_HEADERS`."""
    from starlette.middleware import Middleware
    from starlette.middleware.trustedhost import TrustedHostMiddleware

    reader = Reader(store)
    middleware = [Middleware(SecurityHeaders)]
    if allowed_hosts is not None:
        middleware.append(Middleware(TrustedHostMiddleware, allowed_hosts=list(allowed_hosts),
                                     www_redirect=False))
    app = Starlette(routes=routes(), middleware=middleware, exception_handlers={
        HTTPException: not_found, AutotuneError: failed})
    app.state.reader = reader
    app.state.refresh_s = refresh_s
    if warm:
        threading.Thread(target=reader.warm, name="autotune-warm", daemon=True).start()
    return app
