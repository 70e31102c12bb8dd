"""`judge audit`: several vendors' outputs on the same encounters, one judge configuration."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

import clinjudge
from clinjudge._util.blas_threads import single_blas_thread
from clinjudge.analysis import AUDIT_BOOT, AuditStatistics, audit_plan
from clinjudge.cli._common import (
    EXIT_USAGE,
    console,
    default_db,
    fail,
    open_store,
    user_error_text,
)
from clinjudge.cli._help import PANELS
from clinjudge.cli._options import AUDIT_LAYOUT, SETTINGS, DbOption, with_settings
from clinjudge.cli._outcome import exit_on_failures, parse_allow_failures
from clinjudge.errors import UserError
from clinjudge.runs import StoreError, check_output_file

_STATS = "Audit statistics"


def _fmt(value: Any, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _print_audit(audit: AuditStatistics, out: Path | None) -> None:
    # Vendor names, attributes and ids are data: escaped so rich never reads them as markup.
    table = Table(title=f"Vendor audit {escape(audit.run_id)}: mean \\[95% CI] per attribute")
    table.add_column("attribute")
    for vendor in audit.vendors:
        table.add_column(escape(vendor), justify="right")
    for attribute in audit.attributes:
        cells = []
        for vendor in audit.vendors:
            s = audit.summaries[vendor][attribute]
            ci = s.ci95
            ci_text = f" \\[{ci[0]:.2f}, {ci[1]:.2f}]" if ci else ""
            cells.append(f"{_fmt(s.mean)}{ci_text} n={s.n}")
        table.add_row(escape(attribute), *cells)
    console.print(table)
    significant = [c for c in audit.comparisons if c.significant]
    console.print(
        f"{len(significant)} of {len(audit.comparisons)} paired comparisons significant "
        f"after Holm (alpha {audit.settings.alpha})"
    )
    for c in significant:
        console.print(
            f"  {escape(c.vendor_a)} vs {escape(c.vendor_b)} {escape(c.attribute)}: "
            "median diff "
            f"{_fmt(c.median_difference)}, n={c.n_pairs}, p_holm={c.p_holm:.3g}"
        )
    console.print(
        f"{len(audit.flagged)} flagged item(s) (rules: {escape(', '.join(audit.flag_rules))})"
    )
    for u in audit.unmatched:
        console.print(
            f"  unmatched encounter {escape(str(u.encounter_id))}: missing for "
            f"{escape(', '.join(u.missing))}"
        )
    if audit.simulated:
        console.print("[bold yellow]SIMULATED: scores from the mock provider.[/]")
    if out is not None:
        console.print(
            f"report written to {escape(str(out / 'report.html'))} and "
            f"{escape(str(out / 'report.md'))}"
        )


PPI_LEGEND = (
    "n: items the physicians rated; N: items only the judge scored; lambda: the weight PPI++ "
    "gives the judge's scores (0: the judge added nothing); eff. n: physician-rated items a "
    "physicians-only interval would need to be as narrow (as in report.md and --json)."
)
"""Printed under the terminal's PPI++ table: its column names alone do not say what they are."""


def _print_ppi(audit: AuditStatistics) -> None:
    if audit.ppi is None:
        return
    table = _vendor_table(
        "Physicians' mean, judge-corrected (PPI++) \\[95% CI] | physicians only | judge only",
        ("lambda", "PPI++", "physicians", "judge", "eff. n", "warning"),
    )
    for row in audit.ppi:
        table.add_row(
            *_vendor_cells(row.vendor, row.attribute, row.n, row.N),
            _fmt(row.lam),
            _interval(row.estimate, row.ci_low, row.ci_high),
            _interval(row.classical_mean, row.classical_ci_low, row.classical_ci_high),
            _fmt(row.judge_mean),
            _fmt(row.effective_n, 1),
            escape(row.interval_warning or ""),
        )
    console.print(table)
    console.print(PPI_LEGEND, soft_wrap=True)
    for warning in audit.ppi_warnings or []:
        # Warnings quote vendor and item names from the ratings file: data, never markup.
        console.print(f"[yellow]warning:[/] {escape(warning)}", soft_wrap=True)


def _vendor_table(title: str, numbers: Sequence[str]) -> Table:
    """A table of rows per vendor and attribute with n, N and the given number columns."""
    table = Table(title=title)
    table.add_column("vendor")
    table.add_column("attribute")
    for column in ("n", "N", *numbers):
        table.add_column(column, justify="right")
    return table


