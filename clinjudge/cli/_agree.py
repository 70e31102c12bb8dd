"""`judge agree`, `judge compare` and `judge report`: how far judges agree with physicians."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from clinjudge.cli._common import EXIT_USAGE, console, fail, open_store, stdout
from clinjudge.judges import SIMULATED_NOTICE
from clinjudge.runs import (
    DEFAULT_DB,
    SORT_COLUMNS,
    AgreementError,
    InputError,
    StoreError,
    agreement_for_file,
    agreement_for_run,
    block_summary,
    compare_runs,
    write_report,
)
from clinjudge.runs._html_report import (
    comparison_cells,
    fmt_ci,
    fmt_num,
    fmt_p,
)

DbOption = Annotated[str, typer.Option(help="DuckDB file.")]
BootOption = Annotated[
    int, typer.Option("--boot", min=1, help="Bootstrap resamples (substitution tests, alpha CI).")
]
SeedOption = Annotated[int, typer.Option(help="Bootstrap seed.")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON.")]


def _dump(value: Any) -> None:
    typer.echo(json.dumps(value, indent=2, default=str))


def _agreement_table(result: dict[str, Any]) -> Table:
    title = f"run {result['run_id']}" + (f" ({result['name']})" if result["name"] else "")
    title += f": {result['model']}" + (" [SIMULATED]" if result["simulated"] else "")
    table = Table(title=escape(title))
    table.add_column("attribute", no_wrap=True)
    table.add_column("units")
    for column in (
        "ICC(3,k)",
        "95% CI",
        "alpha ord.",
        "AC2 ord.",
        "median diff",
        "Wilcoxon p",
        "% agree",
        "kappa",
    ):
        table.add_column(column, justify="right")
    blocks = [*result["per_attribute"].items(), ("pooled", result["pooled"])]
    for name, block in blocks:
        s = block_summary(block)
        table.add_row(
            f"[bold]{name}[/]" if name == "pooled" else name,
            fmt_num(s["n_units"]),
            fmt_num(s["icc3k"]),
            fmt_ci(s["icc3k_ci95"]),
            fmt_num(s["alpha_ordinal"]),
            fmt_num(s["ac2_ordinal"]),
            fmt_num(s["median_difference"], 2),
            fmt_p(s["wilcoxon_p"]),
            fmt_num(s["percent_agreement"]),
            fmt_num(s["kappa"]),
        )
    return table


def agree_command(
    runs: Annotated[
        list[str] | None, typer.Argument(help="Run ids or unique prefixes.", show_default=False)
    ] = None,
    db: DbOption = str(DEFAULT_DB),
    ratings: Annotated[
        Path | None,
        typer.Option(
            help="Analyse a standalone ratings file (unit_id, rater_id, score[, attribute]) "
            "instead of runs; no database is used."
        ),
    ] = None,
    judge: Annotated[
        str | None, typer.Option(help="With --ratings: the rater id to treat as the judge.")
    ] = None,
    as_json: JsonOption = False,
    boot: BootOption = 1000,
    seed: SeedOption = 0,
) -> None:
    """Agreement of each run's judge with the imported physicians' ratings.

    Per attribute and pooled: ICC(3,k) of the judge's final score against the physicians'
    median (primary, with F-based 95% CI), Krippendorff's alpha, Gwet's AC2, Wilcoxon
    signed-rank, median difference; binary attributes get percent agreement and kappa.
    With --json one run prints an object, several runs a list of objects.
    """
    if ratings is not None:
        if runs:
            fail("give either runs or --ratings FILE, not both", EXIT_USAGE)
        try:
            result = agreement_for_file(str(ratings), judge=judge, n_boot=boot, seed=seed)
        except (InputError, AgreementError, ValueError) as exc:
            fail(str(exc), EXIT_USAGE)
        _dump(result)
        return
    if judge is not None:
        fail("--judge goes with --ratings; a run's judge is its final score", EXIT_USAGE)
    if not runs:
        fail("name at least one run (or use --ratings FILE)", EXIT_USAGE)
    results = []
    with open_store(db, read_only=True) as store:
        for run_id in runs:
            try:
                results.append(agreement_for_run(store, run_id, n_boot=boot, seed=seed))
            except (StoreError, AgreementError) as exc:
                fail(str(exc), EXIT_USAGE)
    if as_json:
        _dump(results[0] if len(results) == 1 else results)
        return
    for result in results:
        if result["simulated"]:
            console.print(f"[bold yellow]{SIMULATED_NOTICE}[/]")
        stdout.print(_agreement_table(result))
        stdout.print(
            f"{result['n_items_rated']} of {result['n_items_run']} items rated by "
            f"{len(result['raters'])} rater(s); ICC, alpha and AC2 compare the judge with the "
            "raters' median; Wilcoxon zero_method 'wilcox'. --json prints everything.",
            highlight=False,
        )


def compare_command(
    runs: Annotated[list[str], typer.Argument(help="Run ids or unique prefixes.")],
    db: DbOption = str(DEFAULT_DB),
    sort: Annotated[
        str | None,
        typer.Option(help=f"Sort by one of: {', '.join(SORT_COLUMNS)} (best first)."),
    ] = None,
    as_json: JsonOption = False,
    boot: BootOption = 1000,
    seed: SeedOption = 0,
) -> None:
    """One table of judge configurations: agreement, failures, cost and latency per item."""
    if sort is not None and sort not in SORT_COLUMNS:
        fail(f"cannot sort by {sort!r}; choose one of {', '.join(SORT_COLUMNS)}", EXIT_USAGE)
    with open_store(db, read_only=True) as store:
        try:
            comparison = compare_runs(store, runs, sort=sort, n_boot=boot, seed=seed)
        except StoreError as exc:
            fail(str(exc), EXIT_USAGE)
    if as_json:
        _dump({"runs": comparison.rows, "notes": comparison.notes})
        return
    table = Table(title="judge configurations")
    table.add_column("run", no_wrap=True)
    for column in ("name", "rubric", "mode", "model", "shots", "samples"):
        table.add_column(column)
    for column in (
        "ICC(3,k)",
        "95% CI",
        "alpha ord.",
        "AC2 ord.",
        "mean |diff|",
        "failed",
        "cost/item",
        "latency/item",
    ):
        table.add_column(column, justify="right")
    for r in comparison.rows:
        table.add_row(
            r["run_id"],
            escape(r["name"] or ""),
            r["rubric"],
            r["mode"],
            escape(r["model"] or "") + (" [yellow](SIMULATED)[/]" if r["simulated"] else ""),
            *comparison_cells(r),
        )
    stdout.print(table)
    for note in comparison.notes:
        console.print(f"[yellow]note:[/] {escape(note)}")
    if any(r["simulated"] for r in comparison.rows):
        console.print(f"[bold yellow]{SIMULATED_NOTICE}[/]")


def report_command(
    runs: Annotated[list[str], typer.Argument(help="Run id (several with --compare).")],
    out: Annotated[Path, typer.Option(help="Directory for report.html and report.md.")],
    compare: Annotated[
        bool, typer.Option("--compare", help="Compare several runs in one report.")
    ] = False,
    db: DbOption = str(DEFAULT_DB),
    boot: BootOption = 1000,
    seed: SeedOption = 0,
) -> None:
    """Write report.html (self-contained, inline SVG charts) and report.md."""
    if not compare and len(runs) != 1:
        fail("a run report takes one run; add --compare to compare several", EXIT_USAGE)
    with open_store(db, read_only=True) as store:
        try:
            files = write_report(store, runs, out, compare=compare, n_boot=boot, seed=seed)
        except StoreError as exc:
            fail(str(exc), EXIT_USAGE)
    console.print(f"wrote {files.html} and {files.markdown}")
    typer.echo(str(files.html))
