"""`judge agree`, `judge compare` and `judge report`: how far judges agree with physicians.

The statistics, the store and the report writer load when a command runs, not at import:
``judge agree --help`` costs what ``judge run --help`` does.
"""

from __future__ import annotations

import json
import logging
import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from clinjudge._util.blas_threads import single_blas_thread
from clinjudge._util.pandas_import import without_pandas
from clinjudge.analysis import SORT_COLUMNS
from clinjudge.cli._options import DocLensCompatOption

if TYPE_CHECKING:
    from rich.table import Table

    from clinjudge.analysis import AgreementAnalysis
    from clinjudge.runs import RunStore

log = logging.getLogger(__name__)

BootOption = Annotated[
    int, typer.Option("--boot", min=1, help="Bootstrap resamples (substitution tests, alpha CI).")
]
SeedOption = Annotated[int, typer.Option(min=0, help="Bootstrap seed.")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON.")]


StoreDbOption = Annotated[
    str | None,
    typer.Option(
        "--db",
        help="DuckDB file.",
        show_default="$CLINJUDGE_DB, else runs/clinjudge.duckdb",
    ),
]
"""--db read when the command runs (``runs.default_db``), so --help loads no store."""


def _db(db: str | None) -> str:
    from clinjudge.runs import default_db

    return db or default_db()


def _dump(value: Any) -> None:
    typer.echo(json.dumps(value, indent=2, default=str))


def _keeps_cache(db: str) -> bool:
    """Open an existing, writable store for writing, so agreement analyses are kept in its
    cache for the next compare or report; a missing --db is still an error, never created."""
    path = Path(db)
    return path.is_file() and os.access(path, os.W_OK)


def _open_caching(db: str) -> RunStore:
    """The store, for writing where that keeps the analyses in its cache; read-only where
    another process has it open (`judge view` reads it): the analysis is then computed and
    not kept, as before the cache, rather than refused."""
    from clinjudge.cli._common import open_store

    if _keeps_cache(db):
        from clinjudge.runs import RunStore, StoreError  # noqa: F811 - the run-time import

        try:
            return RunStore(db)
        except StoreError:
            pass  # in use elsewhere: reading is still allowed, or says why not
    return open_store(db, read_only=True)


def _undefined_reason(n_units: int | None) -> str:
    if (n_units or 0) < 2:
        return "fewer than 2 rated units"
    return "the scores do not vary (zero variance), so the statistic is 0/0"


def _agreement_table(result: AgreementAnalysis, title: str) -> tuple[Table, list[str]]:
    """The agreement table (the registry's ``agree`` columns) and one note per statistic that
    is undefined where its scale expects it, with the reason."""
    from rich.markup import escape
    from rich.table import Table

    from clinjudge.analysis import block_rows, column_row, table_columns
    from clinjudge.reports import column_cells, column_headers, fmt_num

    columns = table_columns("agree")
    table = Table(title=escape(title))
    table.add_column("attribute", no_wrap=True)
    table.add_column("units")
    for header in column_headers(columns):
        table.add_column(escape(header), justify="right")
    undefined: dict[tuple[str, str], list[str]] = {}
    for name, block in result.blocks():
        judged = block.judge_vs_physicians
        n_units = judged.n_units if judged else None
        rows = block_rows(block, name)
        cells: list[str] = []
        for column in columns:
            row = column_row(column, rows)
            texts = column_cells(column, row)
            if block.scale in column.required and (row is None or row["value"] is None):
                texts[0] = "undefined"  # expected on this scale: say so, and why below
                key = (column.word or column.label, _undefined_reason(n_units))
                undefined.setdefault(key, []).append(name)
            cells += texts
        table.add_row(
            f"[bold]{name}[/]" if name == "pooled" else escape(name), fmt_num(n_units), *cells
        )
    notes = [
        f"{label} undefined for {', '.join(names)}: {reason}"
        for (label, reason), names in undefined.items()
    ]
    return table, notes


@contextmanager
def _quiet_numerics() -> Iterator[None]:
    """Numeric warnings (0/0 on constant scores) become debug logs; tables say "undefined"."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RuntimeWarning)
        yield
    for warning in caught:
        log.debug("%s: %s", warning.category.__name__, warning.message)


@without_pandas()  # Arrow from DuckDB rows and lists only: pandas is not paid for (#39)
@single_blas_thread()  # small matrices: no pool of spinning threads (#39)
def agree_command(
    runs: Annotated[
        list[str] | None,
        typer.Argument(help="Run ids or unique parts of them.", show_default=False),
    ] = None,
    db: StoreDbOption = None,
    ratings: Annotated[
        Path | None,
        typer.Option(
            help="Analyse a standalone ratings file (item_id, rater_id, score[, attribute]; "
            "unit_id is read as item_id) instead of runs; no database is used."
        ),
    ] = None,
    judge: Annotated[
        str | None,
        typer.Option(
            help="With --ratings: the rater id to treat as the judge; without it, the raters' "
            "agreement among themselves."
        ),
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
    from rich.markup import escape

    from clinjudge._util.modes import SIMULATED_NOTICE
    from clinjudge.analysis import agreement_for_file, agreement_for_run
    from clinjudge.cli._common import EXIT_USAGE, console, fail, stdout

    if ratings is not None:
        if runs:
            fail("give either runs or --ratings FILE, not both", EXIT_USAGE)
        with _quiet_numerics():
            analysis = agreement_for_file(str(ratings), judge=judge, n_boot=boot, seed=seed)
        if as_json:
            _dump(analysis.to_dict())
            return
        if judge is None:
            # Nothing to compare a judge with: the raters among themselves is the answer.
            _print_raters_table(analysis, f"{ratings.name}: the raters among themselves")
            raters = sorted(
                {r for _, b in analysis.blocks() for r in b.physicians_among_themselves.raters}
            )
            stdout.print(
                f"No --judge was named, so this is the agreement of the {len(raters)} raters "
                f"({escape(', '.join(raters))}) among themselves; ICC(3,k) is on the items "
                "every rater scored (complete). Name one rater with --judge RATER_ID to compare "
                "it with the others' median.",
                highlight=False,
            )
            return
        _print_table(analysis, f"ratings {ratings}: judge {judge}")
        stdout.print(
            "ICC, alpha and AC2 compare the judge with the other raters' median",
            highlight=False,
        )
        return
    if judge is not None:
        fail("--judge goes with --ratings; a run's judge is its final score", EXIT_USAGE)
    if not runs:
        fail("name at least one run (or use --ratings FILE)", EXIT_USAGE)
    results = []
    path = _db(db)
    with _open_caching(path) as store:
        for run_id in runs:
            with _quiet_numerics():
                results.append(agreement_for_run(store, run_id, n_boot=boot, seed=seed))
    if as_json:
        dicts = [r.to_dict() for r in results]
        _dump(dicts[0] if len(dicts) == 1 else dicts)
        return
    for result in results:
        if result.simulated:
            console.print(f"[bold yellow]{SIMULATED_NOTICE}[/]")
        title = f"run {result.run_id}" + (f" ({result.name})" if result.name else "")
        title += f": {result.model}" + (" [SIMULATED]" if result.simulated else "")
        _print_table(result, title)
        for warning in (result.samples_warning, result.suspect_warning):
            if warning:
                console.print(f"[yellow]warning:[/] {escape(warning)}", soft_wrap=True)
        stdout.print(
            f"{result.n_items_rated} of {result.n_items_run} items rated by "
            f"{len(result.raters)} rater(s); ICC, alpha and AC2 compare the judge with the "
            "raters' median; Wilcoxon zero_method 'wilcox'. --json prints everything.",
            highlight=False,
        )


def _print_table(result: AgreementAnalysis, title: str) -> None:
    from rich.markup import escape

    from clinjudge.cli._common import stdout
    from clinjudge.cli._fit import print_fitted

    table, notes = _agreement_table(result, title)
    print_fitted(stdout, table)  # split by columns on a narrow terminal, never cut to "…"
    for note in notes:
        stdout.print(escape(note), highlight=False, soft_wrap=True)


def _print_raters_table(result: AgreementAnalysis, title: str) -> None:
    """The raters' agreement among themselves per attribute and pooled (``--ratings`` without
    ``--judge``), fitted to the terminal like the judge's table.

    Args:
        result: The analysis of a ratings file.
        title: The table's title.
    """
    from rich.markup import escape
    from rich.table import Table

    from clinjudge.analysis import table_columns
    from clinjudge.cli._common import stdout
    from clinjudge.cli._fit import print_fitted
    from clinjudge.reports import column_headers, statistic_cells

    columns = table_columns("raters")
    table = Table(title=escape(title))
    table.add_column("attribute", no_wrap=True)
    for column in ("units", "complete"):
        table.add_column(column, justify="right")
    for header in column_headers(columns):
        table.add_column(escape(header), justify="right")
    for name, block in result.blocks():
        phys = block.physicians_among_themselves
        table.add_row(
            f"[bold]{name}[/]" if name == "pooled" else escape(name),
            str(phys.n_units),
            str(phys.n_units_complete),
            *statistic_cells(block, name, columns),
        )
    print_fitted(stdout, table)


@without_pandas()  # Arrow from DuckDB rows and lists only: pandas is not paid for (#39)
@single_blas_thread()  # small matrices: no pool of spinning threads (#39)
def compare_command(
    runs: Annotated[list[str], typer.Argument(help="Run ids or unique parts of them.")],
    db: StoreDbOption = None,
    sort: Annotated[
        str | None,
        typer.Option(help=f"Sort by one of: {', '.join(SORT_COLUMNS)} (best first)."),
    ] = None,
    as_json: JsonOption = False,
    boot: BootOption = 1000,
    seed: SeedOption = 0,
) -> None:
    """One table of judge configurations: agreement, failures, cost and latency per item."""
    from rich.markup import escape
    from rich.table import Table

    from clinjudge._util.modes import SIMULATED_NOTICE
    from clinjudge.analysis import compare_runs, sort_columns, table_columns
    from clinjudge.cli._common import EXIT_USAGE, console, fail, stdout
    from clinjudge.cli._fit import print_fitted, short_model
    from clinjudge.reports import column_headers, comparison_cells

    sortable = sort_columns()  # SORT_COLUMNS and the registered statistics' compare columns
    if sort is not None and sort not in sortable:
        fail(f"cannot sort by {sort!r}; choose one of {', '.join(sortable)}", EXIT_USAGE)
    path = _db(db)
    with _open_caching(path) as store, _quiet_numerics():
        comparison = compare_runs(store, runs, sort=sort, n_boot=boot, seed=seed)
    if as_json:
        _dump(comparison.to_dict())
        return
    table = Table(title="judge configurations")
    table.add_column("run", no_wrap=True)
    for column in ("name", "rubric", "mode", "model", "shots", "samples"):
        table.add_column(column)
    for column in (
        *column_headers(table_columns("compare")),
        "mean |diff|",
        "failed",
        "cost/item",
        "latency/item",
        "cached in",
    ):
        table.add_column(escape(column), justify="right")  # a plugin's label is text
    for r in comparison.rows:
        table.add_row(
            r.run_id,
            escape(r.name or ""),
            r.rubric,
            r.mode,
            # An hf/ model by its file name (--json has the full path).
            escape(short_model(r.model or "")) + (" [yellow](SIMULATED)[/]" if r.simulated else ""),
            *comparison_cells(r),
            # Share of prompt tokens the provider's prompt cache served (#22).
            "" if r.cached_input_share is None else f"{r.cached_input_share:.0%}",
        )
    print_fitted(stdout, table)  # split by columns on a narrow terminal, never cut to "…"
    if comparison.probes:  # probe runs: their results side by side (#37)
        from clinjudge.cli._probe import print_probe_comparison

        print_probe_comparison(comparison)
    for note in comparison.notes:
        console.print(f"[yellow]note:[/] {escape(note)}")
    if any(r.simulated for r in comparison.rows):
        console.print(f"[bold yellow]{SIMULATED_NOTICE}[/]")


@without_pandas()  # Arrow from DuckDB rows and lists only: pandas is not paid for (#39)
@single_blas_thread()  # small matrices: no pool of spinning threads (#39)
def report_command(
    runs: Annotated[list[str], typer.Argument(help="Run id (several with --compare).")],
    out: Annotated[Path, typer.Option(help="Directory for report.html and report.md.")],
    compare: Annotated[
        bool, typer.Option("--compare", help="Compare several runs in one report.")
    ] = False,
    db: StoreDbOption = None,
    boot: BootOption = 1000,
    seed: SeedOption = 0,
    flag: Annotated[
        list[str] | None,
        typer.Option(
            help="Flag rule attribute<=V, >=V, ==V, <V or >V (repeatable); prm<P flags items whose "
            "lowest PRM step score is below P. Default: those of accurate<=2 and voice_summ>=1 "
            "that the rubric has, and prm<0.5 when the run has PRM step scores."
        ),
    ] = None,
    max_items: Annotated[
        int | None,
        typer.Option(
            min=0,
            help="Rows of the per-item table (0: every item; counts always cover all).",
            show_default="200",
        ),
    ] = None,
    doclens_compat: DocLensCompatOption = None,
) -> None:
    """Write report.html (self-contained, inline SVG charts) and report.md: final scores per
    attribute, failures, flags and items, and agreement where physicians' ratings exist."""
    from rich.markup import escape

    from clinjudge.cli._common import EXIT_USAGE, console, fail
    from clinjudge.reports import DEFAULT_MAX_ITEMS, write_report

    if max_items is None:
        max_items = DEFAULT_MAX_ITEMS  # the --help text says its value; a test checks
    if not compare and len(runs) != 1:
        fail("a run report takes one run; add --compare to compare several", EXIT_USAGE)
    path = _db(db)
    with _open_caching(path) as store:
        files = write_report(
            store,
            runs,
            out,
            compare=compare,
            n_boot=boot,
            seed=seed,
            flag_rules=list(flag) if flag else None,
            max_items=max_items or None,
            doclens_compat=doclens_compat,
        )
    console.print(f"wrote {escape(str(files.html))} and {escape(str(files.markdown))}")
    typer.echo(str(files.html))