def _vendor_cells(vendor: str, attribute: str, n: int, big_n: int) -> list[str]:
    # Vendor names and attributes are data: escaped so rich never reads them as markup.
    return [escape(vendor), escape(attribute), str(n), str(big_n)]


def _interval(value: float | None, low: float | None, high: float | None) -> str:
    if value is None:
        return "undefined"  # the row's warning says why
    return f"{value:.2f} \\[{_fmt(low)}, {_fmt(high)}]"


def _show(audit: AuditStatistics, out: Path | None, as_json: bool) -> None:
    """An audit's statistics: JSON on stdout when asked for, then the tables on stderr."""
    if as_json:
        sys.stdout.write(json.dumps(audit.to_dict(), indent=2, default=str) + "\n")
    _print_audit(audit, out)
    _print_ppi(audit)


audit_app = typer.Typer(
    help="Audit several vendors on the same encounters: one run, then per-vendor statistics, "
    "paired tests (Wilcoxon, Holm), flagged items, cost and a report. Prints the run id.",
    invoke_without_command=True,
)

RatingsOption = Annotated[
    Path | None,
    typer.Option(
        rich_help_panel=_STATS,
        help="Physicians' ratings of a random sample of the items (JSONL, CSV or Parquet: "
        "item_id as stored (VENDOR::ID) or vendor + item_id, rater_id, attribute, score): adds "
        "judge-corrected (PPI++) estimates of the physicians' means per vendor and vendor pair.",
    ),
]


@audit_app.callback(invoke_without_command=True)
@with_settings(AUDIT_LAYOUT)
def audit_command(
    ctx: typer.Context,
    data: Annotated[
        list[Path] | None,
        typer.Option(
            rich_help_panel=PANELS.data,
            help="A vendor's outputs (repeat per vendor; the vendor is the file stem unless "
            "records carry `vendor`), or one file whose records all carry `vendor`.",
        ),
    ] = None,
    run: Annotated[
        str | None,
        typer.Option(
            rich_help_panel=PANELS.data,
            help="Recompute statistics and report of an existing audit run (no judging).",
        ),
    ] = None,
    flag: Annotated[
        list[str] | None,
        typer.Option(
            rich_help_panel=_STATS,
            help="Flag rule attribute<=V, >=V, ==V, <V or >V (repeatable); prm<P flags items whose "
            "lowest PRM step score is below P.",
            show_default="accurate<=2 and voice_summ>=1 where the rubric has them; prm<0.5 when "
            "the run used a PRM",
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(rich_help_panel=PANELS.output, help="Write report.html + report.md here."),
    ] = None,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            rich_help_panel=PANELS.output,
            help="Print the whole result as JSON on stdout.",
        ),
    ] = False,
    boot: Annotated[
        int,
        typer.Option(
            rich_help_panel=_STATS,
            help="Bootstrap resamples for the CIs (stored with the audit: the viewer uses them).",
        ),
    ] = AUDIT_BOOT,
    ratings: RatingsOption = None,
    strict: Annotated[
        bool,
        typer.Option(
            "--strict",
            rich_help_panel=_STATS,
            help="With --ratings: stop (exit 2) when a rating names a vendor or item this audit "
            "does not have, before any judging; without it such ratings are left out and "
            "each one is named in the warnings.",
        ),
    ] = False,
    **values: Any,
) -> None:
    """Audit several vendors on the same encounters: one run, then per-vendor statistics,
    paired tests (Wilcoxon, Holm), flagged items, cost and a report. Prints the run id."""
    if ctx.invoked_subcommand is not None:
        return
    # Imported here: they load the API, the workflows and the model clients (about 1 s), which
    # `judge audit plan` (a subcommand) does not need (#39).
    from clinjudge.cli._judging import RunPrinter, print_estimate
    from clinjudge.orchestration import ConfigError

    rules = list(flag) if flag else None
    allow_failures: str = values["allow_failures"]
    parse_allow_failures(allow_failures)
    # Run settings go to the API by name, as `judge run`'s do.
    settings = {k: v for k, v in values.items() if SETTINGS[k].scope == "config"}
    source = str(values["config"] or "flags")
    printer = RunPrinter(sys.stderr if as_json else sys.stdout)
    try:
        if run:
            if data:
                raise ConfigError("pass either --run (recompute) or --data (new audit), not both")
            stored = clinjudge.load_run(run, db=values["db"] or default_db())
            again = stored.audit(
                rules=rules,
                n_boot=boot,
                seed=values["seed"] or 0,
                ratings=ratings,
                report_dir=out,
                strict=strict,
            )
            _show(again, out, as_json)
            return
        vendors = [str(p) for p in data] if data else None
        if values["dry_run"]:
            print_estimate(
                clinjudge.estimate_audit(
                    vendors,
                    rules=rules,
                    ratings=ratings,
                    strict=strict,
                    batch=values["batch"],
                    source=source,
                    **settings,
                )
            )
            return
        with printer.judging():
            result = clinjudge.audit(
                vendors,
                rules=rules,
                report_dir=out,
                n_boot=boot,
                progress=values["progress"],
                ratings=ratings,
                strict=strict,
                batch=values["batch"],
                poll_interval=values["poll_interval"],
                on_start=printer.start,
                source=source,
                **settings,
            )
    except UserError as exc:
        fail(user_error_text(exc), EXIT_USAGE)
    assert result.run is not None and printer.started is not None
    # The exit code rule applies after the statistics (failed items still get reported).
    printer.finish(result.run, allow_failures=None)
    shard = printer.started.config.shard
    if shard:
        console.print(
            f"[yellow]shard {shard}: the statistics below cover this shard only.[/] "
            f"Merge the shards with `judge db merge ... --into ALL.duckdb`, then run "
            f"`judge audit --run {result.run_id} --db ALL.duckdb` for the whole audit."
        )
    _show(result, out, as_json)
    exit_on_failures(result.run, allow_failures)


