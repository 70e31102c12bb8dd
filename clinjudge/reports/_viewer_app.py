"""The `judge view` web app (Starlette): routes, security headers, the Host and cross-site
checks, busy-database handling, and the server thread."""

from __future__ import annotations

import errno
import ipaddress
import re
import socket
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from importlib.resources import files
from pathlib import Path
from typing import Any, Self

from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from clinjudge.reports._viewer_links import ITEM_PARAM, Links
from clinjudge.reports._viewer_pages import BadRequest, PageNotFound, Viewer
from clinjudge.reports._viewer_render import CSP_HEADER
from clinjudge.reports._viewer_store import DatabaseBusy, DatabaseMissing, SnapshotReader

BUSY_RETRY_S = 3
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP_HEADER,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
    # No other site's window keeps a handle on a viewer tab, and no other site may embed the
    # viewer's responses (images, scripts) in its own pages.
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
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


_HOST = re.compile(r"(\[[0-9a-f:.]+\]|[a-z0-9_.-]+)(?::([0-9]{1,5}))?")


def split_host(value: str) -> tuple[str, int] | None:
    """Name and port of a ``Host`` header (port 80 when absent); None when malformed.

    An IPv6 address keeps its brackets (``[::1]``); names are lower-cased.
    """
    match = _HOST.fullmatch(value.strip().lower())
    if match is None:
        return None
    return match.group(1), int(match.group(2) or 80)


def _host_name(address: str) -> str:
    """An address as a ``Host`` header names it: lower case, IPv6 in brackets."""
    address = address.strip().lower()
    return f"[{address}]" if ":" in address and not address.startswith("[") else address


