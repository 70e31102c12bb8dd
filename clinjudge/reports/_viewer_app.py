"""The `judge view` web app (Starlette): routes, security headers, busy-database handling."""

from __future__ import annotations

import ipaddress
import threading
from collections.abc import Callable
from importlib.resources import files
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from clinjudge.reports._viewer_links import Links
from clinjudge.reports._viewer_pages import PageNotFound, Viewer
from clinjudge.reports._viewer_render import CSP_HEADER
from clinjudge.reports._viewer_store import DatabaseBusy, DatabaseMissing

BUSY_RETRY_S = 3
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP_HEADER,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}


def static_dir() -> Path:
    """The viewer's own CSS and JavaScript (package data)."""
    return Path(str(files("clinjudge.reports") / "static"))


class _SecurityHeaders(BaseHTTPMiddleware):
    async def dispatch(self, request: Request, call_next: Callable) -> Response:
        response = await call_next(request)
        for name, value in SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
        return response


def _int(value: str | None, default: int = 1) -> int:
    try:
        return max(1, int(value or default))
    except ValueError:
        return default


def create_app(db: str | Path, *, n_boot: int = 1000, items_per_page: int = 100) -> Starlette:
    """The viewer as an ASGI app over one database, opened read-only for each page.

    Args:
        db: The DuckDB run store.
        n_boot: Bootstrap resamples for agreement and audit statistics.
        items_per_page: Rows of a run's item list.
    """
    viewer = Viewer(Path(db), n_boot=n_boot, items_per_page=items_per_page)
    links = Links()

    def page(build: Callable[[Request], str]) -> Callable[[Request], Response]:
        def endpoint(request: Request) -> Response:
            try:
                return HTMLResponse(build(request))
            except DatabaseBusy as exc:
                text = (
                    f"{exc} The viewer only reads; it will show this page as soon as the "
                    "writer (usually a running `judge run`) lets go of the file."
                )
                body = viewer.message(links, "Database busy", text, refresh=BUSY_RETRY_S)
                return HTMLResponse(body, 503, headers={"Retry-After": str(BUSY_RETRY_S)})
            except DatabaseMissing as exc:
                return HTMLResponse(
                    viewer.message(links, "Cannot open the database", str(exc)), 500
                )
            except PageNotFound as exc:
                return HTMLResponse(viewer.message(links, "Not found", str(exc)), 404)

        return endpoint

    def runs(request: Request) -> str:
        q = request.query_params
        return viewer.runs(
            links,
            sort=q.get("sort", "created"),
            desc=q.get("desc", "1" if "sort" not in q else "") not in ("", "0", "false"),
            q=q.get("q", ""),
            status=q.get("status", ""),
            page=_int(q.get("page")),
        )

    def run(request: Request) -> str:
        q = request.query_params
        return viewer.run(
            links,
            request.path_params["run_id"],
            page=_int(q.get("page")),
            show=q.get("show", "all"),
            reason=q.get("reason") or None,
        )

    def item(request: Request) -> str:
        p = request.path_params
        return viewer.item(links, p["run_id"], p["item_id"])

    def audit(request: Request) -> str:
        return viewer.audit(links, request.path_params["run_id"])

    def compare(request: Request) -> str:
        ids = request.query_params.getlist("run")
        if len(ids) < 2:
            raise PageNotFound("pick two or more runs to compare on the runs page")
        return viewer.compare(links, ids, page=_int(request.query_params.get("page")))

    def run_slash(request: Request) -> Response:
        return RedirectResponse(links.run(request.path_params["run_id"]) or "/")

    routes = [
        Route("/", page(runs)),
        Route("/compare", page(compare)),
        Route("/runs/{run_id}", run_slash),
        Route("/runs/{run_id}/", page(run)),
        Route("/runs/{run_id}/audit", page(audit)),
        Route("/runs/{run_id}/items/{item_id:path}", page(item)),
        Mount("/static", StaticFiles(directory=static_dir()), name="static"),
    ]
    app = Starlette(routes=routes, middleware=[Middleware(_SecurityHeaders)])
    app.state.viewer = viewer  # for tests and benchmarks (e.g. to empty its cache)
    return app


def is_loopback(host: str) -> bool:
    """Whether a bind address only accepts connections from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class ViewerServer:
    """Uvicorn serving the viewer in a background thread (for tests and `judge view --open`).

    Args:
        db: The DuckDB run store.
        host: Bind address.
        port: Port (0 picks a free one).
        app: Settings of :func:`create_app` (``n_boot``, ``items_per_page``).
    """

    def __init__(self, db: str | Path, host: str = "127.0.0.1", port: int = 0, **app: Any):
        import uvicorn

        config = uvicorn.Config(
            create_app(db, **app), host=host, port=port, log_level="warning", access_log=False
        )
        self.server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        """Base URL, once started."""
        sock = self.server.servers[0].sockets[0]
        host, port = sock.getsockname()[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> ViewerServer:
        self._thread.start()
        while not self.server.started:
            if not self._thread.is_alive():
                raise OSError("the server did not start (is the port in use?)")
            threading.Event().wait(0.02)
        return self

    def wait(self) -> None:
        """Block until the server stops (Ctrl-C stops it)."""
        try:
            while self._thread.is_alive():
                self._thread.join(timeout=0.5)
        except KeyboardInterrupt:
            self.server.should_exit = True
            raise

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self._thread.join(timeout=10)