@audit_app.command("plan")
@single_blas_thread()  # small matrices: no pool of spinning threads (#39)
def plan_command(
    run: Annotated[str, typer.Option(help="The audit run whose items are to be sampled.")],
    size: Annotated[
        int, typer.Option(min=2, help="Items for physicians to rate, per vendor.")
    ] = 40,
    seed: Annotated[int, typer.Option(help="Seed of the random sample.")] = 0,
    correlation: Annotated[
        float,
        typer.Option(
            min=0.0,
            max=1.0,
            help="Assumed judge-physician correlation, for the expected interval widths.",
        ),
    ] = 0.7,
    out: Annotated[
        Path | None,
        typer.Option(help="Write the sample as JSONL (vendor, item_id) for the raters."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the plan as JSON.")] = False,
    db: DbOption = None,
) -> None:
    """Propose a seeded random sample of each vendor's items for physicians to rate, and the
    confidence-interval half-widths to expect from it (PPI++ and physicians alone)."""
    try:
        with open_store(db or default_db(), read_only=True) as store:
            plan = audit_plan(store, run, size=size, seed=seed, correlation=correlation)
    except UserError as exc:
        fail(user_error_text(exc), EXIT_USAGE)
    if out is not None:
        lines = [json.dumps({"vendor": r.vendor, "item_id": r.encounter_id}) for r in plan.sample]
        _write_sample(out, "\n".join(lines) + "\n")
    if as_json:
        sys.stdout.write(json.dumps(plan.to_dict(), indent=2) + "\n")
        return
    table = _vendor_table(
        f"Expected 95% CI half-widths with {size} rated items per vendor",
        ("PPI++", "physicians only", "warning"),
    )
    for row in plan.expected:
        table.add_row(
            *_vendor_cells(row.vendor, row.attribute, row.n, row.N),
            f"±{row.ppi_half_width:.2f}",
            f"±{row.classical_half_width:.2f}",
            escape(row.warning or ""),
        )
    console.print(table)
    console.print(
        f"{len(plan.sample)} items to rate (seed {seed}, assumed correlation {correlation})"
        + (f"; written to {escape(str(out))}" if out else "; --out FILE writes them")
    )


def _write_sample(out: Path, text: str) -> None:
    """Write the sample file whole or not at all, never through a link, owner-only."""
    try:
        check_output_file(out)
        partial = out.with_name(f".{out.name}.partial")
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(partial, out)
    except StoreError as exc:
        fail(str(exc), EXIT_USAGE)
    except OSError as exc:
        fail(f"{out}: cannot write: {exc.strerror or exc}")
