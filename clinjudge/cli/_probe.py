"""`judge probe`: metamorphic tests of a judge configuration (``clinjudge.probe``)."""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from clinjudge.cli._help import PANELS
from clinjudge.cli._options import SETTINGS, Layout, with_settings

_PROBES_HELP = (
    "Probes to run, comma-separated: contradiction, fabrication, omission, padding, disorder, "
    "uncited, stigma, injection, neutral."
)

PROBE_LAYOUT: Layout = (
    *(
        SETTINGS[name]
        for name in (
            "rubric",
            "data",
            "mode",
            "model",
            "base_url",
            "config",
            "samples",
            "concurrency",
            "personas",
            "temperature",
            "max_tokens",
            "timeout",
            "max_cost",
            "name",
            "cache",
        )  # fmt: skip
    ),
    "probes",
    "perturber",
    "run",
    "as_json",
    dataclasses.replace(SETTINGS["seed"], help="Seed of the edits (and of examples)."),
    dataclasses.replace(SETTINGS["limit"], help="Probe only the first N items."),
    dataclasses.replace(
        SETTINGS["dry_run"], help="Build the variants, count tokens and cost; call nothing."
    ),
    dataclasses.replace(
        SETTINGS["resume"], help="Finish an interrupted probe run (its id), then report it."
    ),
    SETTINGS["db"],
    SETTINGS["progress"],
)


@with_settings(PROBE_LAYOUT)
def probe_command(
    probes: Annotated[
        str | None,
        typer.Option(rich_help_panel=PANELS.data, help=_PROBES_HELP, show_default="all"),
    ] = None,
    perturber: Annotated[
        str | None,
        typer.Option(
            rich_help_panel=PANELS.data,
            help="A model (provider/model, reached with the judge's --base-url and key) that "
            "rewrites each rule-based variant more naturally; a rewrite is kept only where the "
            "edit survives it, and labelled (docs/trust.md).",
            show_default=False,
        ),
    ] = None,
    run: Annotated[
        str | None,
        typer.Option(
            rich_help_panel=PANELS.data,
            help="Report an existing probe run again (no judging).",
        ),
    ] = None,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            rich_help_panel=PANELS.output,
            help="Print one row per probe and attribute as JSON on stdout: probe, attribute, "
            "expected, n, share_as_expected, ci_low, ci_high, mean_change.",
        ),
    ] = False,
    **values: Any,
) -> None:
    """Test a judge with controlled edits of each item: does its score drop when the summary
    gets worse, and hold still when it should? Prints the run id.

    Each item gets a seeded, rule-based variant per probe (a contradicted fact, an unsupported
    finding, removed main problems, filler, shuffled sentences, removed citations, stigmatizing
    words, an instruction to the evaluator, a neutral reformatting); originals and variants are
    judged in one run and every variant's scores are compared with its original's. The table
    gives, per probe and attribute, the share that moved as expected with a Wilson 95%
    interval, the mean change and a verdict (docs/trust.md). Passing probes is necessary, not
    sufficient: agreement with physicians remains the test.
    """
    import clinjudge
    from clinjudge.cli._common import EXIT_USAGE, default_db, fail, user_error_text
    from clinjudge.cli._judging import RunPrinter, print_estimate

    settings = {k: v for k, v in values.items() if SETTINGS[k].scope == "config"}
    source = str(values["config"] or "flags")
    printer = RunPrinter(sys.stderr if as_json else sys.stdout)
    db = values["db"] or default_db()
    try:
        if run:
            _show(clinjudge.load_run(run, db=db).probe(), as_json)
            return
        if values["dry_run"]:
            estimate = clinjudge.estimate_probe(
                probes=probes, limit=values["limit"], source=source, **settings
            )
            print_estimate(estimate)
            if perturber:
                sys.stderr.write("note: the perturber's calls are not in this estimate\n")
            return
        with printer.judging():
            if values["resume"]:
                finished = clinjudge.resume(
                    values["resume"], db=db, progress=values["progress"], on_start=printer.start
                )
                result = clinjudge.load_run(finished.run_id, db=db).probe()
                result = result.model_copy(update={"run": finished})
            else:
                extra: dict[str, Any] = {"perturber": perturber} if perturber else {}
                result = clinjudge.probe(
                    probes=probes,
                    **extra,
                    limit=values["limit"],
                    progress=values["progress"],
                    on_start=printer.start,
                    source=source,
                    **settings,
                )
    except clinjudge.UserError as exc:
        fail(user_error_text(exc), EXIT_USAGE)
    assert result.run is not None
    printer.finish(result.run, allow_failures=None)
    _show(result, as_json)


