"""The `judge rate serve` web app: physicians rate a run's sampled items in the browser.

Security, in the order a request meets it (SPEC §16):

- the viewer's :class:`RequestGuard` refuses a forged ``Host`` (DNS rebinding) and another
  origin's requests; every response carries the viewer's security headers (a CSP allowing our
  own script file only, no referrer, no framing, no caching);
- a rater's link carries a secret (``?token=``), stored only as its SHA-256; the first visit
  exchanges it for a session cookie (HttpOnly, SameSite=Strict) and redirects to an address
  without it, so it stays out of history, ``Referer`` and logs;
- every page needs the session, and a rater sees only the items assigned to them; every write
  needs the CSRF token bound to the session (derived from the session id, which only the
  cookie holds); request bodies are capped;
- scores are checked against the rubric (``inputs.check_item_scores``) before anything is
  stored; a refusal says why on the page (or in the JSON answer).

Scripts use the JSON door: ``GET /api/assignments`` and ``POST /api/ratings`` with the link's
secret as ``Authorization: Bearer``.

One process holds the DuckDB file (DuckDB allows one writer); requests run in threads, so every
use of the store takes one lock. Each save is one transaction, committed before it is
acknowledged: what a rater was told is saved survives a kill.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, Self
from urllib.parse import parse_qs

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route

from clinjudge.inputs import RatingRefused, check_item_scores
from clinjudge.reports._rating_render import RATE_CSP_HEADER, render
from clinjudge.reports._viewer_app import (
    RequestGuard,
    ThreadedServer,
    _SecurityHeaders,
    static_dir,
)
from clinjudge.rubrics import Rubric
from clinjudge.runs import (
    RunStore,
    StoreError,
    add_session,
    add_token,
    ensure_rating_tables,
    record_save,
    revoke_tokens,
)
from clinjudge.runs.report_reads import (
    item_claims,
    last_comment,
    plan_ratings,
    planned_item_count,
    rater_assignments,
    rater_scores,
    rating_item,
    rating_progress,
    revealed_scores,
    run_final_scores,
    session_holder,
    stored_plan,
    stored_run_rubric,
    token_holder,
)

COOKIE = "clinjudge_rate"
MAX_BODY = 64 * 1024
"""Bytes a request body may have (a page save is a few hundred; a JSON batch of ratings of a
few hundred items fits)."""
MAX_API_ROWS = 2000
MAX_COMMENT = 4000
LEAD = "lead"
RATER = "rater"


def digest(secret: str) -> str:
    """The SHA-256 (hex) under which a secret is stored."""
    return hashlib.sha256(secret.encode()).hexdigest()


def csrf_token(session_id: str) -> str:
    """The CSRF token of a session: derived from its id, which only the HttpOnly cookie
    carries, so a page of another site can neither read nor compute it."""
    return hashlib.sha256(f"clinjudge-csrf:{session_id}".encode()).hexdigest()


class BodyTooLarge(Exception):
    """A request body over :data:`MAX_BODY`."""


class ApiRating(BaseModel):
    """One rating sent to ``POST /api/ratings``."""

    model_config = ConfigDict(extra="forbid")

    item_id: str = Field(min_length=1, max_length=512)
    attribute: str = Field(min_length=1, max_length=128)
    score: float | int | str | None


class Holder(BaseModel):
    """Who a session or link belongs to."""

    run_id: str
    rater_id: str
    role: str


class RatingDesk:
    """The rating server's hold on the store: one writer connection behind one lock.

    Args:
        db: The DuckDB run store.
        run_id: Run id or unique part of it (the run must have a plan: `judge rate plan`).
        reveal_after: Show the judge's scores and other raters' ratings of an item once the
            rater has saved it (training sessions).

    Raises:
        StoreError: The database cannot be opened, or the run has no rating plan.
    """

    def __init__(self, db: str | Path, run_id: str, *, reveal_after: bool = False):
        self.store = RunStore(db)
        try:
            ensure_rating_tables(self.store)
            self.run_id, self.rubric = stored_run_rubric(self.store, run_id)
            plan = stored_plan(self.store, self.run_id)
            if plan is None:
                raise StoreError(
                    f"run {self.run_id} has no rating plan: make one with `judge rate plan "
                    f"--run {self.run_id} --raters NAME,NAME`"
                )
        except BaseException:
            self.store.close()
            raise
        self.raters = plan.raters
        self.reveal_after = reveal_after
        self.lock = threading.Lock()

    def close(self) -> None:
        """Close the store (every save is already committed)."""
        with self.lock:
            self.store.close()

    def issue_link(self, rater_id: str, role: str = RATER) -> str:
        """A new secret for a rater (or the study lead); only its hash is stored."""
        secret = secrets.token_urlsafe(32)
        with self.lock:
            add_token(self.store, digest(secret), self.run_id, rater_id, role)
        return secret

    def revoke(self, rater_id: str) -> int:
        """End every link (and session) of a rater; how many links were live."""
        with self.lock:
            return revoke_tokens(self.store, self.run_id, rater_id)

    def by_token(self, secret: str) -> Holder | None:
        """The holder of a live link's secret (of this run), else None."""
        if not secret or len(secret) > 256:
            return None
        with self.lock:
            row = token_holder(self.store, digest(secret))
        return Holder(**row) if row and row["run_id"] == self.run_id else None

    def open_session(self, secret: str) -> tuple[Holder, str] | None:
        """Exchange a link's secret for a new session id, or None for a dead secret."""
        holder = self.by_token(secret)
        if holder is None:
            return None
        session_id = secrets.token_urlsafe(32)
        with self.lock:
            add_session(self.store, digest(session_id), digest(secret))
        return holder, session_id

    def by_session(self, session_id: str | None) -> Holder | None:
        """The holder of a live session of this run, else None."""
        if not session_id or len(session_id) > 256:
            return None
        with self.lock:
            row = session_holder(self.store, digest(session_id))
        return Holder(**row) if row and row["run_id"] == self.run_id else None

    def assignments(self, rater_id: str) -> list[dict[str, Any]]:
        """A rater's items in order, each with ``done``."""
        with self.lock:
            return rater_assignments(self.store, self.run_id, rater_id)

    def item_view(self, rater_id: str, item_id: str) -> dict[str, Any]:
        """What the rating page of one item shows (never the judge's scores unless revealed)."""
        with self.lock:
            item = rating_item(self.store, self.run_id, item_id) or {}
            claims = (
                item_claims(self.store, self.run_id, item_id)
                if self.rubric.method == "claims"
                else []
            )
            scores = rater_scores(self.store, rater_id, item_id)
            comment = last_comment(self.store, self.run_id, rater_id, item_id)
            revealed = None
            if self.reveal_after and scores:
                revealed = revealed_scores(self.store, self.run_id, item_id, rater_id)
        return {
            "item": item, "claims": claims, "scores": scores, "comment": comment,
            "revealed": revealed,
        }  # fmt: skip

    def save(
        self,
        rater_id: str,
        item_id: str,
        given: dict[str, Any],
        *,
        save_id: str,
        comment: str = "",
        complete: bool = True,
        via: str = "page",
    ) -> tuple[list[dict[str, Any]], bool]:
        """Check and store a rater's scores of one assigned item.

        Returns:
            The stored rows and whether the save was new.

        Raises:
            RatingRefused: The item is not the rater's, or the scores break the rubric.
        """
        with self.lock:
            assigned = {a["item_id"] for a in rater_assignments(self.store, self.run_id, rater_id)}
            if item_id not in assigned:
                raise RatingRefused([f"item {item_id[:80]!r} is not one of your items"])
            stored = rater_scores(self.store, rater_id, item_id)
            scores = check_item_scores(self.rubric, given, complete=complete, stored=stored)
            rows, new = record_save(
                self.store, run_id=self.run_id, rater_id=rater_id, item_id=item_id,
                scores=scores, rubric=self.rubric.name, save_id=save_id,
                comment=comment[:MAX_COMMENT], via=via,
            )  # fmt: skip
        return [r.to_dict() for r in rows], new

    def progress(self) -> dict[str, Any]:
        """The study lead's figures: per rater done/assigned, and agreement between raters
        on the items several have rated (exact agreement and mean absolute difference)."""
        with self.lock:
            per_rater = rating_progress(self.store, self.run_id)
            ratings = plan_ratings(self.store, self.run_id)
            judge = run_final_scores(self.store, self.run_id)
            planned = planned_item_count(self.store, self.run_id)
        return {
            "raters": per_rater,
            "agreement": _pairwise(self.rubric, ratings),
            "widths": _ppi_widths(self.rubric, ratings, judge, planned),
        }


