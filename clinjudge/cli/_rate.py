"""`judge rate plan|serve|link|revoke`: physicians rate a run's items in the browser."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from clinjudge.cli._common import EXIT_USAGE, StoreDbOption, console, fail
from clinjudge.errors import UserError
from clinjudge.runs import DEFAULT_DB

rate_app = typer.Typer(
    help="Physicians rate a run's items in the browser: plan, serve, link, revoke.",
    no_args_is_help=True,
)

RunOption = Annotated[str, typer.Option(help="The run whose items are rated (id or unique part).")]


def _read_items(path: Path) -> list[str]:
    """Item ids from a JSONL file of ``{"item_id"}`` or ``{"vendor", "item_id"}`` lines (what
    `judge audit plan --out` writes)."""
    from clinjudge.inputs import audit_item_id

    items = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        fail(f"{path}: cannot read: {exc.strerror or exc}", EXIT_USAGE)
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            item_id = str(record["item_id"])
        except (ValueError, KeyError, TypeError):
            fail(f"{path}:{number}: expected a JSON object with item_id", EXIT_USAGE)
        vendor = record.get("vendor")
        items.append(audit_item_id(str(vendor), item_id) if vendor else item_id)
    return items


@rate_app.command("plan")
def plan_command(
    run: RunOption,
    raters: Annotated[str, typer.Option(help="Rater names, comma-separated: alice,bob.")],
    size: Annotated[
        int | None, typer.Option(min=1, help="Items to sample (default: every item).")
    ] = None,
    overlap: Annotated[
        str,
        typer.Option(
            help="Raters per item (2), or a share of items every rater rates (20%); "
            "overlap gives inter-rater agreement."
        ),
    ] = "2",
    strata: Annotated[
        str, typer.Option(help="Sample in proportion within: score (quartiles) or vendor.")
    ] = "",
    seed: Annotated[int, typer.Option(help="Seed of the sample and the assignment.")] = 0,
    items: Annotated[
        Path | None,
        typer.Option(help="Rate exactly these items (JSONL; `judge audit plan --out` writes it)."),
    ] = None,
    replace: Annotated[
        bool, typer.Option(help="Replace the run's plan (saved ratings are kept).")
    ] = False,
    db: StoreDbOption = str(DEFAULT_DB),
) -> None:
    """Fix which items each rater rates (seeded, stored in the database)."""
    from clinjudge.runs import RunStore, plan_rating

    chosen = _read_items(items) if items is not None else None
    names = [r.strip() for r in raters.split(",")]
    overlap = overlap if len(names) > 1 or overlap != "2" else "1"
    try:
        with RunStore(db) as store:
            plan, rows = plan_rating(
                store, run, names, size=size, overlap=overlap, strata=strata, seed=seed,
                items=chosen, replace=replace,
            )  # fmt: skip
    except UserError as exc:
        fail(str(exc), EXIT_USAGE)
    per_rater: dict[str, int] = {}
    for rater, _, _ in rows:
        per_rater[rater] = per_rater.get(rater, 0) + 1
    console.print(
        f"rating plan of run {plan.run_id}: {plan.size} item(s), overlap {plan.overlap}, "
        f"seed {plan.seed}" + (f", strata {plan.strata}" if plan.strata else "")
    )
    for rater, count in per_rater.items():
        sys.stdout.write(f"{rater}\t{count} item(s)\n")
    console.print(f"next: judge rate serve --run {plan.run_id} --db {escape(db)}")


@rate_app.command("serve")
def serve_command(
    run: RunOption,
    db: StoreDbOption = str(DEFAULT_DB),
    host: Annotated[
        str,
        typer.Option(
            help="Address to listen on. Anything but loopback lets other machines reach these "
            "pages, which show clinical text."
        ),
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port, 1-65535 (0 picks a free one).")] = 8766,
    reveal_after: Annotated[
        bool,
        typer.Option(
            help="After a rater saves an item, show the judge's scores and the other raters' "
            "ratings of it (training sessions; blind otherwise)."
        ),
    ] = False,
) -> None:
    """Serve the rating pages; print each rater's link (a new secret each start) and the study
    lead's progress link. The database stays with the server until it stops."""
    from clinjudge.reports import RatingDesk, RatingServer, is_loopback

    if not 0 <= port <= 65535:
        fail(f"--port {port}: a port must be 1-65535 (0 picks a free one)", EXIT_USAGE)
    if not Path(db).exists():
        fail(f"{db}: no such database", EXIT_USAGE)
    if not is_loopback(host):
        console.print(
            f"[bold yellow]warning:[/] listening on {escape(host)}: other machines can reach "
            "these pages, which show clinical text (PHI); only link holders get in. Use it "
            "on a trusted network (plain HTTP)."
        )
    try:
        desk = RatingDesk(db, run, reveal_after=reveal_after)
    except UserError as exc:
        fail(str(exc), EXIT_USAGE)
    try:
        server = RatingServer(desk, host=host, port=port)
        with server:
            console.print(f"judge rate: {server.url}/ (Ctrl-C to stop); links (keep them secret):")
            # Plain writes, tab-separated for scripts (rich would expand the tabs), flushed
            # at once even when stdout is a pipe or a file.
            for rater in desk.raters:
                sys.stdout.write(f"{rater}\t{server.link(desk.issue_link(rater))}\n")
            lead = server.link(desk.issue_link("lead", role="lead"))
            sys.stdout.write(f"(study lead)\t{lead}\n")
            sys.stdout.flush()
            server.wait()
    except OSError as exc:  # ListenError: the port is in use, the host unknown, ...
        fail(f"cannot listen on {host}:{port}: {exc}", EXIT_USAGE)
    except KeyboardInterrupt:
        console.print("stopped; every saved rating is in the database")
    finally:
        desk.close()


@rate_app.command("link")
def link_command(
    run: RunOption,
    rater: Annotated[str, typer.Option(help="The rater (or 'lead' for the progress page).")],
    base_url: Annotated[
        str, typer.Option(help="The server's address as raters reach it.")
    ] = "http://127.0.0.1:8766",
    db: StoreDbOption = str(DEFAULT_DB),
) -> None:
    """Make another link for a rater (while the server is stopped: it holds the database)."""
    from clinjudge.reports import issue_link

    try:
        secret = issue_link(db, run, rater)
    except UserError as exc:
        fail(str(exc), EXIT_USAGE)
    sys.stdout.write(f"{rater}\t{base_url.rstrip('/')}/rate?token={secret}\n")


@rate_app.command("revoke")
def revoke_command(
    run: RunOption,
    rater: Annotated[str, typer.Option(help="The rater whose links and sessions end.")],
    db: StoreDbOption = str(DEFAULT_DB),
) -> None:
    """End every link and session of a rater (their saved ratings stay)."""
    from clinjudge.reports import revoke_links

    try:
        count = revoke_links(db, run, rater)
    except UserError as exc:
        fail(str(exc), EXIT_USAGE)
    console.print(f"revoked {count} link(s) of {escape(rater)}")
