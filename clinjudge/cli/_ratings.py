"""`judge ratings import|list`: physicians' ratings in the run store."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from clinjudge._util.pandas_import import without_pandas
from clinjudge.cli._common import EXIT_USAGE, StoreDbOption, console, fail, open_store, stdout
from clinjudge.inputs import InputError
from clinjudge.runs import DEFAULT_DB, ratings_overview

ratings_app = typer.Typer(help="Import and list physicians' ratings.", no_args_is_help=True)


@ratings_app.command("import")
@without_pandas()  # the ratings go to DuckDB through Arrow, without pandas (#39)
def import_command(
    file: Annotated[
        Path,
        typer.Argument(
            help="Ratings: JSONL, CSV or Parquet with item_id, rater_id, attribute, "
            "score (one row per rating); an audit's items also by vendor + item_id."
        ),
    ],
    rubric: Annotated[str, typer.Option(help="Built-in rubric name or rubric file.")] = "pdsqi9",
    db: StoreDbOption = str(DEFAULT_DB),
) -> None:
    """Validate ratings against the rubric and store them (re-importing replaces them)."""
    from clinjudge import import_ratings

    try:
        summary = import_ratings(file, rubric=rubric, db=db)
    except InputError as exc:
        fail(f"{file}: ratings not imported, nothing was written\n{exc}", EXIT_USAGE)
    console.print(
        f"imported {summary.rows} rating(s) of {summary.items} item(s) by {summary.raters} "
        f"rater(s) ({summary.rubric}): {summary.new} new, {summary.changed} changed, "
        f"{summary.unchanged} unchanged"
    )


@ratings_app.command("list")
def list_command(db: StoreDbOption = str(DEFAULT_DB)) -> None:
    """Stored ratings per rubric and rater."""
    with open_store(db, read_only=True) as store:
        rows = ratings_overview(store)
    if not rows:
        console.print(f"no human ratings in {db}; add some with `judge ratings import FILE`")
        return
    table = Table()
    for column in ("rubric", "rater", "items", "ratings", "null scores", "last import"):
        table.add_column(column)
    for row in rows:
        table.add_row(
            row["rubric"] or "",
            row["rater_id"],
            str(row["items"]),
            str(row["ratings"]),
            str(row["null_scores"]),
            str(row["last_import"])[:19],
        )
    stdout.print(table)


@ratings_app.command("export")
def export_command(
    out: Annotated[
        Path,
        typer.Argument(help="File to write: .jsonl, .csv or .parquet (the import format)."),
    ],
    db: StoreDbOption = str(DEFAULT_DB),
) -> None:
    """Write every stored rating (imported or rated in `judge rate`) in the import format:
    item_id, rater_id, attribute, score."""
    from clinjudge.errors import UserError
    from clinjudge.runs import all_human_ratings, check_output_file, infer_format, write_rows

    try:
        fmt = infer_format(out)
        check_output_file(out)
        with open_store(db, read_only=True) as store:
            rows = all_human_ratings(store)
            if not rows:
                fail(f"no human ratings in {db}", EXIT_USAGE)
            count = write_rows(store, rows, out, fmt)
    except UserError as exc:
        fail(str(exc), EXIT_USAGE)
    console.print(f"wrote {count} rating(s) to {out}")