def _pairwise(rubric: Rubric, ratings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per attribute: pairs of raters' scores of the same item, their exact agreement share
    and mean absolute difference."""
    by_unit: dict[tuple[str, str], list[float]] = {}
    for r in ratings:
        if r["score"] is not None:
            by_unit.setdefault((r["attribute"], r["item_id"]), []).append(float(r["score"]))
    out = []
    for attribute in rubric.attributes:
        pairs = [
            (a, b)
            for (key, _), scores in by_unit.items()
            if key == attribute.key
            for i, a in enumerate(scores)
            for b in scores[i + 1 :]
        ]
        items = sum(1 for (key, _), s in by_unit.items() if key == attribute.key and len(s) > 1)
        out.append({
            "attribute": attribute.name,
            "items": items,
            "pairs": len(pairs),
            "exact": sum(a == b for a, b in pairs) / len(pairs) if pairs else None,
            "mad": sum(abs(a - b) for a, b in pairs) / len(pairs) if pairs else None,
        })  # fmt: skip
    return out


PLAN_CORRELATION = 0.7
"""The judge-physician correlation the plan's expected widths assume (`judge audit plan`'s
default)."""


def _ppi_widths(
    rubric: Rubric,
    ratings: list[dict[str, Any]],
    judge: list[dict[str, Any]],
    planned: int,
) -> list[dict[str, Any]]:
    """Per agreement attribute, pooled over the run's items: the 95% PPI++ half-width of the
    physicians' mean with the ratings so far, and the half-width the plan's sample should give
    (judge and physicians correlated at :data:`PLAN_CORRELATION`). An item's label is the mean
    of its raters' scores, as in audits."""
    import statistics

    from clinjudge.analysis import expected_half_widths, ppi_means

    out = []
    for attribute in rubric.attributes:
        if not attribute.agreement:
            continue
        key = attribute.key
        scores = {r["item_id"]: r["score"] for r in judge if r["attribute"] == key}
        scores = {i: float(s) for i, s in scores.items() if s is not None}
        rated: dict[str, list[float]] = {}
        for r in ratings:
            if r["attribute"] == key and r["score"] is not None and r["item_id"] in scores:
                rated.setdefault(r["item_id"], []).append(float(r["score"]))
        labels = [sum(v) / len(v) for v in rated.values()]
        predictions = [scores[i] for i in rated]
        unlabelled = [s for i, s in scores.items() if i not in rated]
        now = ppi_means([labels], [predictions], [unlabelled])[0]
        half = None
        if now.ci_low is not None and now.ci_high is not None:
            half = (now.ci_high - now.ci_low) / 2
        expected = None
        if len(scores) > 1 and planned > 1:
            sd = statistics.stdev(scores.values())
            expected = expected_half_widths(
                sd, min(planned, len(scores)), max(len(scores) - planned, 0), PLAN_CORRELATION
            )[0]
        out.append({
            "attribute": attribute.name, "rated": len(labels), "planned": planned,
            "now": half, "expected": expected,
        })  # fmt: skip
    return out