def _ip(name: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address a name spells (an IPv4 address mapped into IPv6 as IPv4), else None."""
    try:
        ip = ipaddress.ip_address(name.strip("[]"))
    except ValueError:
        return None
    mapped = getattr(ip, "ipv4_mapped", None)  # a dual-stack socket reports ::ffff:a.b.c.d
    return mapped or ip


class RequestGuard:
    """Refuse requests that a web page on another site made the browser send.

    DNS rebinding: a page on ``evil.example`` whose name then resolves to 127.0.0.1 reaches the
    viewer as its own origin and could read every page; the browser still sends
    ``Host: evil.example``, so only the viewer's own names are answered (421 otherwise):
    ``localhost``, a loopback address, the address the connection arrived at, and the name given
    to ``--host``, each with the port the server listens on. A request that another origin's
    script made (an ``Origin`` header that is not the viewer's) or that ``Sec-Fetch-Site`` marks
    as from another site gets 403, except a plain navigation (a link followed from a notebook or
    another site), which shows the other site nothing.

    Args:
        app: The app it guards.
        host: The address or name the server was told to listen on.
    """

    def __init__(self, app: ASGIApp, host: str = "127.0.0.1"):
        self.app = app
        self.names = {"localhost", _host_name(host)}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            refusal = self.refusal(scope)
            if refusal is not None:
                await PlainTextResponse(refusal[1] + "\n", refusal[0])(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def refusal(self, scope: Scope) -> tuple[int, str] | None:
        """The status and one-line reason to refuse a request with, or None to serve it."""
        headers = Headers(scope=scope)
        hosts = headers.getlist("host")
        parsed = split_host(hosts[0]) if len(hosts) == 1 else None
        if parsed is None:
            return 400, "Bad Request: one valid Host header is required"
        if not self._known(*parsed, scope.get("server")):
            return 421, (
                "Misdirected Request: this viewer answers only at its own address "
                "(the one `judge view` printed)"
            )
        origin = headers.get("origin")
        if origin is not None and not _same_origin(origin, parsed):
            return 403, "Forbidden: a page of another origin asked for this"
        site = headers.get("sec-fetch-site", "")
        if site in ("cross-site", "same-site") and not _navigation(scope, headers):
            # same-site too: another local server (localhost:3000) is same-site, not ours.
            return 403, "Forbidden: a page of another site asked for this"
        return None

    def _known(self, name: str, port: int, server: Any) -> bool:
        local = (str(server[0]), server[1]) if server else ("", None)
        if local[1] is not None and port != local[1]:
            return False
        if name in self.names or name == _host_name(local[0]):
            return True
        # An address rather than a name: no DNS involved, so no rebinding. Loopback, or the
        # address the connection came in on (another machine, with --host 0.0.0.0).
        ip = _ip(name)
        return ip is not None and (ip.is_loopback or ip == _ip(local[0]))


def _same_origin(origin: str, host: tuple[str, int]) -> bool:
    """Whether an ``Origin`` header is the viewer's own (http, the same name and port)."""
    scheme, sep, authority = origin.partition("://")
    return scheme.lower() == "http" and bool(sep) and split_host(authority) == host


def _navigation(scope: Scope, headers: Headers) -> bool:
    """A top-level GET navigation (a followed link): the other site cannot read the page."""
    return (
        scope.get("method") in ("GET", "HEAD")
        and headers.get("sec-fetch-mode") == "navigate"
        and headers.get("sec-fetch-dest") == "document"
    )


def _int(value: str | None, default: int = 1) -> int:
    try:
        return max(1, int(value or default))
    except ValueError:
        return default


def _listed(request: Request) -> dict[str, list[str]]:
    """Every query parameter with all its values (checked by the page that reads them)."""
    q = request.query_params
    return {key: q.getlist(key) for key in q}


def create_app(
    db: str | Path, *, n_boot: int = 1000, items_per_page: int = 100, host: str = "127.0.0.1"
) -> Starlette:
    """The viewer as an ASGI app over one database, read through a private copy of it.

    Args:
        db: The DuckDB run store.
        n_boot: Bootstrap resamples for agreement and audit statistics.
        items_per_page: Rows of a run's item list.
        host: The address or name the server listens on (accepted in ``Host`` headers).
    """
    viewer = Viewer(
        Path(db), n_boot=n_boot, items_per_page=items_per_page, snapshots=SnapshotReader(Path(db))
    )
    links = Links()

    def page(build: Callable[[Request], str]) -> Callable[[Request], Response]:
        def endpoint(request: Request) -> Response:
            try:
                return HTMLResponse(build(request))
            except DatabaseBusy as exc:
                text = (
                    f"Database busy, try again in a few seconds: {exc}. The viewer only reads; "
                    "it shows this page once the writer (usually a running `judge run`) lets "
                    "go of the file."
                )
                body = viewer.message(links, "Database busy", text, refresh=BUSY_RETRY_S)
                return HTMLResponse(body, 503, headers={"Retry-After": str(BUSY_RETRY_S)})
            except BadRequest as exc:
                return HTMLResponse(viewer.message(links, "Cannot show this", str(exc)), 400)
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
        params = _listed(request)
        return viewer.run(
            links, request.path_params["run_id"], page=_int(q.get("page")), params=params
        )

    def item(request: Request) -> str:
        p = request.path_params
        return viewer.item(links, p["run_id"], p["item_id"], params=_listed(request))

    def item_named(request: Request) -> str:
        params = _listed(request)
        named = params.pop(ITEM_PARAM, [])
        if len(named) != 1:
            raise BadRequest(f"name one item: ?{ITEM_PARAM}=ID")
        return viewer.item(links, request.path_params["run_id"], named[0], params=params)

    def audit(request: Request) -> str:
        return viewer.audit(links, request.path_params["run_id"])

    def compare(request: Request) -> str:
        ids = list(dict.fromkeys(r.strip() for r in request.query_params.getlist("run")))
        ids = [r for r in ids if r]
        if len(ids) < 2:
            raise BadRequest(
                "pick two or more different runs to compare (tick them on the runs page)"
            )
        q = request.query_params
        desc = q.get("desc", "1").strip().lower()
        if desc not in ("1", "0", "true", "false"):
            raise BadRequest(f"desc={q.get('desc')!r}: say 1 or 0")
        return viewer.compare(
            links, ids, page=_int(q.get("page")), sort=q.get("sort", ""),
            desc=desc in ("1", "true"),
        )  # fmt: skip

    def run_slash(request: Request) -> Response:
        return RedirectResponse(links.run(request.path_params["run_id"]) or "/")

    routes = [
        Route("/", page(runs)),
        Route("/compare", page(compare)),
        Route("/runs/{run_id}", run_slash),
        Route("/runs/{run_id}/", page(run)),
        Route("/runs/{run_id}/audit", page(audit)),
        Route("/runs/{run_id}/items/{item_id:path}", page(item)),
        Route("/runs/{run_id}/item", page(item_named)),
        Mount("/static", StaticFiles(directory=static_dir()), name="static"),
    ]

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            viewer.close()  # the copy of the database holds clinical text: delete it

    middleware = [Middleware(_SecurityHeaders), Middleware(RequestGuard, host=host)]
    app = Starlette(routes=routes, middleware=middleware, lifespan=lifespan)
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


class ListenError(OSError):
    """The server cannot listen on the address and port asked for (the reason in words)."""


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port``, so that a refusal says why (uvicorn would only exit).

    Args:
        host: Address or name to listen on.
        port: Port, 0 to 65535 (0 picks a free one).

    Raises:
        ListenError: The port is out of range or in use, the name unknown, or binding refused.
    """
    if not 0 <= port <= 65535:
        raise ListenError(f"port {port} is out of range: a port is 1-65535 (0 picks a free one)")
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as exc:
        raise ListenError(f"unknown host {host!r} ({exc.strerror})") from exc
    sock = socket.socket(family, kind, proto)
    try:
        # As uvicorn does: a restarted viewer may reuse the port at once. On Linux and macOS
        # this never lets two servers listen on one port.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise ListenError(f"port {port} is in use (another `judge view`?)") from exc
        if exc.errno == errno.EACCES:
            raise ListenError(f"not allowed to listen on port {port}: {exc.strerror}") from exc
        raise ListenError(exc.strerror or str(exc)) from exc
    return sock


class ThreadedServer:
    """Uvicorn serving an ASGI app in a background thread, on a socket bound up front (so a
    busy port fails here, in one line).

    Args:
        app: The ASGI app.
        host: Bind address.
        port: Port (0 picks a free one).

    Raises:
        ListenError: The address or port cannot be listened on.
    """

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0):
        import uvicorn

        self._socket = listen(host, port)
        config = uvicorn.Config(app, log_level="warning", access_log=False)
        self.server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self._socket]}, daemon=True
        )

    @property
    def url(self) -> str:
        """Base URL."""
        host, port = self._socket.getsockname()[:2]
        return f"http://{_host_name(host)}:{port}"

    def __enter__(self) -> Self:
        self._thread.start()
        while not self.server.started:
            if not self._thread.is_alive():
                self._socket.close()
                raise ListenError("the server did not start")
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
        self._socket.close()


class ViewerServer(ThreadedServer):
    """The viewer in a background thread (for tests and `judge view --open`).

    Args:
        db: The DuckDB run store.
        host: Bind address.
        port: Port (0 picks a free one).
        app: Settings of :func:`create_app` (``n_boot``, ``items_per_page``).

    Raises:
        ListenError: The address or port cannot be listened on.
    """

    def __init__(self, db: str | Path, host: str = "127.0.0.1", port: int = 0, **app: Any):
        super().__init__(create_app(db, host=host, **app), host, port)