def _fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _show(result: Any, as_json: bool) -> None:
    """The probe table (stderr when stdout carries the JSON rows)."""
    from clinjudge.cli._common import console

    if as_json:
        sys.stdout.write(json.dumps(result.json_rows(), indent=2) + "\n")
    title = f"Probes of run {escape(result.run_id)} ({escape(result.rubric)}, {result.mode})"
    table = Table(title=title)
    for column in ("probe", "attribute", "expected", "n", "as expected [95% CI]", "mean change"):
        table.add_column(column, justify="right" if column == "n" else "left")
    table.add_column("changed")
    table.add_column("verdict")
    for r in result.rows:
        share = (
            "-"
            if r.share_as_expected is None
            else f"{r.share_as_expected:.2f} \\[{_fmt(r.ci_low)}, {_fmt(r.ci_high)}]"
        )
        left_out = []
        if r.n_at_limit:
            left_out.append(f"{r.n_at_limit} at scale end")
        if r.n_unscored:
            left_out.append(f"{r.n_unscored} unscored")
        n_text = str(r.n) + (f" ({', '.join(left_out)})" if left_out else "")
        table.add_row(
            r.probe,
            escape(r.attribute),
            r.expected,
            n_text,
            share,
            _fmt(r.mean_change),
            _fmt(r.share_changed),
            r.verdict,
        )
    console.print(table)
    for v in result.verdicts:
        skipped = "; ".join(f"{n} {escape(reason)}" for reason, n in v.skip_reasons.items())
        line = f"{v.probe} ({v.kind}): [bold]{v.verdict.upper()}[/], {v.variants} variant(s)"
        console.print(line + (f"; skipped: {skipped}" if skipped else ""), soft_wrap=True)
    console.print(
        f"pass: Wilson 95% lower bound >= {result.thresholds.get('directional_pass')} "
        f"(directional) or >= {result.thresholds.get('invariance_pass')} (invariance); weak: "
        "the share reaches the bar but its lower bound does not; fail: below it. Passing "
        "probes is necessary, not sufficient (docs/trust.md)."
    )
    perturbed = result.perturber
    if perturbed:  # variants a model rewrote are labelled as such (docs/trust.md)
        kept = "; ".join(f"{n} {escape(reason)}" for reason, n in perturbed["kept"].items())
        cost = perturbed["cost_usd"]
        console.print(
            f"perturber {escape(perturbed['model'])}: {perturbed['rewritten']} variant(s) "
            f"rewritten, {perturbed['calls']} call(s), "
            + ("cost unknown" if cost is None else f"${cost:.4f}")
            + (f"; kept rule-based: {kept}" if kept else ""),
            soft_wrap=True,
        )
    if result.simulated:
        from clinjudge._util.modes import SIMULATED_NOTICE

        console.print(f"[bold yellow]{SIMULATED_NOTICE}[/]")


def print_probe_comparison(comparison: Any) -> None:
    """The probe table of ``judge compare``: one small table per probe (its verdict, then a
    row per attribute), one column per probe run, two short lines a cell, so that two or
    three runs fit 80 columns; more are split by columns (never cut to "…").

    Args:
        comparison: A :class:`clinjudge.analysis.Comparison` with ``probes``.
    """
    from clinjudge.cli._common import stdout
    from clinjudge.cli._fit import print_fitted
    from clinjudge.reports import (
        PROBE_NOTE,
        probe_row_label,
        probe_runs,
        probe_share_text,
        probe_verdict_text,
    )

    runs = probe_runs(comparison)
    stdout.print("Probes (docs/trust.md); columns:", highlight=False)
    for index, run in enumerate(runs, start=1):
        model = escape(run.model or "") + (" [yellow](SIMULATED)[/]" if run.simulated else "")
        name = f" ({escape(run.name)})" if run.name else ""
        stdout.print(f"  {index}: {escape(run.run_id)}{name}, {model}", highlight=False)
    table: Table | None = None
    for row in comparison.probes:
        if row.attribute is None:
            if table is not None:
                print_fitted(stdout, table)
            table = Table(title=None, show_edge=True)
            table.add_column(escape(probe_row_label(row)), no_wrap=True)
            for index, _ in enumerate(runs, start=1):
                table.add_column(f"run {index}", no_wrap=True)
            cells = [row.runs.get(r.run_id) for r in runs]
            table.add_row(
                "verdict",
                *("not run" if c is None else f"[bold]{probe_verdict_text(c)}[/]" for c in cells),
            )
            continue
        assert table is not None  # every probe's verdict row comes before its attributes
        cells = [row.runs.get(r.run_id) for r in runs]
        table.add_row(
            escape(probe_row_label(row).strip()),
            *(
                "-" if c is None else f"{c.verdict}, n {c.n or 0}\n{escape(probe_share_text(c))}"
                for c in cells
            ),
        )
    if table is not None:
        print_fitted(stdout, table)
    stdout.print(PROBE_NOTE, highlight=False)