async def read_body(request: Request) -> bytes:
    """The request body, refused past :data:`MAX_BODY` (declared or streamed)."""
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > MAX_BODY):
        raise BodyTooLarge
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY:
            raise BodyTooLarge
    return body


def _wants_json(request: Request) -> bool:
    return "application/json" in request.headers.get("accept", "")


def _form_scores(fields: dict[str, list[str]]) -> dict[str, Any]:
    """``score.KEY`` fields; the last value wins (a checkbox follows its hidden 0)."""
    return {k[6:]: v[-1] for k, v in fields.items() if k.startswith("score.")}


def _bearer(request: Request) -> str:
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    return value.strip() if scheme.lower() == "bearer" else ""


def create_rating_app(desk: RatingDesk, *, host: str = "127.0.0.1") -> Starlette:
    """The rating pages and JSON API as an ASGI app over one :class:`RatingDesk`.

    Args:
        desk: The store, run and rubric being rated.
        host: The address or name the server listens on (accepted in ``Host`` headers).
    """
    rubric = desk.rubric

    def page(template: str, status: int = 200, **context: Any) -> HTMLResponse:
        body = render(template, rubric=rubric, **context)
        return HTMLResponse(body, status, headers={"Content-Security-Policy": RATE_CSP_HEADER})

    def message(title: str, text: str, status: int, refresh: str | None = None) -> HTMLResponse:
        return page("rate_message.html", status, title=title, text=text, refresh=refresh)

    def holder_of(request: Request) -> Holder | None:
        return desk.by_session(request.cookies.get(COOKIE))

    def signed_out(request: Request) -> Response:
        if "r" not in request.query_params:
            # A link followed from another site: the browser withholds a SameSite=Strict
            # cookie on that navigation; our own page's refresh is same-site and carries it.
            return message("Signing in", "One moment…", 200, refresh="/rate?r=1")
        return message(
            "Not signed in",
            "Open the link you were given (it signs you in), or ask the study lead for a new one.",
            401,
        )

    def home(request: Request) -> Response:
        token = request.query_params.get("token")
        if token is not None:
            opened = desk.open_session(token)
            if opened is None:
                return message(
                    "Link not valid",
                    "This link is not valid (revoked, or copied incompletely). Ask the study "
                    "lead for a new one.",
                    403,
                )
            _, session_id = opened
            # 303 to an address without the secret: not kept in history, Referer or logs.
            response = RedirectResponse("/rate", 303)
            response.set_cookie(COOKIE, session_id, httponly=True, samesite="strict", path="/")
            return response
        signed_in = holder_of(request)
        if signed_in is None:
            return signed_out(request)
        if signed_in.role == LEAD:
            return RedirectResponse("/rate/progress", 303)
        items = desk.assignments(signed_in.rater_id)
        undone = next((n for n, a in enumerate(items, 1) if not a["done"]), None)
        return RedirectResponse(f"/rate/items/{undone}" if undone else "/rate/items", 303)

    def overview(request: Request) -> Response:
        holder = holder_of(request)
        if holder is None or holder.role != RATER:
            return signed_out(request)
        items = desk.assignments(holder.rater_id)
        return page(
            "rate_list.html", rater=holder.rater_id, items=items,
            done=sum(bool(a["done"]) for a in items),
        )  # fmt: skip

    def item_page(
        holder: Holder, session_id: str, n: int, items: list[dict[str, Any]], *,
        status: int = 200, errors: list[str] | None = None, given: dict[str, Any] | None = None,
        comment: str | None = None,
    ) -> HTMLResponse:  # fmt: skip
        item_id = items[n - 1]["item_id"]
        view = desk.item_view(holder.rater_id, item_id)
        scores = given if given is not None else {
            k: ("na" if v is None else f"{v:g}") for k, v in view["scores"].items()
        }  # fmt: skip
        return page(
            "rate_item.html", status, rater=holder.rater_id, n=n, total=len(items),
            done=sum(bool(a["done"]) for a in items), item_id=item_id, view=view,
            scores=scores, comment=view["comment"] if comment is None else comment,
            errors=errors or [], csrf=csrf_token(session_id), save_id=uuid.uuid4().hex,
            saved=bool(items[n - 1]["done"]),
        )  # fmt: skip

    async def item(request: Request) -> Response:
        session_id = request.cookies.get(COOKIE, "")
        holder = desk.by_session(session_id)
        if holder is None or holder.role != RATER:
            if request.method == "POST":
                return _refused(request, 401, ["not signed in: open your link again"])
            return signed_out(request)
        items = desk.assignments(holder.rater_id)
        n = request.path_params["n"]
        if not 1 <= n <= len(items):
            return message("Not found", f"You have items 1 to {len(items)}.", 404)
        if request.method == "GET":
            return item_page(holder, session_id, n, items)
        try:
            body = await read_body(request)
        except BodyTooLarge:
            return _refused(request, 413, [f"request too large (at most {MAX_BODY} bytes)"])
        try:
            fields = parse_qs(body.decode("utf-8"), keep_blank_values=True, max_num_fields=200)
        except (UnicodeDecodeError, ValueError):
            return _refused(request, 400, ["the form could not be read"])
        sent = request.headers.get("x-csrf-token") or (fields.get("csrf") or [""])[-1]
        if not hmac.compare_digest(sent.encode(), csrf_token(session_id).encode()):
            return _refused(request, 403, ["the page's security token is missing or stale: reload"])
        given = _form_scores(fields)
        comment = (fields.get("comment") or [""])[-1]
        save_id = (fields.get("save_id") or [""])[-1][:64] or uuid.uuid4().hex
        item_id = items[n - 1]["item_id"]
        try:
            # The save id is the rater's own: another rater's retry can never match it.
            rows, _ = desk.save(
                holder.rater_id, item_id, given, save_id=f"{holder.rater_id}:{save_id}",
                comment=comment,
            )  # fmt: skip
        except RatingRefused as exc:
            if _wants_json(request):
                return JSONResponse({"saved": False, "errors": exc.problems}, 400)
            return item_page(
                holder, session_id, n, items, status=400, errors=exc.problems, given=given,
                comment=comment,
            )  # fmt: skip
        following = n + 1 if n < len(items) else None
        nxt = f"/rate/items/{following}" if following else "/rate/items"
        if _wants_json(request):
            return JSONResponse({"saved": True, "rows": rows, "next": nxt}, 201)
        return RedirectResponse(nxt, 303)

    def progress(request: Request) -> Response:
        holder = holder_of(request)
        if holder is None or holder.role != LEAD:
            if holder is not None:
                return message("Not allowed", "The progress page is the study lead's.", 403)
            return signed_out(request)
        figures = desk.progress()
        return page("rate_progress.html", run_id=desk.run_id, **figures)

    def api_holder(request: Request) -> Holder | None:
        holder = desk.by_token(_bearer(request))
        return holder if holder is not None and holder.role == RATER else None

    def api_assignments(request: Request) -> Response:
        holder = api_holder(request)
        if holder is None:
            return _api_error(401, ["give your link's token as Authorization: Bearer TOKEN"])
        items = desk.assignments(holder.rater_id)
        return JSONResponse({
            "run_id": desk.run_id, "rater_id": holder.rater_id, "rubric": rubric.name,
            "attributes": rubric.keys,
            "items": [{"item_id": a["item_id"], "done": bool(a["done"])} for a in items],
        })  # fmt: skip

    async def api_ratings(request: Request) -> Response:
        holder = api_holder(request)
        if holder is None:
            return _api_error(401, ["give your link's token as Authorization: Bearer TOKEN"])
        try:
            body = await read_body(request)
        except BodyTooLarge:
            return _api_error(413, [f"request too large (at most {MAX_BODY} bytes)"])
        try:
            data = json.loads(body)
            listed = data if isinstance(data, list) else [data]
            if len(listed) > MAX_API_ROWS:
                return _api_error(413, [f"at most {MAX_API_ROWS} ratings per request"])
            ratings = [ApiRating.model_validate(r) for r in listed]
        except (ValueError, ValidationError) as exc:
            text = str(exc).splitlines()[0] if str(exc) else "invalid JSON"
            return _api_error(400, [f"body: {text}; send {{item_id, attribute, score}} or a list"])
        if not ratings:
            return _api_error(400, ["no ratings in the body"])
        by_item: dict[str, dict[str, Any]] = {}
        for r in ratings:
            if r.attribute in by_item.setdefault(r.item_id, {}):
                return _api_error(400, [f"{r.item_id}: {r.attribute} given twice"])
            by_item[r.item_id][r.attribute] = r.score
        key = request.headers.get("idempotency-key", "")[:128] or uuid.uuid4().hex
        stored: list[dict[str, Any]] = []
        problems: list[str] = []
        assigned = {a["item_id"] for a in desk.assignments(holder.rater_id)}
        foreign = [i for i in by_item if i not in assigned]
        if foreign:  # unknown items and other raters' items alike: nothing to tell apart
            return _api_error(403, [f"item {i[:80]!r} is not one of your items" for i in foreign])
        for item_id, given in by_item.items():
            try:
                check_item_scores(rubric, given, complete=False)
            except RatingRefused as exc:
                problems += [f"{item_id[:80]}: {p}" for p in exc.problems]
        if problems:  # nothing is stored unless every rating is valid
            return _api_error(422, problems)
        for item_id, given in by_item.items():
            save_id = f"{holder.rater_id}:api:" + digest(f"{key}\0{item_id}")[:32]
            try:
                rows, _ = desk.save(
                    holder.rater_id, item_id, given, save_id=save_id, complete=False, via="api"
                )
            except RatingRefused as exc:  # a gate against the rater's stored scores
                return _api_error(422, [f"{item_id[:80]}: {p}" for p in exc.problems])
            stored += rows
        return JSONResponse({"ratings": stored}, 201)

    routes = [
        Route("/", lambda request: RedirectResponse("/rate", 303)),
        Route("/rate", home),
        Route("/rate/items", overview),
        Route("/rate/items/{n:int}", item, methods=["GET", "POST"]),
        Route("/rate/progress", progress),
        Route("/api/assignments", api_assignments),
        Route("/api/ratings", api_ratings, methods=["POST"]),
        Mount("/static", _static_app(), name="static"),
    ]
    middleware = [Middleware(_SecurityHeaders), Middleware(RequestGuard, host=host)]
    app = Starlette(routes=routes, middleware=middleware)
    app.state.desk = desk
    return app


def _static_app() -> Callable[..., Any]:
    from starlette.staticfiles import StaticFiles

    return StaticFiles(directory=static_dir())


def _api_error(status: int, problems: list[str]) -> JSONResponse:
    return JSONResponse({"errors": problems}, status)


def _refused(request: Request, status: int, problems: list[str]) -> Response:
    if _wants_json(request):
        return JSONResponse({"saved": False, "errors": problems}, status)
    body = render("rate_message.html", title="Not saved", text="; ".join(problems), refresh=None)
    return HTMLResponse(body, status)


def server_note_path(db: str | Path) -> Path:
    """The note beside a database saying a rating server holds it (read by the store's
    "database is in use" message)."""
    path = Path(db)
    return path.with_name(path.name + ".rating-server")


class RatingServer(ThreadedServer):
    """Uvicorn serving the rating pages in a background thread; while it runs, a note beside
    the database names it, so another command refused the file can say who holds it.

    Args:
        desk: The store and run being rated.
        host: Bind address.
        port: Port (0 picks a free one).

    Raises:
        ListenError: The address or port cannot be listened on.
    """

    def __init__(self, desk: RatingDesk, host: str = "127.0.0.1", port: int = 0):
        self.desk = desk
        super().__init__(create_rating_app(desk, host=host), host, port)

    def link(self, secret: str) -> str:
        """A rater's link: the server's address with the secret."""
        return f"{self.url}/rate?token={secret}"

    def __enter__(self) -> Self:
        super().__enter__()
        note = server_note_path(self.desk.store.path)
        fd = os.open(note, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as handle:
            json.dump({"pid": os.getpid(), "url": self.url, "run_id": self.desk.run_id}, handle)
        return self

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        server_note_path(self.desk.store.path).unlink(missing_ok=True)


def issue_link(db: str | Path, run_id: str, rater_id: str) -> str:
    """A new link secret for a rater of a run's plan (``lead``: the progress page), made
    while no rating server holds the database.

    Args:
        db: The DuckDB run store.
        run_id: Run id or unique part of it.
        rater_id: A rater of the plan, or ``lead``.

    Raises:
        StoreError: The database is held (a running server), or the run has no plan.
        RatingRefused: The rater is not in the plan.
    """
    desk = RatingDesk(db, run_id)
    try:
        if rater_id != LEAD and rater_id not in desk.raters:
            raise RatingRefused([f"{rater_id!r} is not a rater of the plan ({desk.raters})"])
        return desk.issue_link(rater_id, LEAD if rater_id == LEAD else RATER)
    finally:
        desk.close()


def revoke_links(db: str | Path, run_id: str, rater_id: str) -> int:
    """End every link and session of a rater; how many links were live.

    Args:
        db: The DuckDB run store.
        run_id: Run id or unique part of it.
        rater_id: The rater (or ``lead``).

    Raises:
        StoreError: The database is held (a running server), or the run has no plan.
    """
    desk = RatingDesk(db, run_id)
    try:
        return desk.revoke(rater_id)
    finally:
        desk.close()
